"""``interplace serve``: the extender as a process, its start-up errors one line each."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("kubernetes")

from interplace.cli import main
from interplace.datasets import synthetic
from interplace.model import fit


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = fit(synthetic(4, seed=2, samples_per_run=8), seed=0, steps=200, min_steps=200)
    return model.save(tmp_path_factory.mktemp("m") / "model")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_serve_standalone_answers_kube_scheduler(model_dir: Path, tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "interplace.cli", "serve", "--model", str(model_dir),
             "--topology", "dgx-a100", "--standalone", "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # start-up imports torch and Pyro: seconds, more on a busy box
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
                    assert json.loads(r.read()) == {"ok": True}
                    break
            except OSError:
                assert server.poll() is None, log.read_text()
                time.sleep(0.1)
        else:
            pytest.fail("interplace serve did not answer /healthz within 60 s")
        pod = {"metadata": {"name": "p", "namespace": "ml", "uid": "u",
                            "labels": {"interplace.io/job-type": "job0"}},
               "spec": {"containers": [{"name": "c", "resources": {
                   "limits": {"nvidia.com/gpu": "1"}}}]}}
        kept = _post(f"{base}/filter", {"Pod": pod, "Nodes": None, "NodeNames": ["n1"]})
        assert kept["NodeNames"] == ["n1"] and kept["Error"] == ""
        scores = _post(f"{base}/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": ["n1"]})
        assert scores == [{"Host": "n1", "Score": 10}]
        bound = _post(f"{base}/bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "u",
                                       "Node": "n1"})
        assert bound == {"Error": ""}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_serve_without_an_api_server_says_so_in_one_line(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    code = main(["serve", "--model", str(model_dir), "--topology", "dgx-a100"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "no Kubernetes API server" in err and "--standalone" in err


def test_serve_start_up_errors(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (["--model", str(tmp_path / "none"), "--topology", "dgx-a100"], "no such model"),
        (["--model", str(model_dir)], "give --topology (one for every node) or --node-topology"),
        (["--model", str(model_dir), "--topology", "dgx-a100", "--node-topology", str(tmp_path)],
         "give --topology or --node-topology, not both"),
        (["--model", str(model_dir), "--topology", "dgx-z9000"], "dgx-z9000"),
        (["--model", str(model_dir), "--topology", "dgx-a100", "--policy", "best"],
         "unknown policy 'best'"),
        (["--model", str(model_dir), "--node-topology", str(tmp_path)], "no node topology"),
        (["--model", str(model_dir), "--node-topology", str(model_dir / "model.json")],
         f"not a directory: {model_dir / 'model.json'}"),
        (["--model", str(model_dir), "--topology", "dgx-a100", "--port", "99999"],
         "--port must be at most 65535"),
        (["--model", str(model_dir), "--topology", "dgx-a100", "--host", "no.such.host."],
         "--host 'no.such.host.'"),
    ]
    taken = socket.socket()  # a port in use: uvicorn's own "ERROR: [Errno 98]" and exit 3
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    cases.append((["--model", str(model_dir), "--topology", "dgx-a100", "--port", port],
                  f"cannot listen on 127.0.0.1:{port}"))
    with taken:
        for args, message in cases:
            code = main(["serve", "--standalone", *args])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1 and message in err, (args, err)
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", str(model_dir), "--topology", "dgx-a100", "--deadline", "-1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "argument --deadline" in err


def test_the_assume_ttl_option_reaches_the_extender(
    model_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import interplace.serve as serve
    from interplace.serve._extender import ASSUME_TTL_S

    made: list[float] = []

    class Stop(Exception):
        pass

    def build_app(extender: serve.Extender, health: object = None) -> None:
        made.append(extender.assume_ttl_s)
        raise Stop

    monkeypatch.setattr(serve, "build_app", build_app)
    for extra, ttl in (([], ASSUME_TTL_S), (["--assume-ttl", "42"], 42.0)):
        with pytest.raises(Stop):
            main(["serve", "--standalone", "--model", str(model_dir), "--topology", "dgx-a100",
                  *extra])
        assert made[-1] == ttl
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", str(model_dir), "--topology", "dgx-a100", "--assume-ttl", "0"])
    assert exc.value.code == 2 and "argument --assume-ttl" in capsys.readouterr().err


def test_node_topology_files_are_found_by_the_node_name(tmp_path: Path) -> None:
    from interplace.cli.serve import node_topologies
    from interplace.errors import InputError

    fixtures = Path(__file__).parent / "fixtures" / "topology"
    ndv2 = (fixtures / "ndv2-topo.xml").read_bytes()
    # A node name with dots, the file named exactly so (found by its stem, gpu-1.example, it
    # matched no node and every pod was refused there: "no topology").
    (tmp_path / "gpu-1.example.com").write_bytes(ndv2)
    (tmp_path / "gpu-2.xml").write_bytes(ndv2)
    found = node_topologies(None, str(tmp_path))
    assert isinstance(found, dict)
    assert {"gpu-1.example.com", "gpu-2"} <= set(found)
    assert len(found["gpu-2"].gpus()) == 8
    (tmp_path / "gpu-3.xml").write_bytes(ndv2)  # which is node gpu-3's?
    (tmp_path / "gpu-3.hwloc").write_bytes(ndv2)
    with pytest.raises(InputError, match=r"two topology files for node gpu-3: gpu-3\.hwloc, gpu"):
        node_topologies(None, str(tmp_path))
