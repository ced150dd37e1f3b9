r"""``rl``: a placement policy trained by gradient-sampling reinforcement learning on the model.

The policy places the new jobs one at a time, in :meth:`Problem.order` (gangs first). For the
job :math:`i` at hand and each of its candidates :math:`c` (GPU classes, or GPU sets for a
gang: :meth:`Problem.candidates`) it computes a feature vector :math:`x_{ic}` and scores

.. math::
    h_c = \phi(x_{ic}), \qquad
    \ell_c = \rho\bigl(h_c,\ \tfrac{1}{C}\textstyle\sum_{c'} h_{c'}\bigr), \qquad
    \pi(c \mid i, \text{state}) = \operatorname{softmax}_c(\ell_c),

with :math:`\phi, \rho` small MLPs shared by every job and candidate (a Deep Sets layer).
Permuting the candidates permutes the scores, and no feature names a job type or a GPU, so
relabelling GPUs or machines changes a decision only where candidates tie (ties go to the
first in GPU order) and one policy trained on small machines serves any cluster size and job
mix. At decision time it takes :math:`\arg\max_c \ell_c`.

Features (:data:`FEATURES`), all read off the model's posterior through the problem: the
predicted objective gain of the candidate, its gap to the best candidate's, the job's speed
alone; the job's posterior demand, pressure (demand times intensity) and sensitivity on GPU
compute and memory bandwidth, and the same averaged over the candidate GPUs' current jobs; the
candidate GPUs' load and the load of the GPUs sharing a domain with them; the machine's load (a
load is the share of slots taken, by jobs or reserved: :meth:`Problem.taken`);
the gang's communication factor (its topology class) and its size.

Training (:func:`train_policy`): *gradient sampling* (Symphony, ICML'20). Each episode draws a
job mix, and the policy places it :math:`K` times (actions sampled from :math:`\pi`). Each
rollout :math:`k` is scored on the same :math:`S` posterior draws of the model (common random
numbers: the same draw index for every rollout), giving per-draw objectives :math:`R^{(s)}_k`.
The REINFORCE estimate averages over both the sampled actions and the posterior draws,

.. math::
    \nabla J \approx \frac{1}{K} \sum_k \Bigl[\frac{1}{S}\sum_s \bigl(R^{(s)}_k - b^{(s)}\bigr)
    \Bigr] \nabla \log \pi(a_k), \qquad b^{(s)} = \frac{1}{K - 1}\sum_{k' \ne k} R^{(s)}_{k'},

so the policy learns what is good across what the model does not know, and needs no new
measurement. Variance reduction: the input-dependent leave-one-out baseline :math:`b` (the
other rollouts on the same job mix, as Decima's), the common posterior draws (a rollout's
advantage is free of Monte Carlo noise between rollouts), and advantages scaled by their
standard deviation over rollouts. For ``objective="risk-averse"`` or ``"max-min"`` the reward
is that objective over the draws, so the policy is trained for it.

Policies are saved as ``policy.safetensors`` (weights) + ``policy.json`` (configuration), never
pickled (:func:`save_policy`, :func:`load_policy`). A default policy trained on the packaged
Gavel V100 model ships in ``interplace/data/policies/default`` (its README says how).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from interplace.errors import (
    InputError,
    check_digest,
    check_output_parent,
    check_replaceable_dir,
    check_seed,
    is_int,
    is_real,
    open_saved_dir,
    save_dir,
)
from interplace.placement._problem import RISK_QUANTILE, Problem, SpeedCache, State
from interplace.placement._sources import SpeedSource
from interplace.placement._types import Job
from interplace.topology import Topology

__all__ = [
    "FEATURES",
    "RLPolicy",
    "default_policy",
    "load_policy",
    "save_policy",
    "train_policy",
]

FEATURES = (
    "gain",
    "gain_gap",
    "alone",
    "demand_compute",
    "demand_membw",
    "pressure_compute",
    "pressure_membw",
    "sensitivity_compute",
    "sensitivity_membw",
    "occupant_demand_compute",
    "occupant_pressure_compute",
    "occupant_sensitivity_compute",
    "gpu_load",
    "domain_load",
    "machine_load",
    "comm_factor",
    "gang_size",
)
"""The per-(job, candidate) features, in order (module docstring)."""

_FORMAT = "interplace-placement-policy"
_VERSION = 1
_META = "policy.json"
_WEIGHTS = "policy.safetensors"
POLICY_FILES = (_META, _WEIGHTS)
"""What :func:`save_policy` writes into its directory."""
_PACKAGED = Path(__file__).resolve().parents[1] / "data" / "policies" / "default"


class _Net(nn.Module):
    """Deep Sets scorer over one job's candidates: ``(C, F) -> (C,)`` logits."""

    def __init__(self, n_features: int, hidden: int) -> None:
        super().__init__()
        self.phi = nn.Sequential(
            nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.rho = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.phi(x)
        ctx = h.mean(0, keepdim=True).expand_as(h)
        out: torch.Tensor = self.rho(torch.cat([h, ctx], dim=-1)).squeeze(-1)
        return out


def _job_summaries(problem: Problem) -> np.ndarray:
    """Per job type: demand, pressure and sensitivity on GPU compute and memory, ``(T, 6)``.

    Posterior medians (demand, pressure) and means (sensitivity) from the model; zeros for a
    source without a posterior (measured speeds)."""
    out = np.zeros((len(problem.types), 6))
    draws_fn = getattr(problem.source, "draws", None)
    resources = getattr(problem.source, "resources", None)
    if draws_fn is None or resources is None:
        return out
    from interplace.model._net import pressure, sensitivity

    d = draws_fn(64, 0)
    press = pressure(d["log_demand"], d["log_intensity"]).median(0).values
    sens = sensitivity(
        d["log_demand"], d["sens_eps"], d["sens_loc"], d["sens_slope"], d["sens_scale"]
    ).mean(0)
    demand = d["log_demand"].exp().median(0).values
    for k, r in enumerate(("gpu_compute", "gpu_membw")):
        if r in resources:
            col = list(resources).index(r)
            out[:, k] = demand[:, col].numpy()
            out[:, 2 + k] = press[:, col].numpy()
            out[:, 4 + k] = sens[:, col].numpy()
    return out


TYPE_FEATURES = ("gpu_load", "domain_load", "machine_load", "comm_factor", "gang_size")
"""The load features of the model-free variant (``features="types"``), which adds a one-hot
of the job's type and the counts of each type on the candidate GPUs: it sees no prediction, so
it must learn every pair's effect from rewards (the benchmark's model-free baseline)."""


class _TypeFeaturizer:
    """Model-free features: job type one-hot, occupant type counts, loads (no predictions)."""

    def __init__(self, problem: Problem, types: Sequence[str]) -> None:
        self.problem = problem
        index = {t: k for k, t in enumerate(types)}
        missing = sorted(set(problem.types[t] for t in problem.inst_type) - set(index))
        if missing:
            raise InputError(f"the policy was trained without job type(s) {', '.join(missing)}")
        self.code = [index.get(t, -1) for t in problem.types]
        self.n = len(types)

    def __call__(
        self, st: State, i: int, candidates: Sequence[tuple[int, ...]]
    ) -> torch.Tensor:
        p = self.problem
        cap = p.max_per_gpu
        rows = []
        for c in candidates:
            x = np.zeros(2 * self.n + len(TYPE_FEATURES))
            x[self.code[p.inst_type[i]]] = 1.0
            for g in c:
                for k in st.occ[g]:
                    x[self.n + self.code[p.inst_type[k]]] += 1.0 / len(c)
            nbr = [h for g in c for h, _ in p.nbrs[g]]
            machine = p.machines[p.machine_of[c[0]]]
            x[2 * self.n:] = [
                sum(p.taken(st, g) for g in c) / (cap * len(c)),
                sum(p.taken(st, h) for h in nbr) / (cap * len(nbr)) if nbr else 0.0,
                sum(p.taken(st, g) for g in machine) / (cap * len(machine)),
                p.comm_factor(i, c),
                math.log2(len(c)),
            ]
            rows.append(x)
        return torch.as_tensor(np.asarray(rows, dtype=np.float32))


class _Featurizer:
    """Computes :data:`FEATURES` for every candidate of a job in a state."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.summary = _job_summaries(problem)

    def __call__(
        self, st: State, i: int, candidates: Sequence[tuple[int, ...]]
    ) -> torch.Tensor:
        p = self.problem
        gains = np.asarray(p.move_gains(st, [{i: c} for c in candidates]))
        best = float(gains.max()) if len(gains) else 0.0
        t = p.inst_type
        s_i = self.summary[t[i]]
        alone = p.alone_mean(i)
        cap = p.max_per_gpu
        rows = []
        for c, gain in zip(candidates, gains, strict=True):
            occupants = [k for g in c for k in st.occ[g]]
            occ_s = (
                self.summary[[t[k] for k in occupants]].mean(0) if occupants else np.zeros(6)
            )
            nbr = [h for g in c for h, _ in p.nbrs[g]]
            domain = sum(p.taken(st, h) for h in nbr) / (cap * len(nbr)) if nbr else 0.0
            machine = p.machines[p.machine_of[c[0]]]
            rows.append([
                gain, gain - best, alone,
                s_i[0], s_i[1], s_i[2], s_i[3], s_i[4], s_i[5],
                occ_s[0], occ_s[2], occ_s[4],
                sum(p.taken(st, g) for g in c) / (cap * len(c)),
                domain,
                sum(p.taken(st, g) for g in machine) / (cap * len(machine)),
                p.comm_factor(i, c),
                math.log2(len(c)),
            ])
        return torch.as_tensor(np.asarray(rows, dtype=np.float32))


@dataclass(frozen=True, eq=False)
class RLPolicy:
    """A trained placement policy; call it as any policy: ``policy(problem, seed=0)``.

    ``info`` records how it was trained (episodes, objective, seeds, final reward).
    """

    net: _Net
    hidden: int
    info: dict[str, Any]
    types: tuple[str, ...] | None = None

    def featurizer(self, problem: Problem) -> Callable[..., torch.Tensor]:
        """The features this policy was trained on, for ``problem``."""
        if self.types is None:
            return _Featurizer(problem)
        return _TypeFeaturizer(problem, self.types)

    @property
    def __name__(self) -> str:  # place() names the policy after the function it is given
        return "rl"

    def __call__(self, problem: Problem, *, seed: int = 0) -> State:
        """Place the new jobs greedily by the policy's scores (deterministic)."""
        del seed
        st, _ = _rollout(self.net, problem, self.featurizer(problem), sample=None)
        return st


def _rollout(
    net: _Net,
    problem: Problem,
    feats: Callable[..., torch.Tensor],
    sample: torch.Generator | None,
) -> tuple[State, torch.Tensor]:
    """Place every new job with the policy: argmax (``sample`` None) or sampled actions.

    Returns the state and the summed log-probability of the actions taken."""
    st = problem.empty_state()
    logp = torch.zeros(())
    for i in problem.order():
        cands = problem.candidates(st, i)
        if not cands:
            continue
        x = feats(st, i, cands)
        logits = net(x)
        if sample is None:
            a = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits, dim=0)
            a = int(torch.multinomial(probs, 1, generator=sample))
            logp = logp + torch.log_softmax(logits, dim=0)[a]
        problem.assign(st, i, cands[a])
    return st, logp


