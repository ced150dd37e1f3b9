"""Loopback load test of ``interplace serve``: filter + prioritize latency under concurrency.

Run: ``python benchmarks/serve_load.py [--nodes 64] [--clients 1 8 32] [--requests 200]
[--out results.json]``

Starts the extender (uvicorn, standalone, 127.0.0.1 on a free port) for a ``--nodes``-node
cluster of DGX A100 (8 GPUs each: 512 GPUs for 64 nodes) with the model fitted on Gavel's V100
measurements, pre-books half the GPUs with running pods (one per GPU, seeded types) so that
scoring sees real co-runners, then, for each client count, sends ``--requests`` scheduling
cycles (filter then prioritize over every node, ``nodeCacheCapable`` payloads, each pod a
seeded Gavel job type with 1 GPU) from that many concurrent threads, and reports p50/p99 of
the filter + prioritize pair. Then it binds 256 pods from 32 threads at once and checks that
no GPU holds more than ``max-per-gpu`` pods and none was lost. Bounded: loopback only, a fixed
number of requests, a 10-minute cap.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import numpy as np
import uvicorn

from interplace.datasets import load_gavel
from interplace.model import fit
from interplace.serve import KEY_JOB_TYPE, Booking, Extender, build_app
from interplace.topology import builtin


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    args = ap.parse_args()
    deadline = time.monotonic() + 600
    model = fit(load_gavel("v100").data, seed=0)
    types = list(model.jobs)
    topo = builtin("dgx-a100")
    nodes = [f"node-{k}" for k in range(args.nodes)]
    ext = Extender(model, lambda n: topo, max_per_gpu=2)
    rng = np.random.default_rng(0)
    for n in nodes:  # half the GPUs already run one job
        for g in topo.gpus()[::2]:
            from interplace.placement import Job

            key = f"load/{n}-{g}"
            ext.book.add(Booking(key, n, (g,), Job(key, types[int(rng.integers(26))])))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(ext), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"command": " ".join(sys.argv), "nodes": args.nodes,
                           "gpus": 8 * args.nodes, "latency_ms": {}}
    try:
        with httpx.Client(base_url=base, timeout=30) as warm:  # warm the score cache once
            for t in types:
                warm.post("/prioritize", json={"Pod": _pod("w", t), "Nodes": None,
                                               "NodeNames": nodes})
        for clients in args.clients:
            latencies: list[float] = []
            lock = threading.Lock()

            def cycle(k: int, latencies: list[float] = latencies,
                      lock: threading.Lock = lock) -> None:
                pod = _pod(f"p{k}", types[k % len(types)])
                body = {"Pod": pod, "Nodes": None, "NodeNames": nodes}
                with httpx.Client(base_url=base, timeout=30) as c:
                    t0 = time.perf_counter()
                    r1 = c.post("/filter", json=body)
                    kept = r1.json()["NodeNames"]
                    r2 = c.post("/prioritize", json={**body, "NodeNames": kept})
                    dt = time.perf_counter() - t0
                assert r1.status_code == r2.status_code == 200
                with lock:
                    latencies.append(dt * 1000)

            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(cycle, range(args.requests)))
            if time.monotonic() > deadline:
                break
            lat = sorted(latencies)
            out["latency_ms"][str(clients)] = {
                "p50": statistics.median(lat), "p99": float(np.quantile(lat, 0.99)),
                "requests": len(lat)}
            print(f"{clients} clients: p50 {out['latency_ms'][str(clients)]['p50']:.1f} ms, "
                  f"p99 {out['latency_ms'][str(clients)]['p99']:.1f} ms", file=sys.stderr)
        before = len(ext.book.pods)

        def bind(k: int) -> str:
            with httpx.Client(base_url=base, timeout=30) as c:
                pod = _pod(f"b{k}", types[k % len(types)])
                c.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes[:4]})
                r = c.post("/bind", json={"PodName": f"b{k}", "PodNamespace": "load",
                                          "PodUID": f"b{k}", "Node": nodes[k % 4]})
                return str(r.json()["Error"])

        with ThreadPoolExecutor(32) as pool:
            errors = list(pool.map(bind, range(256)))
        per_gpu: dict[tuple[str, str], int] = {}
        for b in ext.book.pods.values():
            for g in b.gpus:
                per_gpu[(b.node, g)] = per_gpu.get((b.node, g), 0) + 1
        ok = sum(e == "" for e in errors)
        out["binds"] = {
            "attempted": 256, "succeeded": ok, "refused_full": 256 - ok,
            "booked_after": len(ext.book.pods) - before,
            "max_pods_per_gpu": max(per_gpu.values()),
            "lost_or_double_booked": int(len(ext.book.pods) - before != ok
                                         or max(per_gpu.values()) > 2),
        }
        print(json.dumps(out, indent=1))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
