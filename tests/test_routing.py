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


def _brute_force_cost(src: MemoryType, dst: MemoryType, free_only: bool):
    """(always-copy steps, steps, may-copy steps) of the best path by brute force; ``free_only``: no step that
    always copies."""
    edges = list(registered().values())
    best = None

    def always(c):
        return not c.zero_copy and not c.may_copy

    def walk(node, seen, path):
        nonlocal best
        if node is dst and path:
            if free_only and any(always(c) for c in path):
                return
            key = (sum(always(c) for c in path), len(path), sum(bool(c.may_copy) for c in path))
            best = key if best is None or key < best else best
            return
        for c in edges:
            if c.src is node and c.dst not in seen and not (path and c.first_only):
                walk(c.dst, seen | {c.dst}, path + [c])

    walk(src, {src}, [])
    return best


def test_registered_graph_routes_are_optimal():
    """For every pair of memory types, route() returns a chain no worse than any path in the real graph: fewest
    steps that always copy, then fewest steps, then fewest that may copy; without allow_copy a chain with a step
    that always copies is refused, naming it."""
    for src in M:
        for dst in M:
            if src is dst:
                continue
            best_any = _brute_force_cost(src, dst, free_only=False)
            best_free = _brute_force_cost(src, dst, free_only=True)
            if best_any is None:
                with pytest.raises(NoRouteError) as e:
                    interop.route(src, dst, allow_copy=True)
                assert dst not in e.value.reachable
                continue
            chain = interop.route(src, dst, allow_copy=True)
            always = sum(not m.zero_copy and not m.may_copy for m in chain.mappers)
            assert (always, len(chain), sum(m.may_copy for m in chain.mappers)) == (best_free or best_any)
            assert chain.mappers[0].src is src and chain.mappers[-1].dst is dst
            assert all(a.dst is b.src for a, b in zip(chain.mappers, chain.mappers[1:]))
            assert chain.zero_copy == all(m.zero_copy for m in chain.mappers)
            if best_free is None:
                with pytest.raises(CopyRequiredError) as ce:
                    interop.route(src, dst)
                step = ce.value.step
                assert not step.zero_copy and not step.may_copy and step.name in str(ce.value)
                assert dst in ce.value.reachable


def test_may_copy_edges_are_marked():
    """An edge that copies for some inputs only is neither zero-copy nor a plain copy: routes say "may copy"."""
    chain = interop.route(M.FFMPEG, M.CPU)
    assert not chain.zero_copy and chain.may_copy and chain.copies == 1
    assert "may copy" in repr(chain) and "may copy" in str(chain)
    for cls in registered().values():
        assert not (cls.zero_copy and cls.may_copy), cls.name


def test_no_route_lists_what_is_reachable():
    """A NoRouteError says, in .reachable and in its message, every type some route from the source reaches."""
    edges = registered()
    sinks = [d for d in M if not any(a is d for (a, _b) in edges)]  # types no edge leaves
    assert sinks, "every memory type has an edge out: pick another pair for this test"
    src = sinks[0]
    dst = next(d for d in M if d is not src)
    with pytest.raises(NoRouteError) as e:
        interop.route(src, dst, allow_copy=True)
    assert e.value.reachable == frozenset()
    assert "can reach: nothing" in str(e.value)
    # from a source with edges: .reachable is exactly the closure of the graph, and the message names each type
    src = M.VAAPI
    want = set()
    todo = [src]
    while todo:
        n = todo.pop()
        for (a, b) in edges:
            if a is n and b not in want and b is not src:
                want.add(b)
                todo.append(b)
    unreachable = [d for d in M if d is not src and d not in want]
    if unreachable:
        with pytest.raises(NoRouteError) as e2:
            interop.route(src, unreachable[0], allow_copy=True)
        assert e2.value.reachable == frozenset(want)
        for m in want:
            assert m.name in str(e2.value)
