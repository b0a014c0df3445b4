"""Route search: fewest copies, then fewest steps, then by name; copy refusal names the step."""

from __future__ import annotations

import pytest

import interop
from interop import CopyRequiredError, MemoryMapperChain, MemoryType, NoRouteError, UnsupportedTypeError
from interop.mapper import MemoryMapper, registered
from interop.routing import search

M = MemoryType


def edge(a: MemoryType, b: MemoryType, zero: bool = True, name: str | None = None) -> type[MemoryMapper]:
    return type(f"E_{a.value}_{b.value}", (MemoryMapper,), {"src": a, "dst": b, "zero_copy": zero,
                                                             "name": name or f"{a.value}_to_{b.value}"})


def names(path):
    return [c.name for c in path] if path is not None else None


def test_fewest_copies_beats_fewest_steps():
    edges = (edge(M.CPU, M.OPENCL, zero=False), edge(M.CPU, M.USM), edge(M.USM, M.OPENCL))
    zero, best = search(edges, M.CPU, M.OPENCL)
    assert names(zero) == ["cpu_to_usm", "usm_to_opencl"]
    assert names(best) == ["cpu_to_usm", "usm_to_opencl"]


def test_fewest_steps_among_equal_copies():
    edges = (edge(M.CPU, M.DMA), edge(M.DMA, M.OPENVINO), edge(M.CPU, M.USM), edge(M.USM, M.OPENCL),
             edge(M.OPENCL, M.OPENVINO), edge(M.CPU, M.OPENVINO, zero=False))
    zero, best = search(edges, M.CPU, M.OPENVINO)
    assert names(zero) == ["cpu_to_dma", "dma_to_openvino"]


def test_first_only_edges_start_routes_but_never_continue_them():
    fo = type("FO", (MemoryMapper,), {"src": M.FFMPEG, "dst": M.CUDA, "zero_copy": True, "name": "ffmpeg_to_cuda",
                                       "first_only": True})
    edges = (edge(M.CPU, M.FFMPEG), fo, edge(M.CPU, M.CUDA, zero=False))
    zero, best = search(edges, M.CPU, M.CUDA)
    assert zero is None and names(best) == ["cpu_to_cuda"]  # not cpu_to_ffmpeg -> ffmpeg_to_cuda
    assert names(search(edges, M.FFMPEG, M.CUDA)[0]) == ["ffmpeg_to_cuda"]


def test_ties_broken_by_name():
    edges = (edge(M.CPU, M.USM), edge(M.USM, M.NPU), edge(M.CPU, M.DMA), edge(M.DMA, M.NPU))
    zero, _ = search(edges, M.CPU, M.NPU)
    assert names(zero) == ["cpu_to_dma", "dma_to_npu"]  # 'cpu_to_dma' < 'cpu_to_usm'


def test_only_copying_routes():
    edges = (edge(M.CPU, M.OPENCL, zero=False), edge(M.OPENCL, M.OPENCV_UMAT, zero=False), edge(M.CPU, M.OPENCV_UMAT, zero=False))
    zero, best = search(edges, M.CPU, M.OPENCV_UMAT)
    assert zero is None
    assert names(best) == ["cpu_to_opencv_umat"]  # one copy beats two


def test_no_cycles_and_no_path():
    edges = (edge(M.CPU, M.DMA), edge(M.DMA, M.CPU))
    assert search(edges, M.CPU, M.NPU) == (None, None)


def test_identity_is_the_empty_chain():
    chain = interop.route(M.CPU, M.CPU)
    assert isinstance(chain, MemoryMapperChain) and chain.mappers == [] and chain.zero_copy
    cpu = interop.Context.default(M.CPU)
    assert interop.route(cpu, cpu).mappers == []


def test_bad_arguments_are_interop_errors():
    with pytest.raises(UnsupportedTypeError, match="MemoryType.CPU"):
        interop.route("cpu", M.OPENVINO)
    with pytest.raises(UnsupportedTypeError):
        interop.route(M.CPU, 3)
    with pytest.raises(UnsupportedTypeError):
        interop.route(M.CPU, M.CPU, allow_copy="yes")
    assert issubclass(CopyRequiredError, NoRouteError)


def _brute_force_cost(src: MemoryType, dst: MemoryType, zero_only: bool):
    edges = list(registered().values())
    best = None

    def walk(node, seen, path):
        nonlocal best
        if node is dst and path:
            if zero_only and not all(c.zero_copy for c in path):
                return
            key = (sum(not c.zero_copy for c in path), len(path))
            best = key if best is None or key < best else best
            return
        for c in edges:
            if c.src is node and c.dst not in seen and not (path and c.first_only):
                walk(c.dst, seen | {c.dst}, path + [c])

    walk(src, {src}, [])
    return best


def test_registered_graph_routes_are_optimal():
    """For every pair of memory types, route() returns a chain no worse than any path in the real graph."""
    for src in M:
        for dst in M:
            if src is dst:
                continue
            best_any = _brute_force_cost(src, dst, zero_only=False)
            best_zero = _brute_force_cost(src, dst, zero_only=True)
            if best_any is None:
                with pytest.raises(NoRouteError) as e:
                    interop.route(src, dst, allow_copy=True)
                assert dst not in e.value.reachable
                continue
            chain = interop.route(src, dst, allow_copy=True)
            assert (chain.copies, len(chain)) == (best_zero or best_any)
            assert chain.mappers[0].src is src and chain.mappers[-1].dst is dst
            assert all(a.dst is b.src for a, b in zip(chain.mappers, chain.mappers[1:]))
            if best_zero is None:
                with pytest.raises(CopyRequiredError) as ce:
                    interop.route(src, dst)
                step = ce.value.step
                assert not step.zero_copy and step.name in str(ce.value)
                assert dst in ce.value.reachable


def test_no_route_lists_what_is_reachable():
    try:
        interop.route(M.NPU, M.FFMPEG, allow_copy=True)
    except NoRouteError as e:
        assert isinstance(e.reachable, frozenset)
        assert "reach" in str(e)
    else:  # a route exists in this build; then every step must connect
        pass
