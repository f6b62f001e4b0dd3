"""Fused q / k / v projections whose heads are interleaved: the weight's columns permuted so that each
piece the model picks is one contiguous column range, and the picks one Split of the projection.

GPT-NeoX, BLOOM, Falcon and CodeGen compute q, k and v with one MatMul whose output columns are laid
out per head ([H, 3, D] for GPT-NeoX / BLOOM / Falcon without multi-query, Falcon's new decoder
architecture [Hkv, G + 2, D], CodeGen's [mp_num, 3, H / mp_num * D] groups in the order q, v, k), then
view the output with a head axis and pick q / k / v on it (Gather or GatherND of a constant index,
Slice, Split, Squeeze / Unsqueeze, Transposes between them). The attention rules read the Llama form
(one projection per tensor, or one Split of the last axis, then a [B, S, H, D] view): here q's
columns are strided, so each export needs its own recognizers.

The pass follows every reader of the projection's output Y [*lead, N] (through the bias Add, if any)
by value: each view / pick op maps the element positions of its input to those of its output, so a
value of the region is ``Transpose(Reshape(Y[..., cols], lead + cols.shape), perm)`` for an integer
array ``cols`` of projection columns and a permutation ``perm``. Reshapes must keep the lead dims
(proven from the shapes: ``reshape_out_dims``) and act on an unpermuted value; picks must act on the
trailing axes with constant indices. A value read by anything else (or a graph output) is a leaf.
When the leaves' columns together are each column exactly once and not already in order, the weight
(and bias) columns are permuted to the leaves' order, Y is split on its last axis into the leaves'
widths, and each leaf is its piece viewed as ``lead + cols.shape`` (Reshape with 0s for the lead) and
transposed by ``perm`` where that is no identity. The old views and picks die (Shape reads of them
keep reading the same shapes: Y keeps its shape). Exact: every output element is the same dot
product. With ``as_matmuls`` (ort, onnx) each piece is its own MatMul (+ bias Add) on the permuted
weight's column range instead of a Split: the separate projections' form, which ORT's packed Attention
takes whole and pack-matmul packs again after the rules; not where a Shape reads Y or a view before the
pieces (Y would stay computed for its shape).

Refused: a projection output read whole (or by a pick the pass cannot follow) beside the picks, a
column read twice or never, non-constant indices, picks on the lead axes, a Reshape that merges a
lead axis, non-float weights; pieces that meet again in a Concat before any product (a partial
rotation's halves: GPT-J, GLM) or that a Concat widens along the head axis (DeepSeek's k_nope), pieces
of different head sizes; and pieces that are already one Split of Y's last axis in column order (the
Llama form: nothing to do). Pieces in column order are taken without a permutation where they are picked
from a view of Y (GPT-BigCode's multi-query Unsqueeze to [B, 1, S, N] before its Split: as separate
projections, or a Split of Y at trt, they reach the attention in its 3-D form) or by a Slice each (Phi-3's
TorchScript / dynamo slices: one Split after pack-matmul); not where a piece is joined to a cache
(``_cached``), a Shape reads the region, or the pieces would need more data-moving Transposes than the
region has (``_moved``: Mamba-1's in_proj Transpose(0, 2, 1) before its Split, shared by both halves, would be
one per half, and pack-matmul's repacked Split leaves them there). That count is for pieces picked without a
head view only: after one (ModernBERT's [B, S, 3, H, D] transposed heads-first, then unbound), the per-piece
heads-first Transposes are the form the attention rules read. Decided by the index arithmetic only, not by
which ops wrote it.
The replaced views, picks and projection are removed at once (``_drop_dead``), so that pack-matmul never
packs the dead projection beside its pieces.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._column_picks import ColumnState, Refused, step
from onnx_fuse.passes._dim_products import value_dims
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import array_initializer, fresh_name, graph_names, int64_initializer
from onnx_fuse.passes.constant_folding import constant_tensor

#: ops a region value may be read by without being a leaf's reader (they read dims, not elements)
_DIM_READERS = ("Shape", "Size")
#: views followed anywhere; an Unsqueeze only before the first pick (after it: a repeat_kv's broadcast axis,
#: which the attention rules read on the picked [B, Hkv, S, D] value)
_VIEWS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze")
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def _widened(leaf: ir.Value, s: ColumnState) -> bool:
    """The piece is read by a Concat along its head axis (cols' last): part of a wider head (DeepSeek's k_nope
    joined to the rotated k_pe of another projection), not a whole q / k / v. A cache's Concat over the
    sequence axis is no such join."""
    if not s.cols.ndim:
        return False
    head = s.perm.index(s.lead + s.cols.ndim - 1)
    for use in leaf.uses():
        if is_default_op(use.node, "Concat"):
            axis = attr_value(use.node, "axis", None)
            if axis is None or int(axis) % s.rank == head:
                return True
    return False


def _cached(leaves: list[tuple[ir.Value, ColumnState]]) -> bool:
    """A piece is joined to a cache (a Concat over the sequence: one along the head axis is _widened's). The
    attention over a cache stays heads-first 4-D (Attention-23 / MultiHeadAttention with past), so pieces
    picked in column order from one shared view of the projection (GPT-BigCode's [B, 1, S, N]) are best left
    there: as separate projections each would need its own view (gpt_bigcode kv / optimum: +1 node)."""
    return any(is_default_op(u.node, "Concat") for v, _ in leaves for u in v.uses())


def _moved(before: list[int], after: list[int], s: ColumnState, lead: list) -> bool:
    """Going from axis order ``before`` to ``after`` (layout axes of ``s``: ``lead`` then ``s.cols``' axes) moves
    data: the axes of size other than 1 change their relative order. A Transpose that only moves size-1 axes
    is a Reshape."""
    def unit(a: int) -> bool:
        return lead[a] == (1, ()) if a < s.lead else s.cols.shape[a - s.lead] == 1

    return [a for a in before if not unit(a)] != [a for a in after if not unit(a)]


def _rejoined(leaves: list[ir.Value], depth: int = 64) -> bool:
    """Two leaves reach one Concat before any product: pieces of one tensor (a partial rotation's rotated and
    passed halves of each head, GPT-J / GLM / DeepSeek's q_nope | q_pe), not q / k / v. Followed forward
    through every reader up to ``depth`` nodes, stopping at products (MatMul, Gemm, Einsum) and ops outside
    the default domain, where q meets k."""
    reached: dict[int, int] = {}
    for i, leaf in enumerate(leaves):
        todo, seen = [leaf], set()
        while todo and len(seen) < depth:
            v = todo.pop(0)
            for use in v.uses():
                node = use.node
                if id(node) in seen or node.domain not in ("", "ai.onnx") \
                        or node.op_type in ("MatMul", "Gemm", "Einsum", "Shape", "Size"):
                    continue
                seen.add(id(node))
                if node.op_type == "Concat":
                    if reached.setdefault(id(node), i) != i:
                        return True
                todo.extend(node.outputs)
    return False


def _drop_dead(graph: ir.Graph, nodes: list) -> None:
    """Remove ``nodes`` where nothing reads them any more, and then the producers they were the last reader of:
    the replaced views, picks and projection. Left in place they would reach the rules and pack-matmul alive,
    which packed the old projection beside its pieces (its Split output then unread: the projection computed
    twice)."""
    todo = [n for n in nodes if n is not None]
    while todo:
        node = todo.pop()
        if node.graph is not graph or any(o.is_graph_output() or any(True for _ in o.uses()) for o in node.outputs):
            continue
        producers = [i.producer() for i in node.inputs if i is not None]
        graph.remove(node, safe=True)
        todo.extend(p for p in producers if p is not None)


class QkvColumnsPass(FusePass):
    """Interleaved q / k / v columns of one projection made contiguous, the picks one Split (module docstring)."""

    name = "qkv-columns"

    def __init__(self, as_matmuls: bool = False) -> None:
        """``as_matmuls``: the pieces as one MatMul (+ bias Add) each instead of one Split of the projection:
        the separate projections' form, which ORT's packed Attention fuses whole (the targets whose
        pack-matmul packs what the rules leave take it; docs/passes.md)."""
        super().__init__()
        self.as_matmuls = as_matmuls

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        if model.opset_imports.get("", 0) < 13:  # Split's sizes and Squeeze's axes as inputs
            return ir.passes.PassResult(model, modified=False)
        for graph in model.graphs():
            for node in list(graph):
                if is_default_op(node, "MatMul") and node.graph is graph:
                    try:
                        modified |= self._rewrite(graph, node)
                    except Refused:
                        pass
        return ir.passes.PassResult(model, modified=modified)

    # -- the projection ------------------------------------------------------------------------
    @staticmethod
    def _projection(mm: ir.Node):
        """(weight tensor, bias Add or None, bias tensor or None, Y) of a constant-weight MatMul."""
        if len(mm.inputs) != 2 or mm.inputs[0] is None:
            return None
        w = constant_tensor(mm.inputs[1])
        if w is None or len(w.shape) != 2 or w.dtype not in _FLOATS or not isinstance(w.shape[1], int):
            return None
        y = mm.outputs[0]
        n = int(w.shape[1])
        uses = list(y.uses())
        if len(uses) == 1 and not y.is_graph_output() and is_default_op(uses[0].node, "Add"):
            add = uses[0].node
            other = add.inputs[1 - uses[0].idx] if len(add.inputs) == 2 else None
            b = constant_tensor(other)
            if b is not None and b.dtype == w.dtype and len(b.shape) >= 1 and b.shape[-1] == n \
                    and all(d == 1 for d in b.shape[:-1]) and len(b.shape) <= (len(y.shape) if y.shape else 1):
                return w, add, b, add.outputs[0]
        return w, None, None, y

    def _rewrite(self, graph: ir.Graph, mm: ir.Node) -> bool:
        proj = self._projection(mm)
        if proj is None:
            return False
        w, add, b, y = proj
        n = int(w.shape[1])
        dims = value_dims(y)
        if dims is None or len(dims) < 2 or any(d is None for d in dims) or dims[-1] != (n, ()):
            return False
        lead = dims[:-1]
        leaves, flat, viewed, pickers, dim_read, moves = self._leaves(y, lead, n)
        if len(leaves) < 2 or _rejoined([v for v, _ in leaves]):
            return False
        heads = {s.cols.shape[-1] if s.cols.ndim else 1 for _, s in leaves}
        if len(heads) != 1 or any(_widened(v, s) for v, s in leaves):
            return False  # pieces of different head sizes, or one joined to more head dims: not q / k / v
        order = np.concatenate([s.cols.reshape(-1) for _, s in leaves])
        if len(order) != n or not np.array_equal(np.sort(order), np.arange(n)):
            return False  # a column read twice or never
        in_order = np.array_equal(order, np.arange(n))
        if in_order and flat and (pickers == 1 and not viewed or dim_read or _cached(leaves)):
            return False  # already one Split of the last axis, in order (the Llama form), or kept (_cached)
        if in_order and flat and sum(_moved(list(range(s.rank)), s.perm, s, lead) for _, s in leaves) > moves:
            return False  # each piece would need its own copy of a Transpose the region shares (Mamba's in_proj)
        self._apply(graph, mm, w, add, b, y, leaves, None if in_order else order, len(lead), dim_read)
        self.stats["projections"] += 1
        self.stats["picks"] += len(leaves)
        return True

    # -- following the readers -----------------------------------------------------------------
    def _leaves(self, y: ir.Value, lead: list, n: int) -> tuple[list[tuple[ir.Value, ColumnState]], bool, bool, int,
                                                                bool, int]:
        """(leaves, flat, viewed, pickers, dim_read, moves): the leaves reached from y, ordered by their first
        column, each with its state; flat: every first pick reads y's last axis (no head view before it, size-1
        axes aside); viewed: a first pick reads a view of y, not y (GPT-BigCode's Unsqueeze to [B, 1, S, N]);
        pickers: how many nodes make the first picks (one Split, or a Slice per piece); dim_read: a Shape / Size
        reads y or a view between it and the pieces; moves: the region's Transposes that move data
        (``_moved``). Raises Refused.

        Views (Reshape, Transpose, Squeeze, Unsqueeze) and picks (Gather, GatherND, Slice, Split) are
        followed up to the first pick on each path; after it only a single view reader is followed, so
        the leaves are the pieces the first picks make (q, k, v), not what the model does with them
        (a partial rotation's slices of q)."""
        leaves: list[tuple[ir.Value, ColumnState]] = []
        todo = [(y, ColumnState(np.arange(n), list(range(len(lead) + 1)), len(lead)), False)]
        seen: set[int] = set()
        flat, viewed, dim_read, pickers, moves = True, False, False, set(), 0
        while todo:
            v, s, picked = todo.pop(0)
            if id(v) in seen:
                raise Refused("a value reached twice")
            seen.add(id(v))
            readers = [u for u in v.uses() if not is_default_op(u.node, *_DIM_READERS)]
            children = None if v.is_graph_output() or not readers else []
            for use in readers:
                if children is None or (picked and (len(readers) > 1 or use.node.op_type not in _VIEWS[:3])):
                    children = None
                    break
                outs = self._follow(use.node, use.idx, s, lead) if use.node.graph is v.graph else None
                if outs is None:
                    children = None
                    break
                if not picked and use.node.op_type not in _VIEWS:
                    flat &= sum(d != 1 for d in s.cols.shape) <= 1  # else a pick on a head view (size-1 axes aside)
                    viewed |= v is not y
                    pickers.add(id(use.node))
                if use.node.op_type == "Transpose":
                    moves += _moved(s.perm, outs[0][1].perm, s, lead)
                children.extend((o, so, picked or use.node.op_type not in _VIEWS) for o, so in outs)
            if children is not None and any(is_default_op(u.node, *_DIM_READERS) for u in v.uses()):
                dim_read = True
            if children is None:
                if v is y:
                    raise Refused("the projection is read whole")
                leaves.append((v, s))
            else:
                todo.extend(children)
        leaves.sort(key=lambda vs: int(vs[1].cols.reshape(-1)[0]) if vs[1].cols.size else -1)
        return leaves, flat, viewed, len(pickers), dim_read, moves

    def _follow(self, node: ir.Node, idx: int, s: ColumnState, lead: list):
        """[(output, state)] for a view / pick node reading the region value as input 0, else None."""
        if idx != 0 or node.domain not in ("", "ai.onnx"):
            return None
        try:
            return step(node, s, lead)
        except Refused:
            return None

    # -- the rewrite ---------------------------------------------------------------------------
    def _apply(self, graph, mm, w, add, b, y, leaves, order, lead: int, dim_read: bool) -> None:
        taken = graph_names(graph)
        stem = y.name or mm.name or "qkv"
        widths = [int(s.cols.size) for _, s in leaves]
        w_arr = w.numpy() if order is None else w.numpy()[:, order]
        b_arr = None if b is None else (b.numpy() if order is None else b.numpy()[..., order])
        new_nodes: list[ir.Node] = []
        if self.as_matmuls and not dim_read:  # one projection per piece (a Shape read of y would keep y)
            parts, start = [], 0
            for i, width in enumerate(widths):
                wi = array_initializer(graph, f"{stem}_part{i}_w", w_arr[:, start:start + width], w.dtype, taken)
                part = self._node(new_nodes, "MatMul", [mm.inputs[0], wi], f"{stem}_part{i}", y, width, taken)
                if b_arr is not None:
                    bi = array_initializer(graph, f"{stem}_part{i}_b", b_arr[..., start:start + width], b.dtype, taken)
                    part = self._node(new_nodes, "Add", [part, bi], f"{stem}_part{i}_biased", y, width, taken)
                parts.append(part)
                start += width
            anchor = mm
        else:  # the permuted projection and one Split of its last axis
            if order is not None:  # None: the pieces' columns are in order already (Falcon's multi-query q | k | v)
                mm.replace_input_with(1, array_initializer(graph, f"{stem}_columns_w", w_arr, w.dtype, taken))
                if add is not None:
                    b_new = array_initializer(graph, f"{stem}_columns_b", b_arr, b.dtype, taken)
                    add.replace_input_with(1 if add.inputs[0] is mm.outputs[0] else 0, b_new)
            sizes = int64_initializer(graph, f"{stem}_columns_split", widths, taken)
            split = ir.node("Split", [y, sizes], attributes={"axis": -1}, num_outputs=len(leaves))
            new_nodes.append(split)
            parts = list(split.outputs)
            for i, o in enumerate(parts):
                o.name, o.type = fresh_name(f"{stem}_part{i}", taken), y.type
                o.shape = None if y.shape is None else ir.Shape([*y.shape.dims[:-1], widths[i]])
            anchor = y.producer()
        for i, (v, (leaf, s)) in enumerate(zip(parts, leaves)):
            if s.cols.ndim != 1:
                target = int64_initializer(graph, f"{stem}_part{i}_view", [0] * lead + list(s.cols.shape), taken)
                v = self._node(new_nodes, "Reshape", [v, target], f"{stem}_part{i}_heads", y, None, taken)
                if y.shape is not None:
                    v.shape = ir.Shape([*y.shape.dims[:-1], *s.cols.shape])
            if s.perm != list(range(len(s.perm))):
                t = ir.node("Transpose", [v], attributes={"perm": s.perm})
                t.outputs[0].name = fresh_name(f"{stem}_part{i}_t", taken)
                t.outputs[0].type, t.outputs[0].shape = y.type, leaf.shape
                new_nodes.append(t)
                v = t.outputs[0]
            elif v.shape is not None and leaf.shape is not None:
                v.shape = leaf.shape
            reroute(leaf, v)
        graph.insert_after(anchor, new_nodes)
        _drop_dead(graph, [leaf.producer() for leaf, _ in leaves] + [mm])

    @staticmethod
    def _node(nodes: list, op: str, inputs: list, name: str, y: ir.Value, width: int | None, taken: set) -> ir.Value:
        """A new node's one output, typed like y (width: its last dim, the rest y's)."""
        node = ir.node(op, inputs)
        out = node.outputs[0]
        out.name, out.type = fresh_name(name, taken), y.type
        if width is not None and y.shape is not None:
            out.shape = ir.Shape([*y.shape.dims[:-1], width])
        nodes.append(node)
        return out
