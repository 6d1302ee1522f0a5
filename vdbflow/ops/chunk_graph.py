"""One chunk graph: the Dask graphs of work done chunk by chunk of points, as ``dask.array.reduction`` shapes
them - a task a chunk (:func:`map_chunks`), then either arrays stacked from the chunks' results
(:func:`stack_chunks`) or a fixed tree of combines over the chunks' order and one aggregate
(:func:`reduce_chunks`).  Nothing here computes: each function returns Dask objects, computed where the
caller computes the rest (the library doors, a job's write)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.errors import SamplingError


@dataclass(frozen=True)
class PerChunk:
    """An argument of :func:`map_chunks` that differs by chunk: one entry a chunk, in the chunks' order."""

    values: Sequence[Any]


def blocks(array: Any, lead: int = 1) -> list[Any]:
    """The blocks (Delayed) of a Dask array chunked along its ``lead`` leading axes, whole along the others,
    in C order of the block grid."""
    whole = array.rechunk({axis: -1 for axis in range(lead, array.ndim)})
    return list(whole.to_delayed().ravel())


def map_chunks(per_chunk: Callable[..., Any], *args: Any, name: str, token: str | None = None, lead: int = 1) -> list:
    """One task a chunk: ``per_chunk(*args)`` with each Dask array of ``args`` replaced by its chunk's block
    (chunked alike along the ``lead`` leading axes) and each :class:`PerChunk` by its chunk's entry; other
    arguments are passed whole to every task (a large one sent once: give it as a Delayed or a Future).
    Tasks are named ``{name}-{token}-{b}`` (the job's progress steps and resumed figures read those names).
    Returns the chunks' Delayed results, in order."""
    import dask
    import dask.array as da

    per = [
        blocks(a, lead) if isinstance(a, da.Array) else list(a.values) if isinstance(a, PerChunk) else None
        for a in args
    ]
    counts = {len(p) for p in per if p is not None}
    if len(counts) != 1:
        raise SamplingError(f"expected the chunked arguments to have one chunk count, got {sorted(counts)}")
    (count,) = counts
    pairs = list(zip(per, args, strict=True))
    token = token or dask.base.tokenize(per_chunk, *(a if p is None else p for p, a in pairs))
    task = dask.delayed(per_chunk, pure=True)
    key = f"{name}-{token}"
    return [task(*(a if p is None else p[b] for p, a in pairs), dask_key_name=f"{key}-{b}") for b in range(count)]


def stack_chunks(
    parts: Sequence[Any],
    chunks: tuple[tuple[int, ...], ...],
    outputs: Sequence[tuple[tuple, Any]],
    names: Sequence[str],
) -> list[Any]:
    """Dask arrays from the chunks' tuples of results: output ``k`` (trailing shape, dtype ``outputs[k]``) is
    item ``first + k`` of each chunk's result, where ``parts[b]`` is the Delayed of chunk ``b`` (C order of the
    block grid ``chunks``) or a ``(Delayed, first)`` pair (several chunks in one task's result).  Each array
    is named ``names[k]``, chunked ``chunks`` along its leading axes, whole along the others."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    parts = [p if isinstance(p, tuple) else (p, 0) for p in parts]
    grid = tuple(len(c) for c in chunks)
    deps = list({id(d): d for d, _ in parts}.values())
    arrays = []
    for k, ((shape, dtype), name) in enumerate(zip(outputs, names, strict=True)):
        whole = (0,) * len(shape)
        layer: dict[Any, Any] = {  # Dask's task keys: (name, *block index)
            (name, *index, *whole): (operator.getitem, done.key, first + k)
            for index, (done, first) in zip(np.ndindex(*grid), parts, strict=True)
        }
        graph = HighLevelGraph.from_collections(name, layer, dependencies=deps)
        arrays.append(da.Array(graph, name, chunks=tuple(chunks) + tuple((d,) for d in shape), dtype=dtype))
    return arrays


def reduce_chunks(
    parts: Sequence[Any],
    combine: Callable[[Any, Any], Any] | None,
    aggregate: Callable[..., Any] | None = None,
) -> Any:
    """The chunks' results reduced into one Delayed: ``combine(a, b)`` pairwise in a fixed tree over the
    chunks' order (so the result never depends on the workers or threads: floating sums keep their order),
    then ``aggregate`` of the last one; without ``combine``, ``aggregate`` of the list of all parts."""
    import dask

    if not parts:
        raise SamplingError("expected at least one point chunk, got none")
    parts = list(parts)
    if combine is None:
        return dask.delayed(aggregate, pure=True)(parts)
    while len(parts) > 1:
        parts = [
            dask.delayed(combine, pure=True)(*parts[i : i + 2]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    return parts[0] if aggregate is None else dask.delayed(aggregate, pure=True)(parts[0])
