"""``lucid``: Lucid's indolent packing (Hu et al., ASPLOS'23): share a GPU only between jobs
whose utilisation classes are compatible.

A job type's GPU utilisation :math:`u` is the larger of its GPU compute and memory-bandwidth
demand: read from the source's ``demand()`` (the fitted model's posterior median, which its
counters pin) or given as ``utilisation``. Classes: low (:math:`u < 1/3`), medium
(:math:`u < 2/3`), high. Two jobs are compatible when their classes add to at most 2 (low
goes with anything, medium with medium, high only with low). Each new job (gangs first) takes
an idle GPU if there is one, else the compatible GPU whose jobs' classes add up least; with
none it stays pending, as Lucid queues it. Complexity :math:`O(n g)`.

The counters are what make the model's reading a utilisation: a speed depends on a job's
demand only through its pressure (demand times intensity), so a model fitted without GPU
counters (``model.metrics`` empty, as on Gavel's data) has no measurement of demand alone,
and its classes are wherever the fit put it (on Gavel's V100 jobs: all high with one fit, all
low with another). Give ``utilisation`` then, from profiles of the jobs. The policy records
where its utilisations came from in ``problem.info["utilisation"]``: ``"given"``, ``"model
(GPU counters)"`` or ``"model (no GPU counters)"``, and ``interplace place`` notes the last.
"""

from __future__ import annotations

from collections.abc import Mapping

from interplace.errors import InputError
from interplace.model import METRIC_RESOURCE
from interplace.placement._problem import Problem, State

__all__ = ["UNMEASURED", "lucid", "utilisation_classes"]

UNMEASURED = "model (no GPU counters)"
"""``problem.info["utilisation"]`` when the classes come from a model's demand that no GPU
counter measured."""


def utilisation_classes(
    problem: Problem, utilisation: Mapping[str, float] | None = None
) -> list[int]:
    """The utilisation class (0 low, 1 medium, 2 high) of each of ``problem.types``; where
    the utilisations came from goes to ``problem.info["utilisation"]`` (module docstring)."""
    if utilisation is None:
        demand = getattr(problem.source, "demand", None)
        if demand is None:
            raise InputError(
                "lucid needs job utilisations: a fitted model, or utilisation= per job type"
            )
        table = demand()
        cols = [c for c in ("gpu_compute", "gpu_membw") if c in table.columns]
        if not cols:
            raise InputError("lucid needs the model's gpu_compute or gpu_membw demand")
        util = {str(j): float(table.loc[j, cols].max()) for j in table.index}
        metrics = getattr(problem.source, "metrics", ())
        counted = any(METRIC_RESOURCE.get(m) in cols for m in metrics)
        problem.info["utilisation"] = (
            "model (GPU counters)" if counted else UNMEASURED
        )
    else:
        util = dict(utilisation)
        problem.info["utilisation"] = "given"
    out = []
    for t in problem.types:
        if t not in util:
            raise InputError(f"lucid: no utilisation for job type {t!r}")
        u = util[t]
        out.append(0 if u < 1 / 3 else 1 if u < 2 / 3 else 2)
    return out


def lucid(
    problem: Problem, *, seed: int = 0, utilisation: Mapping[str, float] | None = None
) -> State:
    """Indolent packing on utilisation classes (deterministic)."""
    del seed
    cls = utilisation_classes(problem, utilisation)
    t = problem.inst_type
    st = problem.empty_state()
    for i in problem.order():
        n = problem.jobs[i].gpus
        ci = cls[t[i]]

        def load(g: int) -> int:
            return sum(cls[t[k]] for k in st.occ[g])

        def fits(g: int, ci: int = ci) -> bool:  # the classes on g stay within budget
            return all(ci + cls[t[k]] <= 2 for k in st.occ[g])

        def ok(g: int, i: int = i) -> bool:
            return problem.can_host(st, i, g) and fits(g)

        if n == 1:
            hosts = [g for g in problem.hosts(st, i) if fits(g)]
            idle = [g for g in hosts if not problem.taken(st, g)]
            options = idle or hosts
            if options:
                g = min(options, key=lambda g: (load(g), problem.taken(st, g), g))
                problem.assign(st, i, (g,))
            continue
        best = problem.one_machine_gang(
            st, i, ok=ok,
            gpu_key=lambda g: (problem.taken(st, g), load(g), g),
            machine_key=lambda _, chosen: sum(load(g) + problem.taken(st, g) for g in chosen),
        )
        if best is None and n > problem.machine_size:
            # Larger than a machine: the free GPUs filled machine by machine (the machines
            # with most free first), least taken and least loaded GPUs first.
            per = sorted(([g for g in idx if ok(g)] for idx in problem.machines.values()),
                         key=lambda f: -len(f))
            pool = [g for f in per
                    for g in sorted(f, key=lambda g: (problem.taken(st, g), load(g), g))]
            if len(pool) >= n:
                best = tuple(sorted(pool[:n]))
        if best is not None:
            problem.assign(st, i, best)
    return st
