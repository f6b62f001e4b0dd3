"""Merge shape values that hold the same symbolic dims, whichever tensor they were read from.

Per-layer glue reads the same dims from different tensors: one attention lowering takes the past
length from ``Shape(past_key_values.0.key)[2]``, the next from ``Shape(past_key_values.1.key)[2]``;
each RoPE takes the batch from ``Shape(its own q or k)[0]``. Plain CSE sees different inputs and
keeps every copy, although all of them are ``past_sequence`` (or ``batch``): by the ONNX rule for
dim_param, which shape inference propagates, equal dim names are equal sizes. ``shape_entries``
says what each small integer value holds (ints and dim names, through the Shape -> Slice / Gather /
Squeeze / Unsqueeze / Concat / Cast chains); values with the same dtype and entries are one value,
so every later copy is replaced by the first. Node CSE then merges what reads them (the Concat of
the Expand target, the Expand, the mask arithmetic), and dead code removes the copies.

The first copy itself is read from a graph input when one has those dims side by side (a new
``Shape(input, start, end)``, or ``Gather(Shape(input), j)`` for a scalar, at the top of the graph): a Shape of an intermediate keeps that
intermediate alive, which is what stops a head-split Reshape/Transpose from dying once the ops
it fed read the 3-D tensor instead (rules/layout/heads_3d.yaml).
That read is taken only where it is no more nodes than the copy keeps alive (passes/_rep_cost.py):
a copy whose cone reads nothing but the shapes of the inputs that read would and constants
(the mask probes vary some inputs' lengths, not others'), and costs fewer nodes
than the read adds (a cache rebuild's ``Unsqueeze(P + S)`` of a scalar its Range reads: 1 node
against ``Shape(past)[2:3] + Shape(ids)[1:2]``'s 3), stays the representative. Dead copies (what
a rewrite left for dead code) take no part: one picked first would keep its chain alive.
A sum of input dims (a present's length ``past_sequence + sequence``, which no input holds) is
read as those reads added up, ``Shape(past)[2] + Shape(ids)[1]``; an Add or Sub of two sizes
already in the graph holds the sum too (passes/_shape_values.py). A present read by its own
length (BLOOM and GPT-NeoX cut their masks at ``Shape(present)[2]``) would otherwise stop
attention-kv-cache, which replaces the present: the mask would read the node's own output.

Unknown dims (no name, or a name onnx's inference invented) never match; values whose entries are
all ints are left to folding. Dims onnx cannot size but an earlier value provably has (the
[B*H,S,D] views of TorchScript's bmm attention, BLOOM's Shape(k^T)[2]) are named by shape
inference (passes/_dim_source.py), so their reads merge here too and the intermediate they were
read from no longer escapes a fusion through its size.

``ScalarTwinReadsPass`` (stage scalar-twins, last of the structural stages at O2 on): a scalar read
``Gather(Shape(x), j)`` and a [1] read of the same dim (``Shape(x, j, j + 1)``) have different keys (torch's
noopt export writes both: a Range's end beside a Concat's part), so the whole ``Shape(x)`` stays. There each
Gather becomes ``Squeeze`` of its live twin where every reader of every live whole ``Shape(x)`` is such a
Gather: the whole Shapes die, so it saves a node at least (a Gather for a Squeeze each, the Shapes gone).
Only once, after the last cleanup: inside a cleanup's fixed point a later round's scalar read from an input
(``_read_dims``) or a rule's Shape read brought the whole Shape back, and the Gathers had only become
Squeezes (1a31ab2, reverted: 50 hold-out cells swapped a Gather for a Squeeze, 4 were a node worse).
A ``Gather(Shape(x), [j])`` (a one-entry 1-D index: a [1] read, as torch writes ``x.shape[j:j+1]`` or a
tracer its index list) reading the same whole Shape is itself such a twin, but keeps the Shape alive: from
opset 15 it becomes ``Shape(x, j, j + 1)`` (one node for one) where then every reader of the whole Shapes is a
scalar Gather with a twin or such a [1] Gather, so the whole Shapes die (glue50, fuzz_s45 st-twin-gather-1d).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, reroute
from onnx_fuse.passes._rep_cost import fresh_cost, keep_cost, live_nodes, twin_index
from onnx_fuse.passes._shape_values import invented_name, read_dims, shape_entries, shape_read_bounds

_SUM = " + "   # how a sum of dims is spelled (passes/_dim_sums.py)


def _key(value: ir.Value) -> object | None:
    if value.dtype is None or not value.dtype.is_integer():
        return None
    if value.shape is not None and len(value.shape) > 1:
        return None
    got = shape_entries(value)
    if got is None:
        return None
    entries, scalar = got
    if all(isinstance(e, int) for e in entries):
        return None
    # a name onnx's inference invented is no fact: the runs of one optimization reuse them for
    # different dims (passes/shape_inference.py)
    if any(invented_name(e) for e in entries):
        return None
    return (value.dtype, tuple(entries), scalar)


def _from_input(graph: ir.Graph, key) -> ir.Value | None:
    """A new 1-D ``Shape(input, start, end)`` holding ``key``'s entries, when a graph input has
    them side by side (a scalar: ``Gather(Shape(input), j)``); else, for one entry that is a sum
    of input dims (a present's length ``past + new``), those reads added up; None otherwise (or
    for vectors before opset 15's start/end)."""
    dtype, entries, scalar = key
    if dtype != ir.DataType.INT64 or (not scalar and graph.opset_imports.get("", 0) < 15):
        return None
    n = len(entries)
    for inp in graph.inputs:
        dims = read_dims(inp)
        if dims is None:
            continue
        for start in range(len(dims) - n + 1):
            if dims[start:start + n] == list(entries):
                return _read_dims(graph, inp, start, n, scalar)
    return _sum_from_inputs(graph, entries, scalar)


def _sum_from_inputs(graph: ir.Graph, entries: list, scalar: bool) -> ir.Value | None:
    """``Add`` of the graph-input reads (and int terms) that make up one sum entry, at the top of
    the graph; None when an entry is not such a sum, a term is no input's dim, or the Add does not
    read back as that entry (a sum shape_entries leaves as written would turn a present's plain
    ``Shape(present)[2]`` into an opaque value, and e.g. torch's Where(Equal(target, -1), 1,
    target) before a repeat-KV Expand would no longer fold; a decode step's ``past + 1`` reads
    back, passes/_shape_values.py)."""
    if len(entries) != 1 or not isinstance(entries[0], str) or _SUM not in entries[0]:
        return None
    first = next(iter(graph), None)   # the sum goes above every node there now
    before = set(graph)
    total = _build_sum(graph, entries[0], scalar, first)
    got = shape_entries(total) if total is not None else None
    if total is None or (got is not None and got[1] == scalar and _same_sum(got[0], entries[0])):
        return total
    _drop_nodes(graph, {n for n in graph if n not in before})
    return None


def _drop_nodes(graph: ir.Graph, nodes: set[ir.Node]) -> None:
    """Remove ``nodes`` (a read this pass just built and does not keep), consumers first."""
    for node in reversed([n for n in graph if n in nodes]):
        graph.remove(node, safe=True)


def _same_sum(got: list, entry: str) -> bool:
    """``got`` is the one entry ``entry``, sums compared in one spelling (Optimum names a present's
    length ``past + new``; shape_entries spells the Add ``new + past``)."""
    from onnx_fuse.passes._dim_products import to_dim
    from onnx_fuse.passes._dim_sums import dim_sum

    if len(got) != 1 or not isinstance(got[0], str):
        return False
    a, b = dim_sum([to_dim(got[0])]), dim_sum([to_dim(entry)])
    return got[0] == entry or (a is not None and a == b)


def _build_sum(graph: ir.Graph, entry: str, scalar: bool, first: ir.Node | None) -> ir.Value | None:
    reads = []
    for t in entry.split(_SUM):
        if t.isdigit():
            reads.append(int(t))
            continue
        at = next(((inp, dims.index(t)) for inp in graph.inputs
                   if (dims := read_dims(inp)) is not None and t in dims), None)
        if at is None:
            return None
        reads.append(at)
    total = None
    for r in reads:
        part = (_int_value(graph, r, scalar, first) if isinstance(r, int)
                else _read_dims(graph, r[0], r[1], 1, scalar))
        total = part if total is None else _add(graph, total, part, scalar, first)
    return total


def _value(shape) -> ir.Value:
    return ir.Value(name=None, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(shape))


def _int_value(graph: ir.Graph, k: int, scalar: bool, before: ir.Node | None) -> ir.Value:
    out = _value([] if scalar else [1])
    out.const_value = ir.tensor(np.array(k if scalar else [k], dtype=np.int64))
    node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", out.const_value)], outputs=[out])
    _put(graph, node, before)
    return out


def _add(graph: ir.Graph, a: ir.Value, b: ir.Value, scalar: bool, before: ir.Node | None) -> ir.Value:
    out = _value([] if scalar else [1])
    _put(graph, ir.Node("", "Add", [a, b], outputs=[out]), before)
    return out


def _put(graph: ir.Graph, node: ir.Node, before: ir.Node | None) -> None:
    if before is None:
        graph.append(node)
    else:
        graph.insert_before(before, node)


def _read_dims(graph: ir.Graph, inp: ir.Value, start: int, n: int, scalar: bool) -> ir.Value:
    """``Shape(inp)[start:start+n]`` (``Shape(inp)[start]`` when scalar), at the top of the graph."""
    def value(shape):
        return ir.Value(name=None, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(shape))

    if scalar:
        whole = value([len(inp.shape)])
        at = value([])
        at.const_value = ir.tensor(np.array(start, dtype=np.int64))
        out = value([])
        nodes = [ir.Node("", "Shape", [inp], outputs=[whole]),
                 ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", at.const_value)], outputs=[at]),
                 ir.Node("", "Gather", [whole, at], attributes=[ir.AttrInt64("axis", 0)], outputs=[out])]
    else:
        out = value([n])
        nodes = [ir.Node("", "Shape", [inp], attributes=[ir.AttrInt64("start", start),
                                                          ir.AttrInt64("end", start + n)], outputs=[out])]
    first = next(iter(graph), None)
    for node in nodes:
        if first is None:
            graph.append(node)
        else:
            graph.insert_before(first, node)
    return out


def _reads_input(value: ir.Value, depth: int = 0) -> bool:
    node = value.producer()
    if node is not None and node.op_type == "Add" and depth < 8:   # a sum of input reads
        return all(x is not None and (x.const_value is not None or _reads_input(x, depth + 1))
                   for x in node.inputs)
    if node is not None and node.op_type == "Gather" and node.inputs[0] is not None:
        node = node.inputs[0].producer()   # a scalar read: Gather(Shape(input), j)
    return (node is not None and node.op_type == "Shape" and node.inputs[0] is not None
            and node.inputs[0].is_graph_input())


def merge_equal_shape_values(graph: ir.Graph, merge) -> int:
    """Point uses of each later shape value at the first equal one; returns how many merged.

    Only live values take part: a rewrite leaves the nodes it replaced behind for dead code, and
    one of those picked first would keep its producer chain alive in place of the rewrite's own
    equal value. ``merge(keep, drop)`` does the rewiring (CSE's, which keeps graph output names)."""
    seen: dict[object, ir.Value] = {}
    merged = 0
    live = live_nodes(graph)
    index = None   # built once, when first needed
    for node in graph:
        if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 or node not in live:
            continue
        value = node.outputs[0]
        if not value.uses() and not value.is_graph_output():
            continue
        key = _key(value)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            first = seen[key] = value
            if value.is_graph_output():
                continue
            direct = _reads_input(value)
            before = set(graph)
            if (src := _from_input(graph, key)) is None:
                continue
            fresh = {n for n in graph if n not in before}
            cost = keep_cost(value, graph, live, fresh)
            if cost is None:
                keep = direct   # a read of another input (or an intermediate) keeps its own
            else:
                index = twin_index(graph, live) if index is None else index
                # ties keep a direct read (already an input's) and give way to the fresh read
                # for a copy of an intermediate
                added = fresh_cost(src, fresh, index)
                keep = cost <= added if direct else cost < added
            if keep:
                _drop_nodes(graph, fresh)
                continue
            seen[key] = first = src
        if merge([first], [value]):
            merged += 1
    return merged


class ScalarTwinReadsPass(FusePass):
    """Scalar reads of a whole Shape as Squeezes of their [1] twins where the whole Shapes die (module docstring)."""

    name = "scalar-twins"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        done = 0
        for graph in model.graphs():
            ones = _one_entry_gathers_as_shapes(graph) if opset >= 15 else 0
            if ones:
                self.stats["[1] Gather of a whole Shape as a Shape slice"] += ones
            twins = _scalar_reads_of_twins(graph)
            if twins:
                self.stats["scalar read of a twin"] += twins
            done += twins + ones
        if done:
            DeadCodeEliminationPass()(model)
        return ir.passes.PassResult(model, modified=bool(done))


def _whole_shape(node: ir.Node) -> bool:
    """A Shape node reading every axis of its input: no start / end, or ones that cover the rank (shape_cse's
    read of a whole vector from an input is ``Shape(input, 0, rank)``)."""
    if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    if not ({"start", "end"} & set(node.attributes)):
        return True
    x = node.inputs[0]
    return x.shape is not None and shape_read_bounds(node, len(x.shape)) == (0, len(x.shape))


def _gather_index(node: ir.Node, rank: int) -> tuple[int, bool] | None:
    """(j in [0, rank), scalar) of a ``Gather(Shape(x), c)`` reader (axis 0, ``c`` a constant scalar or a one-entry
    1-D index); None for any other reader."""
    from onnx_fuse.passes.constant_folding import constant_tensor

    if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2 \
            or len(node.outputs) != 1 or (node.attributes.get("axis") is not None
                                          and (node.attributes["axis"].is_ref() or node.attributes["axis"].value != 0)):
        return None
    t = constant_tensor(node.inputs[1])
    if t is None or t.dtype not in (ir.DataType.INT64, ir.DataType.INT32) or len(t.shape) > 1 or t.size != 1:
        return None
    j = int(t.numpy().reshape(-1)[0])
    return (j % rank, len(t.shape) == 0) if -rank <= j < rank else None


def _one_entry_gathers_as_shapes(graph: ir.Graph) -> int:
    """Each ``Gather(Shape(x), [j])`` as ``Shape(x, j, j + 1)`` where every reader of every live whole ``Shape(x)``
    is a Gather of a constant index and each scalar one's dim is also read as [1] (by such a Gather, or by a live
    [1] value computed before the Gather's readers): the whole Shapes then die (the scalar reads become Squeezes of
    their twins, ``_scalar_reads_of_twins``). The new Shape goes right after the first whole Shape. Returns how many
    Gathers became Shapes."""
    live = live_nodes(graph)
    wholes: dict[ir.Value, list[ir.Node]] = {}
    for node in graph:
        if node in live and _whole_shape(node):
            wholes.setdefault(node.inputs[0], []).append(node)
    done = 0
    for x, shapes in wholes.items():
        if x.shape is None or any(s.outputs[0].is_graph_output() for s in shapes):
            continue
        rank, ones, scalars = len(x.shape), [], set()
        for s in shapes:
            for use in s.outputs[0].uses():
                got = _gather_index(use.node, rank) if use.idx == 0 and use.node.graph is graph else None
                if got is None:
                    break
                (scalars.add(got[0]) if got[1] else ones.append((use.node, got[0])))
            else:
                continue
            break
        else:
            if not ones or not scalars <= {j for _, j in ones}:
                continue
            first = shapes[0]
            for gather, j in ones:
                out = ir.Value(name=None, type=gather.outputs[0].type, shape=ir.Shape([1]))
                graph.insert_after(first, ir.Node("", "Shape", [x], outputs=[out],
                                                  attributes=[ir.AttrInt64("start", j), ir.AttrInt64("end", j + 1)]))
                reroute(gather.outputs[0], out)
                graph.remove(gather, safe=True)
                done += 1
    return done


def _scalar_reads_of_twins(graph: ir.Graph) -> int:
    """Each ``Gather(Shape(x), j)`` as ``Squeeze(v)`` for a live [1] value ``v`` of that dim, where every reader of
    every live whole ``Shape(x)`` (node CSE merged those) is such a Gather (so that the Shapes die) and ``v`` is
    computed before each Gather's readers (the Squeeze goes right after ``v``'s producer: torch writes the Range's
    Gather above the Concat's Shape). Returns how many Gathers were read so."""
    live = live_nodes(graph)
    order = {id(n): i for i, n in enumerate(graph)}
    vectors: dict[object, ir.Value] = {}   # (dtype, entries) of a live [1] read -> the first such value
    wholes: dict[ir.Value, list[ir.Node]] = {}   # x -> its live whole Shape(x) nodes
    for node in graph:
        if node not in live or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        if _whole_shape(node):
            wholes.setdefault(node.inputs[0], []).append(node)
        key = _key(node.outputs[0])
        if key is not None and not key[2] and len(key[1]) == 1:
            vectors.setdefault(key[:2], node.outputs[0])
    done = 0
    for shapes in wholes.values():
        for gather, twin in _twin_reads(shapes, vectors, order) or ():
            src = twin.producer()
            if order[id(src)] > order[id(gather)]:   # a Shape of an input read further down: up to the Gather
                graph.remove(src)
                graph.insert_before(gather, src)
                order = {id(n): i for i, n in enumerate(graph)}
            out = ir.Value(name=None, type=gather.outputs[0].type, shape=ir.Shape([]))
            graph.insert_after(src, ir.Node("", "Squeeze", [twin], outputs=[out]))
            reroute(gather.outputs[0], out)
            done += 1
    return done


def _twin_reads(shapes: list[ir.Node], vectors: dict, order: dict) -> list[tuple[ir.Node, ir.Value]] | None:
    """Each reader of the whole Shapes ``shapes`` of one tensor with the live [1] value (``vectors``) of the dim it
    gathers; None unless every reader is such a scalar Gather whose twin is computed before the Gather's readers,
    each in this graph, or is a Shape of a graph input (which can move up to the Gather); and no whole Shape is a
    graph output."""
    twins = []
    for shape in shapes:
        whole = shape.outputs[0]
        if whole.is_graph_output():
            return None
        for use in whole.uses():
            gather = use.node
            out = gather.outputs[0] if gather.op_type == "Gather" and len(gather.outputs) == 1 \
                and gather.domain in ("", "ai.onnx") and use.idx == 0 else None
            key = _key(out) if out is not None else None
            twin = vectors.get(key[:2]) if key is not None and key[2] else None
            src = None if twin is None else twin.producer()
            movable = src is not None and src.op_type == "Shape" and src.inputs[0] is not None \
                and src.inputs[0].is_graph_input()
            if src is None or id(gather) not in order or not movable and any(order.get(id(u.node), -1) <= order[id(src)] for u in out.uses()) \
                    or any(u.node.graph is not gather.graph for u in out.uses()):
                return None
            twins.append((gather, twin))
    return twins or None
