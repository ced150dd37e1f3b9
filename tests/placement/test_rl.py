"""The rl placement policy: training, equivariance, files, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from interplace.cli import main
from interplace.errors import InputError
from interplace.model import InterferenceModel
from interplace.placement import Job, MeasuredSpeeds, place, score
from interplace.placement.rl import load_policy, save_policy, train_policy
from interplace.topology import builtin


@pytest.fixture(scope="module")
def trained(small_model: InterferenceModel) -> object:
    return train_policy(small_model, builtin("pcie-8gpu"), episodes=12, jobs_per_episode=(6, 12),
                        rollouts=4, num_samples=16, seed=0)


def _mix(model: InterferenceModel, n: int, seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    return [Job(f"j{k}", model.jobs[int(rng.integers(len(model.jobs)))]) for k in range(n)]


def test_training_beats_random_on_measured_truth(toy: MeasuredSpeeds) -> None:
    # Model-free training on measured toy speeds: after training, the policy's placements
    # score at least as well as random ones on most mixes. 10 mixes; the trained policy
    # chooses with the speeds as features, random does not: a working trainer wins on at
    # least 7 (random ties or wins on a mix only where the mix leaves little to choose).
    topo = builtin("pcie-8gpu")
    policy = train_policy(toy, topo, episodes=20, jobs_per_episode=(10, 14), rollouts=4,
                          num_samples=1, seed=0, can_share=toy.can_share)
    wins = 0
    for seed in range(10):
        jobs = [Job(f"j{k}", t) for k, t in enumerate(
            np.random.default_rng(seed).choice(["hog", "mid", "light", "x"], 14))]
        a = place(topo, toy, jobs, policy=policy)
        b = place(topo, toy, jobs, policy="random", seed=seed)
        wins += a.objective >= b.objective - 1e-9
    assert wins >= 7


def test_equivariance(small_model: InterferenceModel, trained: object) -> None:
    topo = builtin("dgx-a100")
    jobs = _mix(small_model, 11, 3)
    a = place(topo, small_model, jobs, policy=trained)  # type: ignore[arg-type]
    mapping = {g: f"x{(int(g) * 5) % 8}" for g in topo.gpus()}
    b = place(topo.relabel(mapping), small_model, jobs, policy=trained)  # type: ignore[arg-type]
    assert a.objective == pytest.approx(b.objective)


def test_round_trip_and_feasibility(
    tmp_path: Path, small_model: InterferenceModel, trained: object
) -> None:
    path = save_policy(trained, tmp_path / "pol")  # type: ignore[arg-type]
    again = load_policy(path)
    topo = builtin("dgx-a100*2")
    jobs = [*_mix(small_model, 20, 4), Job("gang", small_model.jobs[0], gpus=4)]
    a = place(topo, small_model, jobs, policy=trained)  # type: ignore[arg-type]
    b = place(topo, small_model, jobs, policy=again)
    assert a.assignment() == b.assignment() and a.policy == "rl"
    assert len({g.split(":")[0] for g in a.assignment()["gang"]}) == 1
    assert score(topo, small_model, a).objective == pytest.approx(a.objective)


def test_tampered_files_are_refused(tmp_path: Path, trained: object) -> None:
    path = save_policy(trained, tmp_path / "pol")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no such policy directory"):
        load_policy(tmp_path / "nope")
    meta = (path / "policy.json").read_text()
    (path / "policy.json").write_text(meta.replace('"hidden": 32', '"hidden": 16'))
    with pytest.raises(InputError, match="the policy's files do not match the sha256"):
        load_policy(path)
    # Without the digest (saved earlier), a hidden size the weights do not have is refused
    # before a network of that size is built (1,000,000 tried to allocate 4 TB).
    unsigned = json.loads(meta)
    unsigned.pop("sha256")
    for hidden in (16, 1_000_000):
        (path / "policy.json").write_text(json.dumps({**unsigned, "hidden": hidden}))
        with pytest.raises(InputError, match="weights do not fit the policy"):
            load_policy(path)
    (path / "policy.json").write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        load_policy(path)
    (path / "policy.json").write_text(meta)
    # A weight's bit flipped: it loaded and placed with other weights, without a word.
    raw = bytearray((path / "policy.safetensors").read_bytes())
    raw[-3] ^= 0x40
    (path / "policy.safetensors").write_bytes(bytes(raw))
    with pytest.raises(InputError, match="the policy's files do not match the sha256"):
        load_policy(path)
    (path / "policy.safetensors").write_bytes(b"garbage")
    with pytest.raises(InputError, match="not a readable safetensors file"):
        load_policy(path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    with pytest.raises(InputError, match="holds x, which is not part of an RL policy"):
        save_policy(trained, tmp_path / "other")  # type: ignore[arg-type]
    assert (tmp_path / "other" / "x").read_text() == "x"
    # A policy directory with a file of the user's: replacing it would delete the file; and
    # the current directory is never replaced (its replacement is built inside it).
    (tmp_path / "other" / "policy.json").write_text(meta)
    with pytest.raises(InputError, match="holds x"):
        save_policy(trained, tmp_path / "other")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="current directory"):
        save_policy(trained, ".")  # type: ignore[arg-type]


def test_default_policy_is_packaged(small_model: InterferenceModel) -> None:
    p = place(builtin("dgx-a100"), small_model, _mix(small_model, 12, 1), policy="rl")
    assert len(p.jobs) == 12 and p.policy == "rl"


def test_cli(tmp_path: Path, small_model: InterferenceModel,
             capsys: pytest.CaptureFixture[str]) -> None:
    model_dir = small_model.save(tmp_path / "m")
    out = tmp_path / "pol"
    code = main(["train-policy", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--out", str(out), "--episodes", "3", "--rollouts", "2", "--quiet"])
    assert code == 0 and (out / "policy.safetensors").is_file()
    # The reward is averaged over the episodes there were (it said "last 20" of 3); the
    # output path is printed as given, as the other commands print theirs.
    printed = capsys.readouterr().out
    assert "trained on 3 episodes x 2 rollouts on pcie-8gpu" in printed
    assert "last 3 episodes" in printed and printed.endswith(f"-> {out}\n")
    code = main(["train-policy", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--out", str(tmp_path / "one"), "--episodes", "1", "--rollouts", "2", "--quiet"])
    assert code == 0 and "trained on 1 episode x 2 rollouts on " in capsys.readouterr().out
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,job,gpus\n" + "".join(
        f"j{k},{small_model.jobs[k % 4]},1\n" for k in range(6)))
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--policy", "rl", "--policy-file", str(out),
                 "--out", str(tmp_path / "p.csv")])
    assert code == 0 and "rl placement on pcie-8gpu: 6 jobs placed" in capsys.readouterr().out
    code = main(["train-policy", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--out", str(tmp_path / "q"), "--min-jobs", "9", "--jobs-per-episode", "3"])
    assert code == 2 and "--min-jobs 9 is above" in capsys.readouterr().err


def test_max_min_reward_is_the_slowest_jobs_speed(toy: MeasuredSpeeds) -> None:
    # max-min's reward is one job's speed (the slowest), not a sum over the jobs: it is
    # reported as it is, not divided by the jobs placed (which gave at most 1/6 here). The
    # toy table's slowest pair runs at 0.40, so a placement of 6-8 jobs on 8 GPUs, at most
    # two a GPU, never gives a slowest job under 0.40.
    policy = train_policy(toy, builtin("pcie-8gpu"), episodes=3, rollouts=2, num_samples=1,
                          jobs_per_episode=(6, 8), objective="max-min", can_share=toy.can_share)
    assert 0.4 <= policy.info["reward_per_job_last20"] <= 1.0


def test_model_free_variant_round_trip(tmp_path: Path, toy: MeasuredSpeeds) -> None:
    topo = builtin("pcie-8gpu")
    policy = train_policy(toy, topo, episodes=4, rollouts=2, num_samples=1, seed=1,
                          features="types", can_share=toy.can_share)
    again = load_policy(save_policy(policy, tmp_path / "mf"))
    jobs = [Job(f"j{k}", t) for k, t in enumerate(["hog", "mid", "light", "x"] * 3)]
    assert place(topo, toy, jobs, policy=policy).assignment() == place(
        topo, toy, jobs, policy=again).assignment()
    with pytest.raises(InputError, match="trained without job type"):
        place(topo, MeasuredSpeeds({("zz", "zz"): 0.5}), [Job("a", "zz")], policy=again)
    with pytest.raises(InputError, match="features must be"):
        train_policy(toy, topo, episodes=1, features="ids")


def test_load_features_count_reserved_slots(toy: MeasuredSpeeds) -> None:
    # A GPU full of reserved slots (jobs the model cannot see) read as idle to the policy.
    from interplace.placement._problem import Problem
    from interplace.placement.rl import FEATURES, _Featurizer, _TypeFeaturizer

    topo = builtin("pcie-8gpu")
    reserved = {"0": 1, "1": 2}
    problem = Problem(topo, toy, [Job("a", "hog")], reserved=reserved, num_samples=1)
    st = problem.empty_state()
    i = next(iter(problem.new_instances()))
    gpus = [(problem.gpu_index[g],) for g in ("0", "1", "2")]
    load = FEATURES.index("gpu_load")
    x = _Featurizer(problem)(st, i, gpus)
    assert x[:, load].tolist() == [0.5, 1.0, 0.0]
    # the machine's load: 3 of its 16 slots
    assert x[:, FEATURES.index("machine_load")].tolist() == pytest.approx([3 / 16] * 3)
    y = _TypeFeaturizer(problem, ["hog"])(st, i, gpus)
    assert y[:, 2].tolist() == [0.5, 1.0, 0.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # numpy's, torch's or Python's own errors before; lr=inf trained NaN weights in silence
        ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*63\)"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"lr": float("inf")}, "lr must be a finite number > 0"),
        ({"lr": -1.0}, "lr must be a finite number > 0"),
        ({"jobs_per_episode": (3,)}, r"jobs_per_episode must be \(low, high\)"),
        ({"jobs_per_episode": 5}, r"jobs_per_episode must be \(low, high\)"),
        ({"jobs_per_episode": (2.5, 4)}, r"jobs_per_episode must be \(low, high\)"),
        ({"types": "job0"}, "types must be a sequence of job types, not the string"),
        ({"types": ["nope"]}, "types: 'nope' is not a job type of the model"),
    ],
)
def test_bad_training_arguments_are_one_line_errors(
    small_model: InterferenceModel, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        train_policy(small_model, builtin("pcie-8gpu"), episodes=1, **kwargs)  # type: ignore[arg-type]


def test_training_leaves_the_callers_torch_stream_alone(small_model: InterferenceModel) -> None:
    import torch

    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    train_policy(small_model, builtin("pcie-8gpu"), episodes=1, rollouts=2, seed=7)
    assert torch.equal(torch.rand(3), want)  # train_policy reseeded the global generator


def test_a_policy_with_non_finite_weights_is_not_saved(
    small_model: InterferenceModel, tmp_path: Path
) -> None:
    import torch

    policy = train_policy(small_model, builtin("pcie-8gpu"), episodes=1, rollouts=2)
    with torch.no_grad():
        next(policy.net.parameters()).fill_(float("nan"))
    with pytest.raises(InputError, match=r"non-finite values .*: not saved"):
        save_policy(policy, tmp_path / "pol")
    assert not (tmp_path / "pol").exists()
