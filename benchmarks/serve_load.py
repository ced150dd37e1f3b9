"""Loopback load test of ``interplace serve``: filter + prioritize latency under concurrency.

Run: ``python benchmarks/serve_load.py [--nodes 64] [--clients 1 8 32] [--requests 200]
[--model DIR] [--out results.json]``

Starts ``interplace serve --standalone`` in its own process (127.0.0.1, a free port) for a
``--nodes``-node cluster of DGX A100 (8 GPUs each: 512 GPUs for 64 nodes) with the model fitted
on Gavel's V100 measurements, binds four one-GPU pods per node first (seeded types) so that
scoring sees real co-runners, then, for each client count, sends ``--requests`` scheduling
cycles (filter then prioritize over every node, ``nodeCacheCapable`` payloads, each pod a
seeded Gavel job type with 1 GPU) from that many concurrent threads, each on one kept-alive
connection (as kube-scheduler's HTTP client), and reports p50/p99 of the filter + prioritize
pair and the CPU time per cycle of the service and of the clients (``/proc``). Then it binds
256 pods from 32 threads at once and checks that no GPU holds more than ``max-per-gpu`` pods
and none was lost. It also times the warm-up, one prioritize per job type with nothing
cached (every node scored afresh: two placements per node). Bounded: loopback only, a fixed
number of requests, a 10-minute cap.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import numpy as np
from _results import save_json

from interplace.datasets import load_gavel
from interplace.model import InterferenceModel, fit
from interplace.serve import KEY_JOB_TYPE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pod(name: str, job: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "load", "uid": name,
                         "labels": {KEY_JOB_TYPE: job}},
            "spec": {"containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/gpu": "1"}}}]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--out")
    ap.add_argument("--model", help="a saved model directory (default: fit Gavel V100, seed 0)")
    args = ap.parse_args()
    deadline = time.monotonic() + 600
    scratch: Path | None = None  # the fitted model's directory, removed at the end
    if args.model:
        model_dir = Path(args.model)
        model = InterferenceModel.load(model_dir)
    else:
        model = fit(load_gavel("v100").data, seed=0)
        scratch = Path(tempfile.mkdtemp(prefix="interplace-serve-"))
        model_dir = scratch / "model"
        model.save(model_dir)
    types = list(model.jobs)
    nodes = [f"node-{k}" for k in range(args.nodes)]
    port = _free_port()
    # The service in its own process, as deployed: the clients here do not share its GIL.
    server = subprocess.Popen(
        [sys.executable, "-m", "interplace.cli", "serve", "--model", str(model_dir),
         "--topology", "dgx-a100", "--standalone", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):  # wait for it to listen
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rng = np.random.default_rng(0)
        with httpx.Client(base_url=base, timeout=30) as c:  # half the GPUs already run one job
            for n in nodes:
                for k in range(4):
                    name = f"{n}-pre{k}"
                    c.post("/filter", json={"Pod": _pod(name, types[int(rng.integers(26))]),
                                            "Nodes": None, "NodeNames": [n]})
                    r = c.post("/bind", json={"PodName": name, "PodNamespace": "load",
                                              "PodUID": name, "Node": n})
                    assert r.json()["Error"] == "", r.text
        out: dict[str, Any] = {"command": " ".join(sys.argv), "nodes": args.nodes,
                               "gpus": 8 * args.nodes, "latency_ms": {}}
        cold: list[float] = []
        with httpx.Client(base_url=base, timeout=30) as warm:  # warm the score cache once
            for t in types:
                t0 = time.perf_counter()
                warm.post("/prioritize", json={"Pod": _pod("w", t), "Nodes": None,
                                               "NodeNames": nodes})
                cold.append(1000 * (time.perf_counter() - t0))
        out["cold_prioritize_ms"] = {"p50": statistics.median(cold), "max": max(cold),
                                     "calls": len(cold)}
        print(f"cold prioritize (every node scored afresh): p50 {statistics.median(cold):.0f}"
              f" ms, max {max(cold):.0f} ms over {len(cold)} job types", file=sys.stderr)
        for clients in args.clients:
            latencies: list[float] = []
            lock = threading.Lock()

            local = threading.local()
            opened: list[httpx.Client] = []

            def cycle(k: int, latencies: list[float] = latencies,
                      lock: threading.Lock = lock, local: threading.local = local,
                      opened: list[httpx.Client] = opened) -> None:
                c = getattr(local, "client", None)
                if c is None:  # one kept-alive connection per client, as kube-scheduler's
                    c = local.client = httpx.Client(base_url=base, timeout=30)
                    with lock:
                        opened.append(c)
                pod = _pod(f"p{k}", types[k % len(types)])
                body = {"Pod": pod, "Nodes": None, "NodeNames": nodes}
                t0 = time.perf_counter()
                r1 = c.post("/filter", json=body)
                kept = r1.json()["NodeNames"]
                r2 = c.post("/prioritize", json={**body, "NodeNames": kept})
                dt = time.perf_counter() - t0
                assert r1.status_code == r2.status_code == 200
                with lock:
                    latencies.append(dt * 1000)

            server_cpu, client_cpu = _cpu_s(server.pid), _cpu_s(os.getpid())
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(cycle, range(args.requests)))
            server_cpu = _cpu_s(server.pid) - server_cpu
            client_cpu = _cpu_s(os.getpid()) - client_cpu
            for c in opened:
                c.close()
            if time.monotonic() > deadline:
                break
            lat = sorted(latencies)
            row = {"p50": statistics.median(lat), "p99": float(np.quantile(lat, 0.99)),
                   "requests": len(lat),
                   "server_cpu_ms_per_cycle": 1000 * server_cpu / len(lat),
                   "client_cpu_ms_per_cycle": 1000 * client_cpu / len(lat)}
            out["latency_ms"][str(clients)] = row
            print(f"{clients} clients: p50 {row['p50']:.1f} ms, p99 {row['p99']:.1f} ms; CPU "
                  f"per cycle: service {row['server_cpu_ms_per_cycle']:.2f} ms, clients "
                  f"{row['client_cpu_ms_per_cycle']:.2f} ms", file=sys.stderr)
        with httpx.Client(base_url=base, timeout=30) as c:
            before = sum(len(v) for v in c.get("/state").json()["nodes"].values())

        def bind(k: int) -> str:
            with httpx.Client(base_url=base, timeout=30) as c:
                pod = _pod(f"b{k}", types[k % len(types)])
                c.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes[:4]})
                r = c.post("/bind", json={"PodName": f"b{k}", "PodNamespace": "load",
                                          "PodUID": f"b{k}", "Node": nodes[k % 4]})
                return str(r.json()["Error"])

        with ThreadPoolExecutor(32) as pool:
            errors = list(pool.map(bind, range(256)))
        with httpx.Client(base_url=base, timeout=30) as c:
            state = c.get("/state").json()["nodes"]
        per_gpu: dict[tuple[str, str], int] = {}
        booked = 0
        for n, pods in state.items():
            for gpus in pods.values():
                booked += 1
                for g in gpus.split(","):
                    per_gpu[(n, g)] = per_gpu.get((n, g), 0) + 1
        ok = sum(e == "" for e in errors)
        out["binds"] = {
            "attempted": 256, "succeeded": ok, "refused_full": 256 - ok,
            "booked_after": booked - before,
            "max_pods_per_gpu": max(per_gpu.values()),
            "lost_or_double_booked": int(booked - before != ok or max(per_gpu.values()) > 2),
        }
        print(json.dumps(out, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=30)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        save_json(out, args.out)


if __name__ == "__main__":
    main()
