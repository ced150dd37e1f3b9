"""The built-in machines match their vendors' published topologies."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from interplace.errors import InputError
from interplace.topology import builtin, builtin_names, load
from interplace.topology.builtins import DGX1_NVLINKS


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_builds_with_eight_gpus_and_nics(name: str) -> None:
    t = builtin(name)
    assert t.gpus() == [str(i) for i in range(8)]
    assert t.nics()
    assert all(t.gpu(g).numa is not None for g in t.gpus())


def test_dgx_a100() -> None:
    t = builtin("dgx-a100")
    assert {t.connection(a, b) for a, b in itertools.combinations(t.gpus(), 2)} == {"NV12"}
    assert [t.gpu(g).numa for g in t.gpus()] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t.connection("0", "nic:0") == "PXB"
    assert t.connection("0", "nic:2") == "SYS"
    assert t.path("0", "5").bottleneck == 300.0


def test_dgx_h100() -> None:
    t = builtin("dgx-h100")
    assert t.connection("3", "4") == "NV18"
    assert t.connection("0", "nic:0") == "PIX"
    assert t.connection("0", "nic:1") == "NODE"
    assert t.connection("0", "nic:4") == "SYS"


def test_dgx1_hybrid_cube_mesh_has_six_links_per_gpu() -> None:
    t = builtin("dgx1-v100")
    for g in range(8):
        assert sum(n for pair, n in DGX1_NVLINKS.items() if g in pair) == 6
    assert t.connection("0", "3") == "NV2"
    assert t.connection("0", "5") == "SYS"
    assert t.path("0", "5").bottleneck == pytest.approx(15.75, rel=1e-3)
    assert len(t.nvlinks()) == 16


def test_p4d_and_pcie_8gpu_pcie_structure() -> None:
    p = builtin("pcie-8gpu")
    assert (p.numa_nodes, p.pcie_switches) == (2, 4)
    assert [p.connection("0", x) for x in ("1", "2", "4")] == ["PIX", "PHB", "SYS"]
    q = builtin("p4d")
    assert (q.numa_nodes, q.pcie_switches, len(q.nics())) == (2, 4, 4)


def test_cluster_spec() -> None:
    c = load("dgx-h100*16")
    assert len(c.gpus()) == 128 and c.gpus()[-1] == "n15:7"
    assert c.connection("n12:5", "n12:6") == "NV18"
    assert c.connection("n12:5", "n3:5") == "NET"


@pytest.mark.parametrize("spec", ["nope", "p4d*0", "p4d*x", "p4d*99999", "p4d*\u0663"])
def test_bad_builtin_specs(spec: str) -> None:
    with pytest.raises(InputError):
        builtin(spec)


def test_load_missing_file_is_a_clear_error(tmp_path: object) -> None:
    with pytest.raises(InputError, match="no such file"):
        load("/nonexistent/topo.xml")


def test_load_reads_as_the_format_readers_do(tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "topology"
    # An XML file in UTF-16 (its byte-order mark says so) parses as read_nccl_xml parses it
    # (load decoded it as UTF-8 with replacement: "unrecognised topology format").
    xml = (fixtures / "ndv2-topo.xml").read_text()
    utf16 = tmp_path / "ndv2-utf16.xml"
    utf16.write_bytes(xml.encode("utf-16"))
    assert len(load(utf16).gpus()) == 8
    # nvidia-smi text that is not UTF-8 is refused as read_nvidia_smi refuses it (it was read
    # with its bytes replaced by U+FFFD).
    text = (fixtures / "nvsmi" / "workstation-2gpu.txt").read_bytes() + b"\nNIC0: mlx5_\xe9\n"
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(text)
    with pytest.raises(InputError, match=r"latin1\.txt: not UTF-8 text"):
        load(latin1)
    with pytest.raises(InputError, match="no topology given"):  # was ". is a directory"
        load("")
    # The format is checked for a built-in's name too (it was ignored).
    with pytest.raises(InputError, match="unknown topology format 'bogus'"):
        load("p4d", format="bogus")
