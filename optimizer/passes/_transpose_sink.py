"""Transposes by p1 sunk through a region of layout-agnostic ops into the Transposes by p2 after
it, which become Transposes by p1[p2] (fold-layout-chains' ``transpose-sunk``, layout_chains.py;
the region is passes/_transpose_region.py's)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import repoint_shape, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names, int64_initializer
from onnx_fuse.passes._shape_values import shape_read_bounds
from onnx_fuse.passes._transpose_region import ONE_AXIS, Refused, collect, layout_inputs, perm_of
from onnx_fuse.passes.constant_folding import constant_tensor


def sink_transpose(graph: ir.Graph, t1: ir.Node, opset: int) -> bool:
    """The region from the Transpose ``t1`` rewritten on its entries' inputs, when fewer Transposes are left."""
    try:
        region = collect(t1, opset)
    except Refused:
        return False
    p1, entries = region.p1, {id(t) for t in region.entries}
    composed = {id(t): [p1[i] for i in perm_of(t)] for t in region.exits}
    inv = [int(i) for i in np.argsort(p1)]
    # computed operands read permuted: one Transpose per value unless it broadcasts alike
    moved = {id(op.inputs[j]): op.inputs[j] for op, j in region.operands
             if not _dims_alike(list(op.inputs[j].shape.dims), inv, len(p1))}
    # a rotation passed runs 3-D between two views: the one into it stays (the one after it meets the
    # head merge), so it costs a node
    rotations = sum(op.op_type == "RotaryEmbedding" for op in region.inner)
    after = (len(region.kept) + sum(c != list(range(len(c))) for c in composed.values()) + len(moved) + rotations
             + len(region.mixed))
    if after >= len(region.entries) + len(region.exits) + len(region.mixed):
        return False  # no Transpose saved
    permuted: dict[int, ir.Value] = {}

    def source(v: ir.Value) -> ir.Value:
        """v in the entries' input layout: an entry's input, else v (rewritten in place)."""
        producer = v.producer()
        return producer.inputs[0] if producer is not None and id(producer) in entries else v

    constants = {(id(n), j) for n, j in region.constants}
    operands = {(id(n), j) for n, j in region.operands}
    for op in region.inner:
        for j in layout_inputs(op):  # a norm's scale read off a kept entry stays as it is
            v = op.inputs[j]
            if v is None:
                continue
            if (id(op), j) in operands:
                if id(v) in moved:
                    if id(v) not in permuted:
                        permuted[id(v)] = _transposed(graph, op, v, inv)
                    op.replace_input_with(j, permuted[id(v)])
            elif (id(op), j) in constants:
                if not _broadcasts_alike(v, inv, len(p1)):
                    op.replace_input_with(j, _permuted(graph, v, inv, len(p1)))
            elif source(v) is not v:
                op.replace_input_with(j, source(v))
        if op.op_type in ("Concat", "Split") or op.op_type in ONE_AXIS:
            a = op.attributes.get("axis")
            default = 0 if op.op_type == "Split" else -1
            op.attributes["axis"] = ir.AttrInt64("axis", region.new_axis(default if a is None else int(a.value)))
        for out in op.outputs:
            if out.shape is not None and len(out.shape) == len(p1):
                out.shape = ir.Shape([out.shape.dims[i] for i in inv])
        if op.op_type == "RotaryEmbedding":
            _rotary_3d(graph, op)
    for t2 in region.exits:
        t2.replace_input_with(0, source(t2.inputs[0]))
        t2.attributes["perm"] = ir.AttrInt64s("perm", composed[id(t2)])
    for t in region.mixed:  # Transpose(x, p') read in the entries' layout: Transpose(x, p'[inv]) (x's rank known)
        perm, x = perm_of(t), t.inputs[0]
        t.attributes["perm"] = ir.AttrInt64s("perm", [perm[i] for i in inv])
        t.outputs[0].shape = ir.Shape([x.shape.dims[perm[i]] for i in inv])
    for view in region.view_reads:
        view.replace_input_with(0, source(view.inputs[0]))
    for shape in region.shape_reads:
        _shape_through(graph, shape, source(shape.inputs[0]), p1, opset)
    for t in region.entries:
        if not t.outputs[0].uses():
            graph.remove(t, safe=True)
    return True


