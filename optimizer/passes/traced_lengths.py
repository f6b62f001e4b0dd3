"""A declared symbol that a Reshape's element count pins, as its value in the inner shapes.

TorchScript's tracer records some sizes as Python ints. torch's nn.MultiheadAttention views its keys
and values ``[src_len, bsz * num_heads, head_dim]``, and the tracer wrote src_len as the export's
sequence length (6) while the input's sequence axis is declared dynamic. The queries' view reads the
length from the shape, so q's head views say ``seq`` where k's and v's say 6, and the layout glue
around the fused attention could not be proven (docs/holdout.md, torch MHA leftovers).

A Reshape keeps its element count. Where its input's dims and its output's (both as inferred; an
invented name states nothing) differ in one symbol that a graph input declares, the count pins it:
``[seq, batch, 32] -> [6, 4*batch, 8]`` is ``32*seq*batch = 192*batch``, so seq = 6 and the model
runs at no other length (the Reshape fails there). The pass writes the value into every inner
value's shape (``4*seq`` becomes 24) and folds Shape reads of the inputs that it makes static; the
inputs and outputs keep their declared dims, and a symbol two Reshapes pin to different values is
left alone. Later passes then see what the static export shows (the key / value views fold like
the queries'). The report warns which symbol took which value, and why: a model declared dynamic
that runs at one length is worth knowing about.

Runs after the first shape inference and again after each shape refresh (levels.py): a view's input
is often sized only once folding made the shape arithmetic before it constant.

``--verify`` feeds a pinned symbol its value (``pinned_lengths`` reads the pins back from the
report's records of this pass; optimize passes them to verify as ``--shape`` would, a user's
``--shape`` first): the original fails at any other length, so a default of 8 could verify nothing.
"""

from __future__ import annotations

import collections

import onnx_ir as ir

from onnx_fuse.passes._dim_products import Dim, dim_text, mul, to_dim, value_dims
from onnx_fuse.passes._infra import FusePass, is_default_op, reroute
from onnx_fuse.passes._new_values import int64_initializer
from onnx_fuse.passes._shape_values import _attr, invented_name


def _declared_symbols(graph: ir.Graph) -> set[str]:
    """The symbolic dims the graph's inputs declare (by name)."""
    out = set()
    for v in graph.inputs:
        for d in (v.shape.dims if v.shape is not None else ()):
            if not isinstance(d, int) and getattr(d, "value", None) is not None and not invented_name(d.value):
                out.add(str(d.value))
    return out


def _product(dims: list[Dim]) -> Dim:
    total: Dim = (1, ())
    for d in dims:
        total = mul(total, d)
    return total


def pinned_symbol(ins: list[Dim], entries: list[Dim]) -> tuple[str, int] | None:
    """(symbol, value) when prod(ins) = prod(entries) holds for one value of one symbol alone: the
    symbol appears once in the input's product and not in the target's, every other atom cancels."""
    left, right = _product(ins), _product(entries)
    rest = collections.Counter(left[1])
    rest.subtract(collections.Counter(right[1]))
    if any(c < 0 for c in rest.values()):
        return None   # a symbol of the target's own: no value of the input's pins it
    extra = [a for a, c in rest.items() if c > 0]
    if len(extra) != 1 or rest[extra[0]] != 1 or left[0] <= 0 or right[0] % left[0]:
        return None
    value = right[0] // left[0]
    return (extra[0], value) if value >= 1 else None


def reshape_pin(node: ir.Node, declared: set[str]) -> tuple[str, int] | None:
    """(symbol, value) that the Reshape ``node``'s element count proves: its input's dims and its
    output's (as inferred) differ in one declared symbol alone."""
    if not is_default_op(node, "Reshape") or len(node.inputs) < 2:
        return None
    ins, outs = value_dims(node.inputs[0]), value_dims(node.outputs[0])
    if not ins or not outs or any(d is None or any(invented_name(a) for a in d[1]) for d in ins + outs):
        return None
    pin = pinned_symbol(ins, outs)
    return pin if pin is not None and pin[0] in declared else None