def _per_draw(problem: Problem, st: State) -> torch.Tensor:
    """``(S,)``: the objective's per-draw value of ``st`` (its quantile for risk-averse)."""
    handles = [h for h in st.handle if h >= 0]
    if not handles:
        return torch.zeros(problem.num_samples, dtype=torch.float64)
    return problem.per_draw(handles)


def _reward(problem: Problem, per_draw: torch.Tensor) -> torch.Tensor:
    if problem.objective == "risk-averse":
        # The quantile over draws is the reward itself; every draw carries it.
        return torch.quantile(per_draw, RISK_QUANTILE).expand_as(per_draw)
    return per_draw


def train_policy(
    model: SpeedSource,
    topology: Topology,
    *,
    episodes: int = 150,
    jobs_per_episode: tuple[int, int] = (6, 16),
    rollouts: int = 8,
    hidden: int = 32,
    lr: float = 0.01,
    objective: str = "sum",
    max_per_gpu: int = 2,
    num_samples: int = 64,
    seed: int = 0,
    types: Sequence[str] | None = None,
    can_share: Callable[[str, str], bool] | None = None,
    features: str = "model",
    progress: bool = False,
    callback: Callable[[int, RLPolicy], None] | None = None,
) -> RLPolicy:
    """Train a policy by gradient-sampling REINFORCE on ``model`` (module docstring).

    Each episode places a seeded mix of ``jobs_per_episode`` single-GPU jobs of ``types``
    (default: every job type of the model) on ``topology`` ``rollouts`` times. The rewards
    are drawn from ``model`` (a fitted model: ``num_samples`` common posterior draws; a
    :class:`~interplace.placement.MeasuredSpeeds`: the measured speeds, one reward per
    rollout: the model-free baseline). ``callback(episode, policy)`` is called after each
    episode (for learning curves). ``features="types"`` trains the model-free variant
    (:data:`TYPE_FEATURES`), which sees job types instead of predictions.
    ``info["reward_per_job_last20"]``: the mean reward of the last 20 episodes per job placed
    (for ``"max-min"``, whose reward is the slowest job's speed, that speed).
    """
    if features not in ("model", "types"):
        raise InputError(f"features must be 'model' or 'types', not {features!r}")
    for name, value, low in (("episodes", episodes, 1), ("rollouts", rollouts, 2),
                             ("hidden", hidden, 2), ("num_samples", num_samples, 1)):
        if not is_int(value, low):
            raise InputError(f"{name} must be an integer >= {low}, not {value!r}")
    check_seed(seed)
    if not (is_real(lr) and lr > 0):
        raise InputError(f"lr must be a finite number > 0, not {lr!r}")
    bounds = tuple(jobs_per_episode) if isinstance(jobs_per_episode, tuple | list) else ()
    if not (len(bounds) == 2 and all(is_int(b, 1) for b in bounds) and bounds[0] <= bounds[1]):
        raise InputError(f"jobs_per_episode must be (low, high), whole numbers with "
                         f"1 <= low <= high, not {jobs_per_episode!r}")
    lo, hi = bounds
    if isinstance(types, str):  # list("job0") would be its letters
        raise InputError(f"types must be a sequence of job types, not the string {types!r}")
    pool = list(types) if types is not None else list(model.jobs)
    if not pool:
        raise InputError("no job types to train on")
    unknown = [t for t in pool if t not in set(model.jobs)]
    if unknown:
        raise InputError(f"types: {unknown[0]!r} is not a job type of the model")
    types = tuple(pool) if features == "types" else None
    n_in = _n_inputs(types)
    with torch.random.fork_rng(devices=[]):  # the caller's torch stream is left as it was
        torch.manual_seed(seed)  # the network's initial weights; training draws from gen below
        return _train(model, topology, net=_Net(n_in, hidden).to(torch.float32), lr=lr,
                      seed=seed, pool=pool, lo=lo, hi=hi, types=types, episodes=episodes,
                      rollouts=rollouts, hidden=hidden, num_samples=num_samples,
                      max_per_gpu=max_per_gpu, objective=objective, can_share=can_share,
                      progress=progress, callback=callback, features=features)