def _rotary_3d(graph: ir.Graph, rope: ir.Node) -> None:
    """A 4-D RotaryEmbedding now reading [B, S, H, D] (the heads-last layout) as its 3-D form: the input
    viewed [B, S, H*D], num_heads H, the output viewed back [B, S, H, D] for the region's readers."""
    x, y = rope.inputs[0], rope.outputs[0]
    b, s, h, d = y.shape.dims   # permuted already (x's producer may come later in the region's order)
    taken = graph_names(graph)
    base = y.name or "rotary"
    merge = int64_initializer(graph, f"{base}_heads_merged", [0, 0, h * d], taken)
    split = int64_initializer(graph, f"{base}_heads_split", [0, 0, h, d], taken)
    view = ir.node("Reshape", [x, merge])
    view.outputs[0].name = fresh_name(f"{base}_in3d", taken)
    view.outputs[0].type, view.outputs[0].shape = x.type, ir.Shape([b, s, h * d])
    graph.insert_before(rope, [view])
    rope.replace_input_with(0, view.outputs[0])
    rope.attributes["num_heads"] = ir.AttrInt64("num_heads", h)
    readers = list(y.uses())
    back = ir.node("Reshape", [y, split])
    y4 = back.outputs[0]
    y4.name, y4.type, y4.shape = fresh_name(f"{base}_heads", taken), y.type, ir.Shape([b, s, h, d])
    for use in readers:
        use.node.replace_input_with(use.idx, y4)
    graph.insert_after(rope, [back])
    y.shape = ir.Shape([b, s, h * d])


def _shape_through(graph: ir.Graph, shape: ir.Node, v: ir.Value, p1: list[int], opset: int) -> None:
    """Shape(Transpose(v, p1))[start:end] as v's dims picked by p1: one Shape slice where they
    are a run of v's axes in order (the whole shape before opset 15, which has no slice), else
    Gather(Shape(v), picked)."""
    rank = len(p1)
    start, end = shape_read_bounds(shape, rank)   # not a reference: the region and _readers refuse those
    picked = [p1[i] for i in range(start, end)]
    run = not picked or picked == list(range(picked[0], picked[0] + len(picked)))
    if run and (opset >= 15 or picked == list(range(rank))):
        if picked and opset >= 15:
            repoint_shape(shape, v, picked[0], picked[-1] + 1)
        else:   # the whole shape, or an empty run: the same on v (the same rank)
            shape.replace_input_with(0, v)
        return
    taken = graph_names(graph)
    base = shape.outputs[0].name or "shape"
    indices = int64_initializer(graph, f"{base}_axes", picked, taken)
    whole = ir.node("Shape", [v])
    whole.outputs[0].name = fresh_name(f"{base}_all", taken)
    whole.outputs[0].type, whole.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([rank])
    gather = ir.node("Gather", [whole.outputs[0], indices], attributes={"axis": 0})
    gather.outputs[0].name = fresh_name(f"{base}_picked", taken)
    gather.outputs[0].type, gather.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(picked)])
    graph.insert_after(shape, [whole, gather])
    reroute(shape.outputs[0], gather.outputs[0])
    graph.remove(shape, safe=True)


def _broadcasts_alike(v: ir.Value, inv: list[int], rank: int) -> bool:
    """Whether the constant ``v`` broadcasts the same in both layouts (a [C] bias when the last axis
    stays): its padded shape unchanged by ``inv``, its axes of size > 1 in the same order."""
    return _dims_alike(list(constant_tensor(v).shape), inv, rank)


def _dims_alike(dims: list, inv: list[int], rank: int) -> bool:
    """_broadcasts_alike on dims (ints or symbols; a symbol is not 1)."""
    padded = (1,) * (rank - len(dims)) + tuple(dims)
    moved = [padded[i] for i in inv]
    big = [i for i in inv if padded[i] != 1]
    return tuple(moved) == padded and big == sorted(big)


def _transposed(graph: ir.Graph, reader: ir.Node, v: ir.Value, inv: list[int]) -> ir.Value:
    """Transpose(v, inv), a new node before ``reader`` (v is computed outside the region)."""
    t = ir.node("Transpose", [v], attributes={"perm": inv})
    out = t.outputs[0]
    out.name = fresh_name(f"{v.name or 'operand'}_perm", graph_names(graph))
    out.type = v.type
    out.shape = ir.Shape([v.shape.dims[i] for i in inv])
    graph.insert_before(reader, [t])
    return out


def _permuted(graph: ir.Graph, v: ir.Value, inv: list[int], rank: int) -> ir.Value:
    """The constant ``v`` (broadcast to ``rank`` axes) transposed by ``inv``, a new initializer."""
    t = constant_tensor(v)
    arr = t.numpy().reshape((1,) * (rank - len(t.shape)) + tuple(t.shape))
    arr = np.ascontiguousarray(np.transpose(arr, inv))
    name = fresh_name(f"{v.name or 'const'}_perm", graph_names(graph))
    value = ir.Value(name=name, type=ir.TensorType(t.dtype), shape=ir.Shape(list(arr.shape)),
                     const_value=ir.tensor(arr, dtype=t.dtype, name=name))
    graph.register_initializer(value)
    return value