def _pinned_dim(dim, pins: dict[str, int]):
    """``dim`` with the pinned symbols' values put in (an int when no symbol is left); None if unchanged."""
    if isinstance(dim, int) or getattr(dim, "value", None) is None:
        return None
    d = to_dim(str(dim.value))
    if d is None or not any(a in pins for a in d[1]):
        return None
    coef = d[0]
    for a in d[1]:
        coef *= pins.get(a, 1)
    rest = tuple(a for a in d[1] if a not in pins)
    return coef if not rest else dim_text((coef, rest))


def _fold_input_shape_reads(graph: ir.Graph, pins: dict[str, int]) -> int:
    """Shape reads of the graph's inputs whose dims the pins make all static, as constants (the
    inputs keep their declared dims, so folding would not see them)."""
    done = 0
    inputs = {id(v) for v in graph.inputs}
    for node in list(graph):
        if not is_default_op(node, "Shape") or not node.inputs or id(node.inputs[0]) not in inputs:
            continue
        x, out = node.inputs[0], node.outputs[0]
        if x.shape is None or out.is_graph_output():
            continue
        dims = [d if isinstance(d, int) else _pinned_dim(d, pins) for d in x.shape.dims]
        start, end = _attr(node, "start", None), _attr(node, "end", None)
        if not all(e is None or isinstance(e, int) for e in (start, end)):
            continue
        picked = dims[start:end]   # Shape's start / end clamp as a Python slice does
        if not all(isinstance(d, int) for d in picked):
            continue
        reroute(out, int64_initializer(graph, f"{out.name or 'shape'}_pinned", picked))
        done += 1
    return done


def pinned_lengths(records) -> dict[str, int]:
    """symbol -> value that the runs of this pass among ``records`` (the report's pass records)
    pinned: the stats it writes, ``"<symbol>=<value>"``; a symbol two runs pinned to different
    values is left out."""
    found: dict[str, set[int]] = collections.defaultdict(set)
    for record in records:
        if getattr(record, "name", None) != TracedLengthsPass.name:
            continue
        for key in getattr(record, "stats", {}) or {}:
            symbol, _, value = str(key).rpartition("=")
            if symbol and value.isdigit():
                found[symbol].add(int(value))
    return {s: next(iter(v)) for s, v in sorted(found.items()) if len(v) == 1}


class TracedLengthsPass(FusePass):
    """A declared symbol a Reshape's element count pins, as its value in every inner shape (module docstring)."""

    name = "traced-lengths"

    def __init__(self) -> None:
        super().__init__()
        self.stats_reason: str | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        declared = _declared_symbols(graph)
        if not declared:
            return ir.passes.PassResult(model, modified=False)
        pins: dict[str, int] = {}
        where: dict[str, str] = {}
        clash = set()
        for node in graph:
            pin = reshape_pin(node, declared)
            if pin is None:
                continue
            symbol, value = pin
            if pins.setdefault(symbol, value) != value:
                clash.add(symbol)
            where.setdefault(symbol, node.name or node.outputs[0].name)
        for symbol in clash:
            pins.pop(symbol)
        if not pins:
            return ir.passes.PassResult(model, modified=False)
        keep = {id(v) for v in (*graph.inputs, *graph.outputs)}   # the model's interface stays
        changed = 0
        for g in model.graphs():
            for v in ir.convenience.create_value_mapping(g).values():
                if id(v) in keep or v.shape is None:
                    continue
                dims = [_pinned_dim(d, pins) for d in v.shape.dims]
                if any(d is not None for d in dims):
                    v.shape = ir.Shape([n if n is not None else d for n, d in zip(dims, v.shape.dims)])
                    changed += 1
        changed += _fold_input_shape_reads(graph, pins)
        for symbol, value in sorted(pins.items()):
            self.stats[f"{symbol}={value}"] += 1
        self.stats_reason = "; ".join(
            f"the model runs only at {s} = {v} (Reshape {where[s]!r} keeps its element count only there); "
            f"its inner shapes take {v}" for s, v in sorted(pins.items()))
        return ir.passes.PassResult(model, modified=changed > 0)
