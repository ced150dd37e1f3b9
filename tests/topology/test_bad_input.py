"""Regression tests for bad arguments an audit found raising raw TypeError, AttributeError,
KeyError or networkx errors, or answering NaN/inf: each is now a one-line InputError."""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import pytest

from interplace.errors import InputError
from interplace.topology import (
    Gpu,
    Link,
    Topology,
    TopologyBuilder,
    builtin,
    cluster,
    detect_format,
    load,
    pcie_gbps,
)
from interplace.topology._graph import MAX_CLUSTER_MACHINES, EdgeKind


def _one_line(exc: pytest.ExceptionInfo[InputError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------- 1. builtin / load arguments
@pytest.mark.parametrize("spec", [None, 5, b"p4d"])
def test_builtin_of_a_non_string_is_an_input_error(spec: Any) -> None:
    with pytest.raises(InputError, match="named by a string") as exc:
        builtin(spec)
    _one_line(exc)


@pytest.mark.parametrize("spec", [None, 5, 2.5])
def test_load_of_neither_name_nor_path_is_an_input_error(spec: Any) -> None:
    with pytest.raises(InputError, match="a name or a path") as exc:
        load(spec)
    _one_line(exc)


def test_detect_format_of_bytes_or_none_is_an_input_error() -> None:
    for x in (None, 5, b"<system/>"):
        with pytest.raises(InputError, match="is text"):
            detect_format(x)  # type: ignore[arg-type]


# ------------------------------------------------------------- 2. cluster's size
@pytest.mark.parametrize(("n", "message"), [
    (2.5, "must be an integer, got 2.5"), (2.0, "must be an integer"), ("2", "must be an integer"),
    (True, "must be an integer, got True"), (False, "must be an integer"),
    (0, "at least one machine"), (-1, "at least one machine"),
    (MAX_CLUSTER_MACHINES + 1, f"between 1 and {MAX_CLUSTER_MACHINES}"),
])
def test_cluster_size_must_be_an_integer_in_range(n: Any, message: str) -> None:
    with pytest.raises(InputError, match=message) as exc:
        cluster(builtin("p4d"), n)
    _one_line(exc)


def test_cluster_and_builtin_share_the_size_limit() -> None:
    assert MAX_CLUSTER_MACHINES == 4096
    for spec in (f"p4d*{MAX_CLUSTER_MACHINES + 1}", "p4d*0", "p4d*" + "9" * 5000):
        with pytest.raises(InputError, match=f"between 1 and {MAX_CLUSTER_MACHINES}") as exc:
            builtin(spec)
        assert len(_one_line(exc)) < 120  # 5,000 digits are not all echoed back
    assert cluster(builtin("p4d"), 2).name == "p4d*2"
    assert builtin("p4d*002").name == "p4d*2"


def test_cluster_of_a_non_topology_is_an_input_error() -> None:
    with pytest.raises(InputError, match="built from a Topology"):
        cluster("p4d", 2)  # type: ignore[arg-type]


# ------------------------------------------------------------- 3. builder and graph
def test_host_bridge_below_an_unknown_numa_node_is_an_input_error() -> None:
    b = TopologyBuilder()
    with pytest.raises(InputError, match="cannot hang below 'numa:9'"):
        b.add_host_bridge("numa:9")
    with pytest.raises(InputError, match="cannot hang below"):
        b.add_host_bridge(b.add_host_bridge(b.add_numa(0)))  # a host bridge, not a NUMA node
    assert [k for _, k in b.graph.nodes(data="kind")] == ["numa", "host_bridge"]


def test_topology_of_an_empty_or_edgeless_graph_is_an_input_error() -> None:
    with pytest.raises(InputError, match="has no GPU"):
        Topology(nx.Graph())
    g = nx.Graph()
    g.add_node("gpu:0", kind="gpu", gpu_id="0", machine="")
    with pytest.raises(InputError, match="not attached to any NUMA node"):
        Topology(g)
    with pytest.raises(InputError, match="networkx graph"):
        Topology("x")


def test_nvlink_count_must_be_a_positive_integer() -> None:
    for links in (2.5, "2", True, 0):
        b = TopologyBuilder()
        hb = b.add_host_bridge(b.add_numa(0))
        g0, g1 = b.add_gpu("0", hb), b.add_gpu("1", hb)
        with pytest.raises(InputError, match="positive integer"):
            b.add_nvlink(g0, g1, links)  # type: ignore[arg-type]


# ------------------------------------------------------------- 4. records and relabel
@pytest.mark.parametrize("kw", [{"id": 5}, {"id": None}, {"id": "0", "memory_bytes": "x"},
                                {"id": "0", "memory_bytes": math.nan},
                                {"id": "0", "memory_bytes": -1}, {"id": "0", "numa": "x"}])
def test_gpu_record_fields_of_the_wrong_type_are_input_errors(kw: dict[str, Any]) -> None:
    with pytest.raises(InputError) as exc:
        Gpu(node="gpu:0", **kw)
    _one_line(exc)


@pytest.mark.parametrize("links", ["x", 2.5, 0, True])
def test_link_count_of_the_wrong_type_is_an_input_error(links: Any) -> None:
    with pytest.raises(InputError, match="NVLink count must be a positive integer"):
        Link(u="a", v="b", kind=EdgeKind.NVLINK, bandwidth=1.0, links=links)


def test_relabel_needs_a_mapping_of_strings() -> None:
    t = builtin("p4d")
    with pytest.raises(InputError, match="must be a mapping"):
        t.relabel([("0", "x")])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="new id of GPU '0' must be a string, got 5"):
        t.relabel({"0": 5})  # type: ignore[dict-item]
    with pytest.raises(InputError, match="unknown GPU ids"):
        t.relabel({0: "x", "99": "y"})  # type: ignore[dict-item]
    assert t.relabel({"0": "x"}).gpus()[-1] == "x"


def test_domains_of_a_string_or_none_is_an_input_error() -> None:
    t = builtin("p4d")
    for gpus in ("01", None, 5):
        with pytest.raises(InputError, match="list of GPU ids"):
            t.domains(gpus)  # type: ignore[arg-type]


# ------------------------------------------------------------- 5. pcie_gbps
@pytest.mark.parametrize(("gts", "width"), [(8.0, math.nan), (8.0, math.inf), (math.nan, 16),
                                        (math.inf, 16), ("8", 16), (8.0, "16"), (8.0, 1.5),
                                        (8.0, True), (None, 16), (0, 16), (8.0, 0)])
def test_pcie_gbps_refuses_non_numbers_and_non_finite_values(gts: Any, width: Any) -> None:
    with pytest.raises(InputError, match="invalid PCIe link") as exc:
        pcie_gbps(gts, width)
    _one_line(exc)


def test_pcie_gbps_of_valid_links_is_unchanged() -> None:
    assert pcie_gbps(8.0, 16) == 8.0 * 16 * (128 / 130) / 8.0
    assert pcie_gbps(8, 16) == pcie_gbps(8.0, 16)
    assert pcie_gbps(2.5, 1) == 0.25
