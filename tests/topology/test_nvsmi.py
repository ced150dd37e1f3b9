"""Tests for the ``nvidia-smi topo -m`` importer and exporter."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interplace.errors import InputError
from interplace.topology._graph import NodeKind, Topology, TopologyBuilder, cluster
from interplace.topology.nvsmi import from_nvidia_smi, read_nvidia_smi, to_nvidia_smi

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "topology" / "nvsmi"

#: file -> (GPUs, NICs, NUMA nodes)
COUNTS = {
    "dgx-a100.txt": (8, 8, 4),
    "hgx-h100.txt": (8, 8, 2),
    "dgx1-v100.txt": (8, 4, 2),
    "workstation-2gpu.txt": (2, 0, 1),
    "pcie-4gpu-spaces.txt": (4, 2, 2),
}
NAMES = sorted(COUNTS)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ALIAS = {"SOC": "SYS", "CPU": "PHB"}


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def cells_of(text: str) -> dict[tuple[str, str], str]:
    """Independent reading of the matrix: (a, b) -> class, keyed by what connection() takes."""
    lines = [ANSI.sub("", line).split() for line in text.splitlines()]
    start = next(i for i, toks in enumerate(lines)
                 if toks[:1] == ["GPU0"] and len(toks) > 1 and toks[1] != "X")
    header = lines[start]
    cols = header[: header.index("CPU")] if "CPU" in header else header
    ids: dict[str, str] = {}
    nic = 0
    for c in cols:
        if re.fullmatch(r"GPU\d+", c):
            ids[c] = c[3:]
        else:
            ids[c] = f"nic:NIC{nic}"
            nic += 1
    cells: dict[tuple[str, str], str] = {}
    for toks in lines[start + 1:]:
        if not toks or toks[0] not in cols:
            continue
        for c, tok in zip(cols, toks[1:], strict=False):
            cells[ids[toks[0]], ids[c]] = ALIAS.get(tok, tok)
    assert len(cells) == len(cols) ** 2
    return cells


def devices(t: Topology) -> list[str]:
    return [*t.gpus(), *t.nics()]


def signature(t: Topology) -> tuple[Any, ...]:
    """Everything about the graph: vertices and edges with their attributes."""
    g = t.graph
    nodes = sorted((n, sorted(d.items())) for n, d in g.nodes(data=True))
    edges = sorted((min(u, v), max(u, v), sorted(d.items())) for u, v, d in g.edges(data=True))
    return nodes, edges


def same_connections(a: Topology, b: Topology) -> None:
    """Every device pair of ``a`` has the same class in ``b`` (devices matched by position)."""
    da, db = devices(a), devices(b)
    assert len(da) == len(db)
    assert a.gpus() == b.gpus()
    for (x, y), (u, v) in zip(itertools.combinations(da, 2), itertools.combinations(db, 2),
                              strict=True):
        assert a.connection(x, y) == b.connection(u, v), (x, y, u, v)
    for x, y in zip(a.nics(), b.nics(), strict=True):
        assert a.graph.nodes[x]["label"] == b.graph.nodes[y]["label"]


def ansify(text: str) -> str:
    """Underline the header and the row labels as a terminal shows them."""
    out = []
    for line in text.split("\n"):
        if re.match(r"\s+GPU0\b", line):
            out.append(re.sub(r"^(\s+)(.*?)(\s*)$", "\\1\x1b[4m\\2\x1b[0m\\3", line))
        else:
            out.append(re.sub(r"^(GPU\d+|NIC\d+|mlx5_\d+)(?=\s)", "\x1b[4m\\1\x1b[0m", line))
    return "\n".join(out)


# ------------------------------------------------------------------------ fixtures


@pytest.mark.parametrize("name", NAMES)
def test_fixture_matches_matrix(name: str) -> None:
    text = fixture_text(name)
    t = read_nvidia_smi(FIXTURES / name)
    cells = cells_of(text)
    assert sorted({a for a, _ in cells}) == sorted(devices(t))
    for (a, b), cls in cells.items():
        assert t.connection(a, b) == cls, (a, b)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_counts(name: str) -> None:
    t = read_nvidia_smi(FIXTURES / name)
    gpus, nics, numa = COUNTS[name]
    assert t.gpus() == [str(i) for i in range(gpus)]
    assert len(t.nics()) == nics
    assert t.numa_nodes == numa
    assert t.name == name.removesuffix(".txt")
    assert t.machines() == [""]


def test_dgx_a100_nvswitch_and_numa() -> None:
    t = read_nvidia_smi(FIXTURES / "dgx-a100.txt")
    assert len(t.nodes_of_kind(NodeKind.NVSWITCH)) == 1
    nvl = t.nvlinks()
    assert len(nvl) == 28
    assert {c for _, _, c in nvl} == {12}
    assert not any(t.graph.nodes[u]["kind"] == t.graph.nodes[v]["kind"] == NodeKind.GPU
                   for u, v in t.graph.edges())
    assert [t.gpu(g).numa for g in t.gpus()] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t.graph.nodes["numa:3"]["cpus"] == "48-63,176-191"
    assert t.graph.nodes["numa:5"]["cpus"] == "80-95,208-223"
    labels = [t.graph.nodes[n]["label"] for n in t.nics()]
    assert labels == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3",
                      "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert t.nics()[0] == "nic:NIC0"
    assert t.nearest_nic("2") == "nic:NIC2"


def test_hgx_h100() -> None:
    t = read_nvidia_smi(FIXTURES / "hgx-h100.txt")
    assert len(t.nodes_of_kind(NodeKind.NVSWITCH)) == 1
    assert {c for _, _, c in t.nvlinks()} == {18}
    assert len(t.nvlinks()) == 28
    assert [t.gpu(g).numa for g in t.gpus()] == [0] * 4 + [1] * 4
    assert t.nearest_nic("5") == "nic:NIC5"
    assert t.connection("0", "nic:NIC3") == "NODE"


def test_dgx1_direct_nvlinks_and_old_nic_columns() -> None:
    t = read_nvidia_smi(FIXTURES / "dgx1-v100.txt")
    assert t.nodes_of_kind(NodeKind.NVSWITCH) == []
    direct = [(u, v, d["links"]) for u, v, d in t.graph.edges(data=True)
              if d["kind"] == "nvlink"]
    assert len(direct) == 16
    assert all(t.graph.nodes[x]["kind"] == NodeKind.GPU for u, v, _ in direct for x in (u, v))
    assert sorted(c for _, _, c in t.nvlinks()) == [1] * 8 + [2] * 8
    assert ("0", "3", 2) in t.nvlinks()
    assert t.connection("0", "5") == "SYS"
    assert t.nics() == ["nic:NIC0", "nic:NIC1", "nic:NIC2", "nic:NIC3"]
    assert [t.graph.nodes[n]["label"] for n in t.nics()] == [f"mlx5_{i}" for i in range(4)]
    # no NUMA Affinity column: NUMA nodes are numbered in order of first GPU
    assert [t.gpu(g).numa for g in t.gpus()] == [0] * 4 + [1] * 4
    assert t.graph.nodes["numa:1"]["cpus"] == "20-39,60-79"
    # the NICs reveal that NVLink-connected GPU0 and GPU1 share a PCIe switch
    assert t.connection("nic:NIC0", "0") == "PIX"
    assert set(t.graph.neighbors("gpu:0")) & set(t.graph.neighbors("gpu:1"))


def test_workstation_and_pcie_box() -> None:
    w = read_nvidia_smi(FIXTURES / "workstation-2gpu.txt")
    assert w.connection("0", "1") == "PHB"
    assert w.pcie_switches == 0
    assert w.graph.nodes["numa:0"]["cpus"] == "0-31"
    p = read_nvidia_smi(FIXTURES / "pcie-4gpu-spaces.txt")
    seen = {p.connection(a, b) for a, b in itertools.combinations(devices(p), 2)}
    assert seen == {"PIX", "PXB", "PHB", "NODE", "SYS"}
    # canonical tree: upper switch with one leaf per PIX group ({GPU0, NIC0} and {GPU1})
    assert p.pcie_switches == 3


# ------------------------------------------------------------------------ format variants


@pytest.mark.parametrize("name", NAMES)
def test_variants_parse_identically(name: str) -> None:
    text = fixture_text(name)
    clean = ANSI.sub("", text)
    want = signature(from_nvidia_smi(clean, name="x"))
    variants = {
        "ansi": ansify(clean),
        "original": text,
        "expandtabs": "\n".join(line.expandtabs(8) for line in clean.split("\n")),
        "spaces": clean.replace("\t", "   "),
        "crlf": clean.replace("\n", "\r\n"),
        "prompt": "$ nvidia-smi topo -m\n\n" + clean,
        # what `interplace topo` prints above its matrix, so that saved output reads back
        "summary": "x: 8 GPUs, 1 machine, 2 NUMA nodes, 4 PCIe switches, 2 NICs\n\n" + clean,
        "no legend": re.sub(r"\nLegend:.*?(?=\nNIC Legend:|$)", "\n", clean, flags=re.S),
    }
    for label, variant in variants.items():
        assert signature(from_nvidia_smi(variant, name="x")) == want, label


def test_ansi_fixture_really_has_codes() -> None:
    assert "\x1b[4m" in fixture_text("hgx-h100.txt")
    assert "\t" not in fixture_text("pcie-4gpu-spaces.txt")


@pytest.mark.parametrize("name", NAMES)
def test_soc_and_cpu_aliases(name: str) -> None:
    text = fixture_text(name)
    old = re.sub(r"(?<=\s)SYS(?=\s|$)", "SOC", text)
    old = re.sub(r"(?<=\s)PHB(?=\s|$)", "CPU", old)
    assert old != text or not ({"SYS", "PHB"} & set(cells_of(text).values()))
    assert signature(from_nvidia_smi(old, name="x")) == signature(from_nvidia_smi(text, "x"))


def test_nic_legend_missing_uses_column_names() -> None:
    text = fixture_text("pcie-4gpu-spaces.txt")
    t = from_nvidia_smi(text[: text.index("NIC Legend")])
    assert [t.graph.nodes[n]["label"] for n in t.nics()] == ["NIC0", "NIC1"]


# ------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_fixture(name: str) -> None:
    t = read_nvidia_smi(FIXTURES / name)
    text = to_nvidia_smi(t)
    back = from_nvidia_smi(text)
    same_connections(t, back)
    assert [t.gpu(g).numa for g in t.gpus()] == [back.gpu(g).numa for g in back.gpus()]
    assert signature(back) == signature(from_nvidia_smi(to_nvidia_smi(back)))
    cells = cells_of(text)
    for (a, b), cls in cells.items():
        assert t.connection(a, b) == cls


def test_to_nvidia_smi_format() -> None:
    t = read_nvidia_smi(FIXTURES / "dgx-a100.txt")
    lines = to_nvidia_smi(t).split("\n")
    assert lines[0].split("\t")[:3] == ["", "GPU0", "GPU1"]
    assert lines[0].split("\t")[-2:] == ["CPU Affinity", "NUMA Affinity"]
    assert lines[1].split("\t") == ["GPU0", " X ", *["NV12"] * 7, "PXB", "PXB",
                                    *["SYS"] * 6, "48-63,176-191", "3"]
    assert lines[9].split("\t")[:2] == ["NIC0", "PXB"]
    assert len(lines[9].split("\t")) == 17
    assert "Legend:" in lines
    assert "  NIC4: mlx5_6" in lines
    assert "NET" not in to_nvidia_smi(t)


def test_to_nvidia_smi_missing_attributes() -> None:
    b = TopologyBuilder()
    hb = b.add_host_bridge(b.add_numa(2))
    b.add_gpu("0", hb)
    row = to_nvidia_smi(b.build()).splitlines()[1].split("\t")
    assert row == ["GPU0", " X ", "N/A", "2"]


def test_to_nvidia_smi_cluster() -> None:
    c = cluster(read_nvidia_smi(FIXTURES / "pcie-4gpu-spaces.txt"), 2)
    text = to_nvidia_smi(c)
    lines = text.split("\n")
    header = lines[0].split("\t")
    assert header[1:9] == [f"GPU{i}" for i in range(8)]
    assert header[9:13] == [f"NIC{i}" for i in range(4)]
    assert lines[1].split("\t")[1:10] == [" X ", "PXB", "NODE", "SYS",
                                         "NET", "NET", "NET", "NET", "PIX"]
    assert "  NIC2: n1/mlx5_0" in lines
    assert any(line.startswith("  NET") for line in lines)
    with pytest.raises(InputError, match=r"cell GPU0/GPU4 is NET"):
        from_nvidia_smi(text)


@st.composite
def machines(draw: st.DrawFn) -> Topology:
    """Random one-machine trees built with TopologyBuilder."""
    b = TopologyBuilder()
    gpus: list[str] = []
    nics: list[str] = []
    hbs: list[str] = []

    def fill(parent: str, depth: int) -> None:
        kinds = ["gpu", "nic", "switch"] if depth < 2 else ["gpu", "nic"]
        for _ in range(draw(st.integers(0 if depth else 1, 3))):
            kind = draw(st.sampled_from(kinds))
            if kind == "gpu":
                gpus.append(b.add_gpu(str(len(gpus)), parent))
            elif kind == "nic":
                k = len(nics)
                nics.append(b.add_nic(f"n{k}", parent, label=f"mlx5_{k}"))
            else:
                fill(b.add_switch(parent), depth + 1)

    for i in range(draw(st.integers(1, 3))):
        cpus = draw(st.sampled_from([None, f"{16 * i}-{16 * i + 15}"]))
        numa = b.add_numa(i, cpus=cpus)
        for _ in range(draw(st.integers(1, 2))):
            hbs.append(b.add_host_bridge(numa))
            fill(hbs[-1], 0)
    if not gpus:
        gpus.append(b.add_gpu("0", draw(st.sampled_from(hbs))))
    if len(gpus) >= 2:
        pairs = list(itertools.combinations(gpus, 2))
        chosen = draw(st.lists(st.sampled_from(pairs), max_size=4, unique=True))
        for a, c in chosen:
            b.add_nvlink(a, c, draw(st.integers(1, 18)))
        if draw(st.booleans()):
            fabric = b.add_nvswitch()
            members = draw(st.lists(st.sampled_from(gpus), min_size=2, unique=True))
            for g in members:
                b.add_nvlink(g, fabric, draw(st.sampled_from([6, 12, 18])))
    return b.build(name="random")


@settings(max_examples=50, deadline=None)
@given(machines())
def test_round_trip_random_trees(t: Topology) -> None:
    back = from_nvidia_smi(to_nvidia_smi(t))
    same_connections(t, back)
    assert [t.gpu(g).numa for g in t.gpus()] == [back.gpu(g).numa for g in back.gpus()]


# ------------------------------------------------------------------------ reconstruction


def test_nvswitch_heuristic_needs_three_equal_gpus() -> None:
    two = from_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n")
    assert two.nodes_of_kind(NodeKind.NVSWITCH) == []
    assert two.graph.has_edge("gpu:0", "gpu:1")
    uneven = from_nvidia_smi("\tGPU0\tGPU1\tGPU2\n"
                             "GPU0\t X \tNV4\tNV4\nGPU1\tNV4\t X \tNV2\nGPU2\tNV4\tNV2\t X \n")
    assert uneven.nodes_of_kind(NodeKind.NVSWITCH) == []
    assert uneven.nvlinks() == [("0", "1", 4), ("0", "2", 4), ("1", "2", 2)]


def test_hidden_pcie_gives_separate_host_bridges() -> None:
    t = from_nvidia_smi("\tGPU0\tGPU1\tNUMA Affinity\n"
                        "GPU0\t X \tNV2\t0\nGPU1\tNV2\t X \t0\n")
    assert t.numa_nodes == 1
    hb = [next(n for n in t.graph.neighbors(f"gpu:{g}")
               if t.graph.nodes[n]["kind"] == NodeKind.HOST_BRIDGE) for g in ("0", "1")]
    assert hb[0] != hb[1]


def test_cpu_affinity_groups_numa_unless_sys() -> None:
    text = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
            "GPU0\t X \tNV1\tSYS\t0-7\nGPU1\tNV1\t X \tSYS\t0-7\nGPU2\tSYS\tSYS\t X \t8-15\n")
    t = from_nvidia_smi(text)
    assert [t.gpu(g).numa for g in t.gpus()] == [0, 0, 1]
    same = from_nvidia_smi("\tGPU0\tGPU1\tCPU Affinity\n"
                           "GPU0\t X \tSYS\t0-63\nGPU1\tSYS\t X \t0-63\n")
    assert same.numa_nodes == 2
    assert same.connection("0", "1") == "SYS"


def test_numa_index_fills_unused_numbers() -> None:
    t = from_nvidia_smi("\tGPU0\tGPU1\tNUMA Affinity\n"
                        "GPU0\t X \tSYS\tN/A\nGPU1\tSYS\t X \t0\n")
    assert [t.gpu(g).numa for g in t.gpus()] == [1, 0]


def test_single_gpu_and_sparse_ids() -> None:
    t = from_nvidia_smi("\tGPU3\tCPU Affinity\tNUMA Affinity\nGPU3\t X \t0-3\t0\n")
    assert t.gpus() == ["3"]
    assert to_nvidia_smi(t).splitlines()[0] == "\tGPU3\tCPU Affinity\tNUMA Affinity"


# ------------------------------------------------------------------------ errors

TWO = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t{a}\t0-7\nGPU1\t{b}\t X \t0-7\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", r"^empty nvidia-smi topo -m output$"),
        ("\n  \r\n\n", r"^empty"),
        ("$ nvidia-smi topo -m\n", r"^empty"),
        ("hello world\nthis is not it\n", r"^line 1: expected the nvidia-smi topo -m header"),
        ("\x00\x01garbage", r"^line 1: expected"),
        ("\n\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n", r"^line 3: found the matrix row GPU0 where"),
        (TWO.format(a="ABC", b="PHB"), r"^line 2: cell GPU0/GPU1 is 'ABC', not a connection"),
        (TWO.format(a="PHB", b="SYS"),
         r"^asymmetric matrix: GPU0/GPU1 is PHB \(line 2\) but GPU1/GPU0 is SYS \(line 3\)$"),
        (TWO.format(a="NV0", b="NV0"), r"cell GPU0/GPU1 is 'NV0'"),
        (TWO.format(a="NV999999", b="NV999999"), r"'NV999999': a GPU pair bonds 1 to 64"),
        (TWO.format(a="X", b="X"), r"^line 2: cell GPU0/GPU1 is X off the diagonal$"),
        (TWO.format(a="NET", b="NET"), r"^line 2: cell GPU0/GPU1 is NET"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-7\nGPU1\tPHB\t X \n",
         r"^line 3: row GPU1 has 2 entries, expected 3 \(2 devices \+ CPU Affinity\)$"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPHB\tSYS\nGPU1\tPHB\t X \n",
         r"^line 2: row GPU0 has 3 entries, expected 2"),
        ("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPHB\tPHB\nGPU1\tPHB\t X \tPHB\n\nLegend:\n",
         r"^non-square matrix: .* no row for GPU2$"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \nGPU2\tPHB\tPHB\t X \n",
         r"^line 4: row 'GPU2' is not a device column"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n",
         r"^line 3: second row for GPU0$"),
        ("\tGPU0\tGPU1\nGPU0\tPHB\tPHB\nGPU1\tPHB\t X \n",
         r"^line 2: diagonal cell GPU0/GPU0 is PHB, expected X$"),
        ("\tGPU0\tNIC0\nGPU0\t X \tNV2\nNIC0\tNV2\t X \n", r"NVLink only joins GPUs"),
        ("\tGPU0\tGPU1\tGPU1\n", r"^line 1: column 'GPU1' appears twice"),
        ("\tGPU0\tCPU Affinity\tNIC0\n", r"^line 1: device column 'NIC0' comes after"),
        ("\tGPU0\tGPU00\nGPU0\t X \tSYS\nGPU00\tSYS\t X \n", r"^line 1: two columns name GPU 0"),
        ("\tGPU0\tNUMA Affinity\nGPU0\t X \tzero\n", r"^line 2: NUMA Affinity of GPU0 is 'zero'"),
        ("\tGPU0\tGPU1\tGPU2\n"
         "GPU0\t X \tNODE\tSYS\nGPU1\tNODE\t X \tNODE\nGPU2\tSYS\tNODE\t X \n",
         r"^inconsistent matrix: GPU0/GPU2 is SYS"),
        ("\tGPU0\tGPU1\tGPU2\n"
         "GPU0\t X \tPIX\tPHB\nGPU1\tPIX\t X \tPIX\nGPU2\tPHB\tPIX\t X \n",
         r"^inconsistent matrix: GPU0/GPU2 is PHB \(line 2\) but the other cells imply PIX$"),
        ("\tGPU0\tGPU1\tNUMA Affinity\nGPU0\t X \tSYS\t0\nGPU1\tSYS\t X \t0\n",
         r"^inconsistent matrix: GPU0/GPU1 is SYS \(line 2\) but their NUMA Affinity"),
    ],
)
def test_errors(text: str, match: str) -> None:
    with pytest.raises(InputError, match=match) as info:
        from_nvidia_smi(text)
    assert "\n" not in str(info.value)


def test_read_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no such file"):
        read_nvidia_smi(tmp_path / "missing.txt")
    with pytest.raises(InputError, match=r"is a directory, not a file$"):
        read_nvidia_smi(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match=r"not UTF-8"):
        read_nvidia_smi(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(InputError, match=r"^empty"):
        read_nvidia_smi(empty)


def test_a_fabric_with_a_link_down_is_still_a_fabric() -> None:
    # GPU 7 of a DGX A100 with one of its 12 links down shows NV11 to every peer. One count
    # differing made it a mesh of 28 direct bonds: 83 links at GPU 0 where it has 12, and
    # three GPUs sharing nothing on NVLink.
    lines = (FIXTURES / "dgx-a100.txt").read_text().splitlines()
    for i, line in enumerate(lines[1:9], start=1):
        cells = line.split("\t")
        if cells[0] == "GPU7":
            cells = [c.replace("NV12", "NV11") for c in cells]
        else:
            cells[8] = cells[8].replace("NV12", "NV11")
        lines[i] = "\t".join(cells)
    t = from_nvidia_smi("\n".join(lines) + "\n")
    assert len(t.nodes_of_kind(NodeKind.NVSWITCH)) == 1
    assert t.connection("0", "7") == "NV11" and t.connection("0", "1") == "NV12"
    fabric = t.nodes_of_kind(NodeKind.NVSWITCH)[0]
    assert t.graph.edges[t.gpu("7").node, fabric]["links"] == 11
    assert t.graph.edges[t.gpu("0").node, fabric]["links"] == 12
    assert "nvswitch" in {d.kind.value for d in t.domains(["0", "1", "2"])}
