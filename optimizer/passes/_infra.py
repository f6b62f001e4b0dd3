"""Pass infrastructure: every transformation is a pass that says truthfully whether it changed
the model, and the runner times it, counts nodes and names the offending pass on failure.

Passes build on onnx-ir's pass classes (``ir.passes.InPlacePass``): they mutate the model in place
and return ``ir.passes.PassResult(model, modified)``. Ours add ``stats``, a counter of what they did
(e.g. ``{"folded": 12}``), which the report shows.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Sequence

import onnx_ir as ir

from onnx_fuse.errors import InternalError, OnnxFuseError


class FusePass(ir.passes.InPlacePass):
    """Base of onnx-fuse passes: in place, with a name and a stats counter for the report."""

    #: Report name; defaults to the class name without the ``Pass`` suffix, kebab-cased.
    name: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.stats: collections.Counter[str] = collections.Counter()

    @property
    def display_name(self) -> str:
        if self.name:
            return self.name
        base = type(self).__name__.removesuffix("Pass")
        return "".join("-" + c.lower() if c.isupper() else c for c in base).lstrip("-")


@dataclasses.dataclass
class PassRecord:
    """What one run of one pass did, for the report."""

    name: str
    modified: bool
    seconds: float
    nodes_before: int
    nodes_after: int
    stats: dict[str, int]


def is_default_op(node: ir.Node | None, *ops: str) -> bool:
    """``node`` is one of ``ops`` in the default ONNX domain."""
    return node is not None and node.op_type in ops and node.domain in ("", "ai.onnx")


def attr_value(node: ir.Node, name: str, default):
    """The value of attribute ``name``, or ``default`` where the node does not set it."""
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def axis_attr(node: ir.Node, rank: int, default: int = 0) -> int | None:
    """The node's ``axis`` attribute normalized into [0, rank) (``default`` where it is not set); None for a
    reference attribute or an axis outside [-rank, rank)."""
    attr = node.attributes.get("axis")
    if attr is not None and attr.is_ref():
        return None
    axis = default if attr is None else int(attr.value)
    return axis % rank if -rank <= axis < rank else None


def reroute(old: ir.Value, new: ir.Value) -> None:
    """Every reader of ``old`` (a graph output too) reads ``new``; a graph output keeps its name."""
    name = old.name
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if new.is_graph_output():
        old.name, new.name = None, name


def repoint_shape(shape: ir.Node, value: ir.Value, start: int | None, end: int | None) -> None:
    """Point a Shape node at ``value`` reading its axes ``[start, end)`` (None: the attribute unset,
    from the first axis / to the last); the slice attributes are opset 15's, the caller's to check."""
    shape.replace_input_with(0, value)
    shape.attributes.pop("start", None)
    shape.attributes.pop("end", None)
    for name, k in (("start", start), ("end", end)):
        if k is not None:
            shape.attributes[name] = ir.AttrInt64(name, k)


def count_nodes(model: ir.Model) -> int:
    """Nodes in the main graph and every subgraph."""
    return _count_graph_nodes(model.graph)


def _count_graph_nodes(graph: ir.Graph) -> int:
    # run twice per pass: len() per graph and a look at attributes only where a node has any
    # takes half the time of walking every node with RecursiveGraphIterator
    total = len(graph)
    for node in graph:
        if not node.attributes:
            continue
        for attr in node.attributes.values():
            if attr.is_ref():
                continue
            if attr.type == ir.AttributeType.GRAPH:
                total += _count_graph_nodes(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                total += sum(_count_graph_nodes(g) for g in attr.as_graphs())
    return total


def run_pass(p: ir.passes.PassBase, model: ir.Model) -> PassRecord:
    """Run one pass in place and record it. A crash is reported as an InternalError naming it."""
    name = getattr(p, "display_name", type(p).__name__)
    stats_before = collections.Counter(getattr(p, "stats", {}))
    before = count_nodes(model)
    start = time.perf_counter()
    try:
        result = p(model)
    except OnnxFuseError:
        raise
    except Exception as exc:  # a bug in the pass: keep the cause, name the pass
        raise InternalError(f"pass {name!r} failed: {type(exc).__name__}: {exc}") from exc
    seconds = time.perf_counter() - start
    if result.model is not model:
        raise InternalError(f"pass {name!r} returned a new model; passes must work in place")
    if result.modified:
        from onnx_fuse.passes._scoped_names import separate_scoped_names

        separate_scoped_names(model)   # a name new in one graph may be defined in a body
    stats = collections.Counter(getattr(p, "stats", {}))
    stats.subtract(stats_before)
    return PassRecord(name, bool(result.modified), seconds, before, count_nodes(model),
                      {k: v for k, v in stats.items() if v})


def run_to_fixed_point(passes: Sequence[ir.passes.PassBase], model: ir.Model, *,
                       max_rounds: int = 8,
                       on_record: Callable[[PassRecord], None] | None = None) -> list[PassRecord]:
    """Run ``passes`` in order, repeating the sequence until no pass changes the model."""
    records: list[PassRecord] = []
    for _ in range(max_rounds):
        changed = False
        for p in passes:
            record = run_pass(p, model)
            records.append(record)
            if on_record:
                on_record(record)
            changed |= record.modified
        if not changed:
            break
    return records
