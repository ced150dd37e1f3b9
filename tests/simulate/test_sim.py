"""The simulator's event loop: hypothesis invariants on measured toy truth, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interplace.cli import main
from interplace.errors import InputError
from interplace.placement import MeasuredSpeeds
from interplace.simulate import (
    GroundTruth,
    PlacementScheduler,
    SimJob,
    ground_truth,
    make_scheduler,
    simulate,
)
from interplace.topology import builtin

TYPES = ("a", "b", "c")
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw: st.DrawFn) -> tuple[GroundTruth, list[SimJob], int, str]:
    speed = {(x, y): draw(st.floats(0.2, 1.0)) for x in TYPES for y in TYPES}
    truth = GroundTruth("toy", MeasuredSpeeds(speed), TYPES, TYPES)
    n = draw(st.integers(1, 12))
    jobs, t = [], 0.0
    for k in range(n):
        t += draw(st.floats(0.0, 50.0))
        jobs.append(SimJob(f"j{k}", t, draw(st.sampled_from([1, 1, 1, 2, 4])),
                           draw(st.floats(1.0, 200.0)), draw(st.sampled_from(TYPES))))
    return truth, jobs, draw(st.integers(1, 3)), draw(st.sampled_from(
        ["spread", "pack", "random", "local-search", "greedy"]))


def _run(truth: GroundTruth, jobs: list[SimJob], k: int, policy: str, seed: int = 0) -> object:
    topo = builtin("pcie-8gpu")
    sched = PlacementScheduler("p", topo, truth.speeds, policy, k, None,
                               truth.speeds.can_share, seed)
    return simulate(jobs, topo, truth, sched)


@SETTINGS
@given(case=cases())
def test_event_loop_invariants(case: tuple[GroundTruth, list[SimJob], int, str]) -> None:
    truth, jobs, k, policy = case
    r = _run(truth, jobs, k, policy)
    assert set(r.jobs) == {j.job_id for j in jobs}  # type: ignore[attr-defined]
    by_id = {j.job_id: j for j in jobs}
    for job_id, rec in r.jobs.items():  # type: ignore[attr-defined]
        # The loop finishes a job when its integrated speed reaches its work (to its
        # completion tolerance, 1e-6 relative). This reads the loop's own bookkeeping: that
        # the speeds it integrates are the measured co-located ones is pinned by the
        # schedule worked by hand in test_sim_by_hand.py.
        assert rec["progress"] == pytest.approx(by_id[job_id].work_s, rel=1e-5)
        assert rec["start_s"] >= rec["arrival_s"] - 1e-9  # never before it arrives
        assert rec["finish_s"] > rec["start_s"]
    # Capacity: at every event the GPUs in use hold at most k jobs (re-derived from starts
    # and finishes, independently of the loop's own bookkeeping).
    events = sorted({rec["start_s"] for rec in r.jobs.values()})  # type: ignore[attr-defined]
    for t in events:
        live = [rec for rec in r.jobs.values()  # type: ignore[attr-defined]
                if rec["start_s"] <= t < rec["finish_s"]]
        assert sum(rec["gpus"] for rec in live) <= 8 * k


@SETTINGS
@given(case=cases(), seed=st.integers(0, 3))
def test_same_seed_same_result(
    case: tuple[GroundTruth, list[SimJob], int, str], seed: int
) -> None:
    truth, jobs, k, policy = case
    a = _run(truth, jobs, k, policy, seed)
    b = _run(truth, jobs, k, policy, seed)
    assert a.jobs == b.jobs  # type: ignore[attr-defined]


@settings(max_examples=15, deadline=None, derandomize=True)
@given(case=cases())
def test_oracle_is_never_beaten_by_more_than_noise(
    case: tuple[GroundTruth, list[SimJob], int, str],
) -> None:
    # The oracle (local search on the measured speeds, sharing only when it pays) against
    # the baselines at max 2 per GPU, on the same arrivals: with every job arriving at once,
    # the oracle's first decision maximises the total speed, so its mean JCT is never far
    # behind any of them; "noise" here is the myopia of online decisions (a total-speed
    # optimum is not a JCT optimum), bounded by 25%.
    truth, jobs, _, _ = case
    burst = [SimJob(j.job_id, 0.0, 1, j.work_s, j.job_type) for j in jobs]
    topo = builtin("pcie-8gpu")
    share = truth.speeds.can_share
    oracle = PlacementScheduler("o", topo, truth.speeds, "local-search", 2, 0.0, share)
    a = simulate(burst, topo, truth, oracle).metrics()["avg_jct_s"]
    for name in ("random", "spread", "pack", "greedy"):
        other = PlacementScheduler(name, topo, truth.speeds, name, 2, None, share)
        b = simulate(burst, topo, truth, other).metrics()["avg_jct_s"]
        assert a <= 1.25 * b, name


def test_ground_truth_and_errors(tmp_path: Path) -> None:
    g = ground_truth("gavel-v100")
    assert len(g.types) == 26 and set(g.multi_gpu_types) <= set(g.types)
    assert not g.speeds.can_share("CycleGAN", "Transformer (batch size 256)")
    with pytest.raises(InputError, match="unknown ground truth"):
        ground_truth("nope")
    with pytest.raises(InputError, match=f"^no such file: {tmp_path / 'gavel-v100'}$"):
        ground_truth(str(tmp_path / "gavel-v100"))  # a path, not the packaged name
    with pytest.raises(InputError, match="is a directory, not a file"):
        ground_truth(str(tmp_path))
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,job,throughput\na,x,1\nb,y,2\np,x,0.5\np,y,1.5\n")
    mine = ground_truth(str(runs))
    assert mine.speeds.pair_speed("x", "y") == 0.5 and not mine.speeds.can_share("x", "x")
    topo = builtin("pcie-8gpu")
    sched = PlacementScheduler("p", topo, g.speeds, "spread")
    with pytest.raises(InputError, match="needs 9 GPUs"):
        simulate([SimJob("a", 0, 9, 1.0, "A3C")], topo, g, sched)
    with pytest.raises(InputError, match="has no measured speeds"):
        simulate([SimJob("a", 0, 1, 1.0, "zz")], topo, g, sched)


def test_model_free_policies_neither_fit_nor_read_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # fifo-exclusive, random, pack and spread place blind to speeds and oracle reads the
    # measured ones: given a model that has every pair backwards they decide exactly as
    # without one, and a comparison of only those fits none.
    from interplace.simulate import MODEL_FREE, _run, make_scheduler

    truth = ground_truth("gavel-v100")
    speed = truth.speeds.speed
    backwards = MeasuredSpeeds({pair: 1.05 - v for pair, v in speed.items()})
    # Greedy or local search on the backwards model would change 11 and 12 of these 12 jobs'
    # times against the same policy on the measured speeds.
    config = _run.SimConfig(trace="synthetic", topology="dgx-a100", n_jobs=12, load=4.0,
                            seed=0, policies=tuple(sorted(MODEL_FREE)))
    with_model = _run.compare(config, model=backwards)

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was fitted that no policy reads")

    monkeypatch.setattr(_run, "_model_for", no_fit)
    without = _run.compare(config)
    assert set(without) == MODEL_FREE
    for name in MODEL_FREE:
        assert without[name].jobs == with_model[name].jobs, name
        assert without[name].timeline == with_model[name].timeline, name
    assert any(j["colocated"] for j in without["pack"].jobs.values())  # decisions were made
    with pytest.raises(InputError, match="policy 'interplace' needs a fitted model"):
        make_scheduler("interplace", builtin("dgx-a100"), None, truth)


def test_cli_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--trace", "synthetic", "--jobs", "12", "--topology", "dgx-a100",
                 "--load", "4", "--policies", "fifo-exclusive,oracle", "--json",
                 "--plot", str(tmp_path / "plots")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"fifo-exclusive", "oracle"}
    assert {"avg_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s"} <= set(
        out["policies"]["oracle"])
    assert (tmp_path / "plots" / "jct_cdf.png").is_file()
    # The table's note names the files as written ("plots/" once printed "plots//jct_cdf.png").
    code = main(["simulate", "--trace", "synthetic", "--jobs", "4", "--topology", "dgx-a100",
                 "--policies", "oracle", "--plot", str(tmp_path / "plots") + "/"])
    assert code == 0
    out = capsys.readouterr().out
    assert f"plots written to {tmp_path / 'plots' / 'jct_cdf.png'}, " in out and "//" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "nope"], "unknown policy 'nope'"),
        (["--trace", "missing.csv"], "no such trace file"),
        (["--load", "0"], "argument --load: must be a finite number > 0"),
        (["--load", "inf"], "argument --load: must be a finite number > 0"),
        (["--interval", "0"], "argument --interval: must be a finite number > 0"),
        (["--interval", "nan"], "argument --interval: must be a finite number > 0"),
        (["--jobs", "20", "--load", "1e-30", "--policies", "fifo-exclusive"],
         "too long to simulate"),
        (["--ground-truth", "gavel-x"], "unknown Gavel GPU type"),
        # was ignored: the built-in Philly excerpt ran as if no format had been given
        (["--trace-format", "openb"], "--trace-format openb reads a trace file"),
        # Venus has arrival counts only: refused as a format, saying why, whatever the trace
        (["--trace-format", "venus"],
         "argument --trace-format: a venus trace (Lucid's cluster_throughput.csv) has arrival "
         "counts only, no job durations, so it cannot be simulated; use a philly or openb "
         "trace, or --trace synthetic"),
        (["--trace", "t.csv", "--trace-format", "venus"], "has arrival counts only"),
        (["--trace-format", "nope"], "unknown trace format 'nope' (choose from philly, openb)"),
        # a runs file that is not there was "unknown ground truth"
        (["--ground-truth", "nosuch.csv"], "no such file: nosuch.csv"),
        (["--ground-truth", "sub/nosuch"], "no such file: sub/nosuch"),
        (["--ground-truth", "gavel-runs.csv"], "no such file: gavel-runs.csv"),
        (["--ground-truth", "nope"], "unknown ground truth 'nope'"),
    ],
)
def test_cli_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code: object
    try:
        code = main(["simulate", "--jobs", "4", *args])
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_venus_is_no_simulation_trace_format(tmp_path: Path) -> None:
    # load_venus gives every job an unknown duration (the file counts arrivals per bin), so
    # the simulator found "only 0 jobs with a duration" whatever was asked: it is refused up
    # front, through the API too, and the CLI's choices are the formats it reads.
    from interplace.cli.simulate import _FORMATS
    from interplace.simulate import _run

    assert _FORMATS == _run.TRACE_FORMATS and "venus" not in _run.TRACE_FORMATS
    venus = tmp_path / "venus.csv"
    venus.write_text("time,submit_gpu_job,submit_gpu_num\n2020-04-01 00:00:00,2,2\n")
    config = _run.SimConfig(trace=str(venus), trace_format="venus", n_jobs=1,
                            policies=("fifo-exclusive",))
    with pytest.raises(InputError, match=r"^a venus trace .* no job durations"):
        _run.compare(config)
    with pytest.raises(InputError, match="no job durations"):
        _run.run_workload(config, ground_truth("gavel-v100"), 8)
    with pytest.raises(InputError, match=r"unknown trace format 'csv' \(choose from philly, "):
        _run.compare(_run.SimConfig(trace=str(venus), trace_format="csv"))


PHILLY_HEAD = "job_id,user,num_gpu,submit_time,model_name,duration\n"
OPENB_HEAD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")


@pytest.mark.parametrize(
    ("name", "text", "trace_format"),
    [
        # a job without a duration (0) and one with 16 GPUs do not count
        ("tr_5.csv", PHILLY_HEAD + "1,u,1,0,m,60\n2,u,1,5,m,0\n3,u,16,9,m,60\n", "philly"),
        # an unscheduled pod has no run time
        ("pods.csv", OPENB_HEAD + "a,1,1,1,1000,,LS,Running,0,60,0\n"
         "b,1,1,1,1000,,LS,Pending,5,60,\n", "openb"),
    ],
)
def test_too_few_jobs_names_the_trace_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, trace_format: str
) -> None:
    # The message named the format ("philly: only ...", "venus: ..."), not the file; and the
    # --plot folder made before the simulation was left behind, empty.
    path = tmp_path / name
    path.write_text(text)
    plots = tmp_path / "new" / "plots"
    code = main(["simulate", "--trace", str(path), "--trace-format", trace_format, "--jobs",
                 "2", "--policies", "fifo-exclusive", "--plot", str(plots)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"interplace: error: {path}: only 1 job with a duration and 1-8 GPUs, "
                          "2 asked for")
    assert not (tmp_path / "new").exists()


def test_a_parquet_trace_reads_as_its_csv_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Parquet trace was read as CSV ("'utf-8' codec can't decode ..."); a corrupt one was
    # "lacks column(s) ...".
    import pandas as pd

    csv = tmp_path / "tr.csv"
    csv.write_text(PHILLY_HEAD + "7,u,1,0,m,600\n8,u,2,30,m,1200\n9,u,1,60,m,300\n")
    pd.read_csv(csv).to_parquet(tmp_path / "tr.parquet")  # job_id stored as a number
    metrics = []
    for trace in (csv, tmp_path / "tr.parquet"):
        code = main(["simulate", "--trace", str(trace), "--jobs", "3", "--topology", "dgx-a100",
                     "--policies", "fifo-exclusive,pack", "--json"])
        assert code == 0
        out = json.loads(capsys.readouterr().out)["policies"]
        metrics.append({policy: {k: v for k, v in m.items()  # not the timings
                                 if k not in ("wall_s", "decision_ms_median")}
                        for policy, m in out.items()})
    assert metrics[0] == metrics[1] and metrics[0]["pack"]["avg_jct_s"] > 0
    for name, content, message in [
        ("bad.parquet", b"job_id,user\n1,u\n", "cannot read trace "),
        ("empty.parquet", b"", "cannot read trace "),
        ("disguised.csv", (tmp_path / "tr.parquet").read_bytes(),
         "a Parquet file; name it *.parquet to read it as Parquet"),
    ]:
        (tmp_path / name).write_bytes(content)
        code = main(["simulate", "--trace", str(tmp_path / name), "--jobs", "3",
                     "--policies", "fifo-exclusive"])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert message in err and str(tmp_path / name) in err and "lacks column" not in err


def test_cli_refuses_a_plot_folder_it_could_not_write_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("keep me")
    for plot, message in [
        (a_file, "exists and is not a directory"),
        (a_file / "plots", "Not a directory"),
    ]:
        code = main(["simulate", "--jobs", "4", "--plot", str(plot)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    code = main(["simulate", "--jobs", "4", "--seeds", "2", "--plot", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert code == 2 and "--plot draws one simulation" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_interval_ticks_do_not_use_up_the_event_budget() -> None:
    # Ticks every 5 s over a few hours of waiting: far more ticks than 20 events a job.
    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")
    jobs = [SimJob(f"j{k}", 0.0, 8, 3600.0, "A3C") for k in range(3)]
    sched = PlacementScheduler("p", topo, truth.speeds, "spread", 1)
    result = simulate(jobs, topo, truth, sched, interval_s=5.0)
    assert sorted(j["finish_s"] for j in result.jobs.values()) == pytest.approx(
        [3600.0, 7200.0, 10800.0])
    with pytest.raises(InputError, match="interval_s must be a finite number > 0"):
        simulate(jobs, topo, truth, sched, interval_s=0.0)
    with pytest.raises(InputError, match="too long to simulate in float64 time"):
        simulate([SimJob("a", 0.0, 1, 1.0, "A3C"), SimJob("b", 1e30, 1, 1.0, "A3C")], topo,
                 truth, sched)


def test_a_scheduler_that_never_starts_a_job_is_named_even_with_ticks() -> None:
    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")

    class Idle:
        name = "idle"

        def decide(self, queue: object, running: object, now: float) -> dict[str, tuple[str, ...]]:
            return {}

    with pytest.raises(InputError, match="no job can ever start: a"):
        simulate([SimJob("a", 0.0, 1, 10.0, "A3C")], topo, truth, Idle(), interval_s=1.0)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"zz": ("0",)}, "started job 'zz', which is not waiting"),
        ({"a": ("0", "0")}, "needs 2 distinct GPUs"),
        ({"a": ("0",)}, "needs 2 distinct GPUs"),
        ({"a": ("0", "99")}, "needs 2 distinct GPUs"),
        ([("a", ("0", "1"))], "decide must return a dict"),
        ({"a": None}, "put job a on None: GPUs must be a tuple of GPU ids"),  # a TypeError
        ({"a": 3}, "put job a on 3: GPUs must be a tuple of GPU ids"),
    ],
)
def test_a_scheduler_answer_that_cannot_run_is_refused(answer: object, message: str) -> None:
    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")

    class Wrong:
        name = "wrong"

        def decide(self, queue: object, running: object, now: float) -> object:
            return answer

    with pytest.raises(InputError, match=message):
        simulate([SimJob("a", 0.0, 2, 10.0, "A3C")], topo, truth, Wrong())  # type: ignore[arg-type]


@pytest.mark.slow
def test_ray_and_local_processes_agree() -> None:
    pytest.importorskip("ray")
    from interplace.simulate._run import SimConfig, sweep

    configs = [SimConfig(trace="synthetic", topology="dgx-a100", n_jobs=8, load=4.0, seed=s,
                         policies=("fifo-exclusive", "oracle")) for s in (0, 1)]
    local = sweep(configs, workers=1)
    remote = sweep(configs, ray=True)
    for a, b in zip(local, remote, strict=True):
        for name in a:
            assert a[name]["avg_jct_s"] == b[name]["avg_jct_s"]


def test_a_sweep_runs_its_configs_through_spawn_map(monkeypatch: pytest.MonkeyPatch) -> None:
    # A real process sweep fits a model per config (minutes); spawn_map's own tests cover the
    # processes, so here only the call: every config, in order, on the workers asked for (one
    # per core by default).
    import os

    from interplace.simulate import _run

    calls: list[tuple[object, list[object], int]] = []

    def fake(func: object, tasks: list[object], workers: int) -> list[dict[str, dict[str, float]]]:
        calls.append((func, list(tasks), workers))
        return [{f"metrics {i}": {}} for i in range(len(tasks))]

    monkeypatch.setattr(_run, "spawn_map", fake)
    configs = [_run.SimConfig(seed=s) for s in (0, 1, 2)]
    expect: list[dict[str, dict[str, float]]] = [{"metrics 0": {}}, {"metrics 1": {}},
                                                 {"metrics 2": {}}]
    assert _run.sweep(configs, workers=2) == expect
    assert _run.sweep(configs) == expect
    assert calls == [(_run._one, configs, 2), (_run._one, configs, os.cpu_count() or 1)]


def test_far_arrivals_and_tiny_intervals() -> None:
    # An arrival 5e11 s out with 1.3 s of work passed the float64 guard, then its finish
    # event landed on `now` for ever (a RuntimeError after the event limit): a job whose
    # remaining time float64 cannot add to now is done.
    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")
    sched = make_scheduler("fifo-exclusive", topo, None, truth)
    jobs = [SimJob("a", 0.0, 1, 1.3, "A3C"), SimJob("b", 5e11, 1, 1.3, "A3C")]
    r = simulate(jobs, topo, truth, sched)
    assert r.jobs["b"]["finish_s"] - 5e11 == pytest.approx(1.3, abs=1e-3)
    # Ticks: the next one is found at once, not one interval at a time over idle time (an
    # interval below the clock's resolution never ended); too many rounds are refused.
    r = simulate([SimJob("a", 0.0, 1, 10.0, "A3C"), SimJob("b", 5e4, 1, 10.0, "A3C")],
                 topo, truth, sched, interval_s=0.01)
    assert r.jobs["b"]["start_s"] == 5e4
    with pytest.raises(InputError, match="give a longer interval"):
        simulate(jobs[:1], topo, truth, sched, interval_s=1e-9)
    with pytest.raises(InputError, match="no job was simulated"):
        simulate([], topo, truth, sched).metrics()



# Bad input, from an audit of the package: each was accepted (a wrong answer), or raised a
# raw TypeError/ValueError/AttributeError/ZeroDivisionError/RuntimeError, or talked of the
# CLI's --jobs from Python.


def _toy_trace() -> object:
    import pandas as pd

    from interplace.datasets import JobTrace

    return JobTrace(pd.DataFrame({"job_id": ["a", "b", "c"], "submit_s": [10.0, 20.0, 30.0],
                                  "duration_s": [60.0, 30.0, 5.0], "gpus": [1.0, 1.0, 2.0]}),
                    "toy")


@pytest.mark.parametrize(
    ("n_jobs", "kwargs", "message"),
    [
        (2.5, {}, "n_jobs must be an integer >= 1, not 2.5"),  # gave all 3 jobs
        ("2", {}, "n_jobs must be an integer >= 1, not '2'"),
        (0, {}, "n_jobs must be an integer >= 1, not 0"),  # was "--jobs must be >= 1"
        (None, {}, "n_jobs must be an integer >= 1, not None"),
        (2, {"max_gpus": 1.5}, "max_gpus must be an integer >= 1, not 1.5"),  # accepted
        (2, {"max_gpus": 0}, "max_gpus must be an integer >= 1, not 0"),  # "1-0 GPUs"
        (2, {"max_gpus": -1}, "max_gpus must be an integer >= 1, not -1"),  # "1--1 GPUs"
        (2, {"load": "1"}, "load must be a positive number, not '1'"),
        (2, {"load": True}, "load must be a positive number, not True"),
    ],
)
def test_from_trace_refuses_bad_counts(n_jobs: object, kwargs: dict[str, object],
                                       message: str) -> None:
    from interplace.simulate import from_trace

    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        from_trace(_toy_trace(), n_jobs, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^trace must be a JobTrace, not str$"):
        from_trace("trace", 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((3, None), {}, "seed must be an integer in [0, 2**63), not None"),  # not reproducible
        ((3, -1), {}, "seed must be an integer in [0, 2**63), not -1"),
        ((3, 1.5), {}, "seed must be an integer in [0, 2**63), not 1.5"),
        ((3, "0"), {}, "seed must be an integer in [0, 2**63), not '0'"),
        ((2.5, 0), {}, "n_jobs must be an integer >= 1, not 2.5"),
        (("3", 0), {}, "n_jobs must be an integer >= 1, not '3'"),
        ((True, 0), {}, "n_jobs must be an integer >= 1, not True"),
        ((0, 0), {}, "n_jobs must be an integer >= 1, not 0"),  # was "--jobs must be >= 1"
        ((3, 0), {"rate_per_h": "60"}, "arrival rate must be a positive number, not '60'"),
        ((3, 0), {"max_gpus": 0}, "max_gpus must be an integer >= 1, not 0"),
    ],
)
def test_synthetic_refuses_bad_arguments(args: tuple[object, ...], kwargs: dict[str, object],
                                         message: str) -> None:
    from interplace.simulate import synthetic

    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        synthetic(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("jobs", "types", "seed", "kwargs", "message"),
    [
        (None, "ab", 0, {}, "types must be a list of job type names, not 'ab'"),  # 'a', 'b'
        (None, [None], 0, {}, "types must be non-empty strings, not None"),
        (None, [5], 0, {}, "types must be non-empty strings, not 5"),
        (None, [""], 0, {}, "types must be non-empty strings, not ''"),
        (None, ["a", "a"], 0, {}, "types names job type 'a' twice"),
        (None, [], 0, {}, "no job types to assign (types is empty)"),
        (None, ["a"], 0, {"multi_gpu_types": []},  # fell back to every type
         "no job types to assign (multi_gpu_types is empty)"),
        (None, ["a"], 0, {"multi_gpu_types": "ab"},
         "multi_gpu_types must be a list of job type names, not 'ab'"),
        (None, ["a"], -1, {}, "seed must be an integer in [0, 2**63), not -1"),
        (None, ["a"], None, {}, "seed must be an integer in [0, 2**63), not None"),
        (["x"], ["a"], 0, {}, "jobs must be SimJob objects, not str"),
        ("one", ["a"], 0, {}, "jobs must be a list of SimJob, not str"),
    ],
)
def test_assign_types_refuses_bad_arguments(jobs: object, types: object, seed: object,
                                            kwargs: dict[str, object], message: str) -> None:
    from interplace.simulate import assign_types

    given = [SimJob("j0", 0.0, 2, 60.0), SimJob("j1", 1.0, 1, 60.0)] if jobs is None else jobs
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        assign_types(given, types, seed, **kwargs)  # type: ignore[arg-type]


def test_synthetic_workloads_keep_to_max_gpus() -> None:
    # run_workload drew synthetic jobs of 8 GPUs whatever max_gpus (the GPUs of the
    # topology's machines) said. Below 8 only the GPU counts change; at 8 nothing does.
    from interplace.simulate import assign_types, run_workload, synthetic
    from interplace.simulate._run import SimConfig

    truth = ground_truth("gavel-v100")
    config = SimConfig(trace="synthetic", n_jobs=30, seed=1)
    full = run_workload(config, truth, 8)
    assert max(j.gpus for j in full) == 8
    assert full == assign_types(synthetic(30, 1), truth.types, 1,
                                multi_gpu_types=truth.multi_gpu_types)
    for cap in (1, 2, 3, 4, 7):
        jobs = run_workload(config, truth, cap)
        assert max(j.gpus for j in jobs) <= cap, cap
        assert [(j.job_id, j.arrival_s, j.work_s) for j in jobs] == [
            (j.job_id, j.arrival_s, j.work_s) for j in full]
        assert all(j.gpus == 1 for j, k in zip(jobs, full, strict=True) if k.gpus == 1)
    assert {j.gpus for j in run_workload(config, truth, 1)} == {1}
    for bad in (0, 1.5, "8"):
        with pytest.raises(InputError, match=r"^max_gpus must be an integer >= 1, not "):
            run_workload(config, truth, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_events", [-1, 0, 1.5, "10", True])
def test_simulate_refuses_a_bad_event_limit(max_events: object) -> None:
    # -1, 0 and 1.5 ran, then raised RuntimeError "did not finish within -1 events"; "10"
    # a TypeError.
    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")
    sched = make_scheduler("fifo-exclusive", topo, None, truth)
    with pytest.raises(InputError, match=r"^max_events must be an integer >= 1 or None, not "):
        simulate([SimJob("a", 0.0, 1, 10.0, "A3C")], topo, truth, sched,
                 max_events=max_events)  # type: ignore[arg-type]


def test_simulate_refuses_bad_arguments() -> None:
    from interplace.simulate import SimResult

    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")
    sched = make_scheduler("fifo-exclusive", topo, None, truth)
    jobs = [SimJob("a", 0.0, 1, 10.0, "A3C"), SimJob("b", 5.0, 1, 10.0, "A3C")]
    assert len(simulate(jobs, topo, truth, sched, max_events=4).jobs) == 2
    with pytest.raises(InputError, match=r"^the simulation did not finish within max_events=1 "):
        simulate(jobs, topo, truth, sched, max_events=1)
    with pytest.raises(InputError, match=r"^jobs must be a list of SimJob, not one SimJob"):
        simulate(jobs[0], topo, truth, sched)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^jobs must be a list of SimJob, not str$"):
        simulate("ab", topo, truth, sched)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^topology must be a Topology, not str$"):
        simulate(jobs, "dgx-a100", truth, sched)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^truth must be a GroundTruth, not str$"):
        simulate(jobs, topo, "gavel-v100", sched)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^scheduler must have a name"):
        simulate(jobs, topo, truth, None)  # type: ignore[arg-type]
    # a generator of jobs is as good as a list
    assert len(simulate((j for j in jobs), topo, truth, sched).jobs) == 2
    record = {"arrival_s": 0.0, "start_s": 0.0, "finish_s": 1.0, "colocated": False}
    timeline = [(0.0, 0, 1, 1), (1.0, 0, 0, 0)]
    assert SimResult("p", {"a": record}, timeline, 1, 0.0, []).metrics()["utilisation"] == 1.0
    for n_gpus in (0, -1, 1.5):  # 0 was a ZeroDivisionError in metrics()
        with pytest.raises(InputError, match=r"^n_gpus must be an integer >= 1, not "):
            SimResult("p", {"a": record}, timeline, n_gpus, 0.0, [])  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^job a: its record lacks start_s, finish_s$"):
        SimResult("p", {"a": {"arrival_s": 0.0, "colocated": False}}, [], 1, 0.0, [])


def test_schedulers_refuse_bad_settings() -> None:
    # make_scheduler(max_per_gpu=0) was accepted, then simulate raised RuntimeError "no job
    # can ever start"; "2" was a TypeError mid-simulation; num_samples=0 was accepted.
    truth = ground_truth("gavel-v100")
    topo = builtin("dgx-a100")
    for name in ("oracle", "fifo-exclusive", "pack"):
        for bad in (0, -1, "2", 1.5):
            with pytest.raises(InputError, match=r"^max_per_gpu must be an integer >= 1, not "):
                make_scheduler(name, topo, None, truth, max_per_gpu=bad)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^seed must be an integer in \[0, 2\*\*63\), not -1"):
        make_scheduler("oracle", topo, None, truth, seed=-1)
    with pytest.raises(InputError, match=r"^topology must be a Topology, not str$"):
        make_scheduler("oracle", "dgx-a100", None, truth)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^truth must be a GroundTruth, not str$"):
        make_scheduler("oracle", topo, None, "gavel-v100")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^measured must be a pandas DataFrame"):
        make_scheduler("oracle", topo, None, truth, measured=[1])  # type: ignore[arg-type]
    for kwargs, message in [
        ({"num_samples": 0}, "num_samples must be an integer >= 1, not 0"),
        ({"num_samples": 2.0}, "num_samples must be an integer >= 1, not 2.0"),
        ({"max_per_gpu": 0}, "max_per_gpu must be an integer >= 1, not 0"),
        ({"seed": None}, "seed must be an integer in [0, 2**63), not None"),
    ]:
        with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
            PlacementScheduler("x", topo, truth.speeds, "greedy", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": -1}, "seed must be an integer in [0, 2**63), not -1"),  # numpy ValueError
        ({"seed": None}, "seed must be an integer in [0, 2**63), not None"),
        ({"n_jobs": 2.5}, "n_jobs must be an integer >= 1, not 2.5"),  # TypeError
        ({"n_jobs": 0}, "n_jobs must be an integer >= 1, not 0"),
        ({"load": "1"}, "load must be a positive number, not '1'"),
        ({"load": 0}, "load must be a positive number, not 0"),
        ({"interval_s": -1}, "interval_s must be a finite number > 0 or None, not -1"),
        # was "unknown policy 'o'": the string taken for its characters
        ({"policies": "oracle"},
         "policies must be a tuple of policy names, not the string 'oracle' (write ('oracle',))"),
        ({"policies": ()}, "policies names no policy"),  # compared nothing
        ({"policies": ("oracle", "oracle")}, "policies names 'oracle' twice"),  # one result
        ({"policies": ("nope",)}, "unknown policy 'nope' (choose from fifo-exclusive, "),
        ({"trace": None}, "trace must be a non-empty string, not None"),
        ({"ground_truth": 5}, "ground_truth must be a non-empty string, not 5"),
        ({"topology": None}, "topology must be a built-in name or a file's path, not None"),
    ],
)
def test_sim_config_refuses_bad_settings(kwargs: dict[str, object], message: str) -> None:
    from interplace.simulate._run import SimConfig

    with pytest.raises(InputError, match=f"^{re.escape(message)}"):
        SimConfig(**kwargs)  # type: ignore[arg-type]


def test_sim_config_keeps_good_settings() -> None:
    from interplace.simulate import compare
    from interplace.simulate._run import SimConfig

    config = SimConfig(trace="synthetic", n_jobs=3, topology="dgx-a100", seed=2,
                       policies=["oracle"])  # type: ignore[arg-type]
    assert config.policies == ("oracle",)
    assert set(compare(config)) == {"oracle"}
    with pytest.raises(InputError, match=r"^config must be a SimConfig, not dict$"):
        compare({"trace": "synthetic"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("a", "0", 1, 60.0), "job a: arrival must be finite and >= 0, not '0'"),  # TypeError
        (("a", None, 1, 60.0), "job a: arrival must be finite and >= 0, not None"),
        (("a", True, 1, 60.0), "job a: arrival must be finite and >= 0, not True"),
        (("a", 0.0, 1, "60"), "job a: work must be finite and > 0, not '60'"),
        ((5, 0.0, 1, 60.0), "a job's id must be a string, not 5"),  # accepted
        ((None, 0.0, 1, 60.0), "a job's id must be a string, not None"),
        (("", 0.0, 1, 60.0), "a job needs an id"),
        (("a", 0.0, 1, 60.0, 5), "job a: job type must be a string, not 5"),  # accepted
        (("a", 0.0, 1.5, 60.0), "job a: gpus must be an integer >= 1, not 1.5"),
    ],
)
def test_sim_job_checks_its_fields(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        SimJob(*args)  # type: ignore[arg-type]


def test_sim_job_takes_numpy_numbers_as_before() -> None:
    import numpy as np

    job = SimJob("a", np.float32(1.5), 1, np.float64(60.0), "A3C")
    assert job.arrival_s == 1.5 and job.work_s == 60.0


def test_ground_truth_refuses_a_spec_that_is_no_string() -> None:
    for spec in (5, None, ""):
        with pytest.raises(InputError, match=r"^a ground truth is a name "):
            ground_truth(spec)  # type: ignore[arg-type]
