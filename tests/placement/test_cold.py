"""Cold start at placement time: a job type known only by its isolated counters."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from interplace.cli import main
from interplace.errors import InputError
from interplace.model import InterferenceModel, Query
from interplace.placement import Job, MeasuredSpeeds, place, score
from interplace.placement._cold import with_cold_jobs
from interplace.topology import builtin


def test_cold_job_is_placed(small_model: InterferenceModel) -> None:
    jobs = [Job("a", small_model.jobs[0]),
            Job("b", "brand-new", counters={"gpu_util_pct": 80.0, "mem_util_pct": 40.0})]
    p = place(builtin("pcie-8gpu"), small_model, jobs)
    assert set(p.assignment()) == {"a", "b"} and not p.pending
    again = score(builtin("pcie-8gpu"), small_model, p)
    assert again.objective == pytest.approx(p.objective)


def test_heavier_counters_slow_a_partner_more(small_model: InterferenceModel) -> None:
    # Pressure grows with the demand the counters read, and the partner's slowdown with the
    # pressure, draw by draw: the posterior means are ordered with no Monte Carlo slack.
    m = with_cold_jobs(small_model, {
        "light": {"gpu_util_pct": 10.0, "mem_util_pct": 5.0},
        "heavy": {"gpu_util_pct": 90.0, "mem_util_pct": 80.0},
    })
    partner = small_model.jobs[0]
    p = m.posterior_speed([Query(partner, ("light",)), Query(partner, ("heavy",))])
    assert p.mean[1] < p.mean[0]
    assert m.jobs[:4] == small_model.jobs and m.info["cold_jobs"] == ["light", "heavy"]
    # The fitted jobs' posterior is unchanged by adding cold ones; their predictions move only
    # by Monte Carlo error (the draws' random stream shifts with the longer per-job sites):
    # two independent 500-draw means differ by sqrt(2) sd / sqrt(500); 4 of those is a bound
    # that a correct implementation crosses with probability below 1e-4.
    q = [Query(partner, (small_model.jobs[1],))]
    a, b = m.posterior_speed(q), small_model.posterior_speed(q)
    assert abs(a.mean[0] - b.mean[0]) < 4 * (2 ** 0.5) * float(b.sd[0]) / 500**0.5


def test_cold_start_refusals(small_model: InterferenceModel, toy: MeasuredSpeeds) -> None:
    topo = builtin("pcie-8gpu")
    with pytest.raises(InputError, match="unknown counter 'gpu_temp'"):
        place(topo, small_model, [Job("b", "new", counters={"gpu_temp": 50.0})])
    with pytest.raises(InputError, match="two different counter readings"):
        place(topo, small_model, [Job("b", "new", counters={"gpu_util_pct": 50.0}),
                                  Job("c", "new", counters={"gpu_util_pct": 60.0})])
    with pytest.raises(InputError, match="already in the model"):
        with_cold_jobs(small_model, {small_model.jobs[0]: {"gpu_util_pct": 1.0}})
    with pytest.raises(InputError, match="no cold-start path"):
        place(topo, toy, [Job("b", "new", counters={"gpu_util_pct": 50.0})])
    with pytest.raises(InputError, match="must be a finite number"):
        Job("b", "new", counters={"gpu_util_pct": -1.0})


def test_cli_reads_counter_columns(
    tmp_path: Path, small_model: InterferenceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = small_model.save(tmp_path / "m")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        f"job_id,job,gpus,gpu_util_pct\na,{small_model.jobs[0]},1,\nb,new-net,1,75\n"
    )
    out = tmp_path / "p.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "new-net" in out.read_text()
    jobs.write_text("job_id,job,gpus\nb,new-net,1\n")
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)])
    assert code == 2 and "unknown job type(s) 'new-net'" in capsys.readouterr().err


def test_cold_jobs_keep_the_measured_pairs(small_model: InterferenceModel) -> None:
    m2 = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 80.0}})
    assert m2.measured is small_model.measured
    p = m2.posterior_speed([Query("new", ("job0",)), Query("job0", ("new",))], seed=0)
    assert bool(torch.isfinite(p.speed).all())


def test_metrics_of_one_resource_are_averaged(small_model: InterferenceModel) -> None:
    # Two metrics that read GPU compute give the mean of their shares of full scale (as the
    # fit's isolated readings do), whichever order they come in; a saturated mean keeps the
    # population's prior, as one saturated metric does.
    import math

    gpu = small_model.resources.index("gpu_compute")
    k = small_model.components
    gap = small_model.info.get("demand_gap", {}).get("gpu_compute", [0.0] * k)

    def new_demand(m: InterferenceModel) -> torch.Tensor:
        loc = m.posterior["log_demand"][0]  # (J, R), or (K, J, R) for a mixture
        return loc.reshape(-1, *loc.shape[-2:])[:, -1, gpu]

    a = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 80.0, "sm_active_pct": 40.0}})
    b = with_cold_jobs(small_model, {"new": {"sm_active_pct": 40.0, "gpu_util_pct": 80.0}})
    assert new_demand(a).tolist() == pytest.approx([math.log(0.6) + g for g in gap])
    assert torch.equal(a.posterior["log_demand"][0], b.posterior["log_demand"][0])
    full = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 99.0, "sm_active_pct": 99.5}})
    prior = with_cold_jobs(small_model, {"new": {"mem_util_pct": 10.0}})
    assert torch.equal(new_demand(full), new_demand(prior))


def test_cold_jobs_join_every_component_of_a_mixture() -> None:
    import math

    from interplace.datasets import synthetic
    from interplace.model import fit

    data = synthetic(4, seed=2, samples_per_run=8)
    mixture = fit(data, seed=0, steps=100, min_steps=100, restarts=3)
    m = with_cold_jobs(mixture, {"new": {"gpu_util_pct": 50.0}})
    assert m.components == 3 and m.jobs[-1] == "new"
    loc = m.posterior["log_demand"][0]
    assert loc.shape == (3, len(mixture.jobs) + 1, len(mixture.resources))
    gpu = mixture.resources.index("gpu_compute")
    # The counter read sets the new job's demand the same way in every component.
    assert torch.allclose(loc[:, -1, gpu], torch.full((3,), math.log(0.5), dtype=loc.dtype))
    p = m.posterior_speed([Query("new", ("job0",))], num_samples=30)
    assert bool((p.mean > 0).all())