def _train(model: SpeedSource, topology: Topology, *, net: _Net, lr: float, seed: int,
           pool: list[str], lo: int, hi: int, types: tuple[str, ...] | None, episodes: int,
           rollouts: int, hidden: int, num_samples: int, max_per_gpu: int, objective: str,
           can_share: Callable[[str, str], bool] | None, progress: bool,
           callback: Callable[[int, RLPolicy], None] | None, features: str) -> RLPolicy:
    """:func:`train_policy`'s loop, its arguments checked."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    cache = SpeedCache(model, num_samples=num_samples, seed=seed)
    from tqdm.auto import tqdm

    from interplace.placement._place import one_thread

    history: list[float] = []
    bar = tqdm(total=episodes, desc="train-policy", unit="episode", disable=not progress,
               leave=False)
    with one_thread():
        try:
            for episode in range(episodes):
                n = int(rng.integers(lo, hi + 1))
                mix = [pool[int(k)] for k in rng.integers(len(pool), size=n)]
                jobs = [Job(f"j{k}", t) for k, t in enumerate(mix)]
                problem = Problem(topology, model, jobs, max_per_gpu=max_per_gpu,
                                  objective=objective, num_samples=num_samples, seed=seed,
                                  can_share=can_share, cache=cache)
                feats = _Featurizer(problem) if types is None else _TypeFeaturizer(problem, types)
                logps, rewards = [], []
                for _ in range(rollouts):
                    st, logp = _rollout(net, problem, feats, sample=gen)
                    logps.append(logp)
                    rewards.append(_reward(problem, _per_draw(problem, st)))
                r = torch.stack(rewards)  # (K, S)
                baseline = (r.sum(0, keepdim=True) - r) / (rollouts - 1)
                adv = (r - baseline).mean(1)  # gradient sampling: averaged over draws
                adv = adv / (adv.std() + 1e-6)
                loss = -(adv.detach().to(torch.float32) * torch.stack(logps)).mean()
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                # A sum's share per job; max-min's reward is already one job's speed.
                history.append(float(r.mean()) / (1 if objective == "max-min" else n))
                bar.update(1)
                bar.set_postfix(reward_per_job=f"{np.mean(history[-20:]):.3f}")
                if callback is not None:
                    callback(episode, _policy(net, hidden, {}, types))
        finally:
            bar.close()
    info = {
        "episodes": episodes,
        "jobs_per_episode": [lo, hi],
        "rollouts": rollouts,
        "lr": lr,
        "objective": objective,
        "max_per_gpu": max_per_gpu,
        "num_samples": num_samples,
        "seed": seed,
        "topology": topology.name,
        "reward_per_job_last20": float(np.mean(history[-20:])),
        "rewards_consumed": episodes * rollouts,
        "features": features,
    }
    return _policy(net, hidden, info, types)


def _n_inputs(types: Sequence[str] | None) -> int:
    return len(FEATURES) if types is None else 2 * len(types) + len(TYPE_FEATURES)


def _policy(
    net: _Net, hidden: int, info: dict[str, Any], types: tuple[str, ...] | None = None
) -> RLPolicy:
    clone = _Net(_n_inputs(types), hidden)
    clone.load_state_dict(net.state_dict())
    clone.eval()
    return RLPolicy(clone, hidden, info, types)


def save_policy(policy: RLPolicy, directory: str | os.PathLike[str]) -> Path:
    """Write ``policy.json`` + ``policy.safetensors`` into ``directory`` (built beside it and
    renamed into place; an existing policy directory is replaced, a directory holding anything
    else refused: :func:`~interplace.errors.check_replaceable_dir`)."""
    from safetensors.torch import save_file

    target = check_replaceable_dir(directory, POLICY_FILES, "an RL policy")
    check_output_parent(target.parent)
    meta = {
        "format": _FORMAT,
        "format_version": _VERSION,
        "features": list(FEATURES) if policy.types is None else list(TYPE_FEATURES),
        "types": None if policy.types is None else list(policy.types),
        "hidden": policy.hidden,
        "info": policy.info,
    }
    tensors = {k: v.detach().contiguous() for k, v in policy.net.state_dict().items()}
    if not all(bool(torch.isfinite(v).all()) for v in tensors.values()):
        raise InputError("the policy's weights hold non-finite values (a training that "
                         "diverged): not saved")

    def write(folder: Path) -> list[Path]:
        save_file(tensors, str(folder / _WEIGHTS), metadata={"format": _FORMAT})
        return [folder / _WEIGHTS]

    save_dir(target, meta, _META, write)
    return target


def load_policy(directory: str | os.PathLike[str]) -> RLPolicy:
    """Read a policy written by :func:`save_policy`; never unpickles anything.

    A missing, foreign or tampered directory raises :class:`InputError` naming the problem.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta_path, meta, weights = open_saved_dir(
        directory, _META, _WEIGHTS, format_name=_FORMAT, what="policy",
        made_by="train-policy writes one",
    )
    if meta.get("format_version") != _VERSION:
        raise InputError(f"{meta_path}: policy format version {meta.get('format_version')!r}; "
                         f"this interplace reads version {_VERSION}")
    types = meta.get("types")
    if types is not None and not (
        isinstance(types, list) and types and all(isinstance(t, str) for t in types)
    ):
        raise InputError(f"{meta_path}: types must be a list of job type names")
    expected = list(FEATURES) if types is None else list(TYPE_FEATURES)
    if meta.get("features") != expected:
        raise InputError(f"{meta_path}: the policy was trained on other features")
    type_tuple = None if types is None else tuple(types)
    hidden = meta.get("hidden")
    if not is_int(hidden, 2):
        raise InputError(f"{meta_path}: hidden must be an integer >= 2, not {hidden!r}")
    try:
        tensors = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"{weights}: not a readable safetensors file ({exc})") from None
    check_digest(meta, [weights], meta_path, "policy")  # before building a net of its size
    first = tensors.get("phi.0.weight")
    if first is None or tuple(first.shape) != (hidden, _n_inputs(type_tuple)):
        raise InputError(f"{weights}: weights do not fit the policy (hidden {hidden}, "
                         f"{_n_inputs(type_tuple)} features)")
    net = _Net(_n_inputs(type_tuple), hidden)
    try:
        net.load_state_dict(tensors)
    except RuntimeError as exc:
        raise InputError(f"{weights}: weights do not fit the policy ({str(exc)[:120]})") from None
    if not all(bool(torch.isfinite(v).all()) for v in tensors.values()):
        raise InputError(f"{weights}: weights hold non-finite values")
    net.eval()
    info = meta.get("info")
    return RLPolicy(net, hidden, dict(info) if isinstance(info, dict) else {}, type_tuple)


def default_policy(problem: Problem, *, seed: int = 0) -> State:
    """The packaged default policy (``interplace/data/policies/default``), as a policy."""
    if not (_PACKAGED / _META).is_file():
        raise InputError("no default rl policy is packaged: train one (interplace train-policy)")
    return load_policy(_PACKAGED)(problem, seed=seed)
