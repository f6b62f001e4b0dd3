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
product.

Refused: a projection output read whole (or by a pick the pass cannot follow) beside the picks, a
column read twice or never, non-constant indices, picks on the lead axes, a Reshape that merges a
lead axis, non-float weights. Decided by the index arithmetic only, not by which ops wrote it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import dim_text, reshape_out_dims, value_dims
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import array_initializer, fresh_name, graph_names, int64_initializer
from onnx_fuse.passes._transpose_region import perm_of
from onnx_fuse.passes.constant_folding import constant_tensor

#: ops a region value may be read by without being a leaf's reader (they read dims, not elements)
_DIM_READERS = ("Shape", "Size")
#: views followed anywhere; an Unsqueeze only before the first pick (after it: a repeat_kv's broadcast axis,
#: which the attention rules read on the picked [B, Hkv, S, D] value)
_VIEWS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze")
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


class _Refused(Exception):
    """The region is not a set of column picks (the pass leaves the projection alone)."""


def _ints(value: ir.Value | None) -> list[int] | None:
    t = constant_tensor(value)
    if t is None or not t.dtype.is_integer():
        return None
    return [int(x) for x in t.numpy().reshape(-1)]


def _slice_range(start: int, end: int, step: int, d: int) -> list[int]:
    """ONNX Slice's indices on an axis of length d (its clamping, not Python's)."""
    start, end = start + d if start < 0 else start, end + d if end < 0 else end
    if step > 0:
        return list(range(min(max(start, 0), d), min(max(end, 0), d), step))
    return list(range(min(max(start, 0), d - 1), min(max(end, -1), d - 1), step))


def _widened(leaf: ir.Value, s: _State) -> bool:
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


class _State:
    """A region value as Transpose(Reshape(Y[..., cols], lead + cols.shape), perm)."""

    def __init__(self, cols: np.ndarray, perm: list[int], lead: int) -> None:
        self.cols, self.perm, self.lead = cols, perm, lead

    @property
    def rank(self) -> int:
        return len(self.perm)

    def trailing(self, axis: int, rank: int) -> int:
        """The cols axis behind the value's ``axis`` (normalized); refuses the lead axes."""
        if not -rank <= axis < rank or rank != self.rank:
            raise _Refused("axis out of range")
        pa = self.perm[axis % rank]
        if pa < self.lead:
            raise _Refused("a pick on a lead axis")
        return pa - self.lead

    def take(self, axis: int, index, keep: bool) -> _State:
        """Entries ``index`` (a list, or an int when not ``keep``) of the value's ``axis``."""
        t = self.trailing(axis, self.rank)
        pa = t + self.lead
        cols = np.take(self.cols, index, axis=t)
        if keep:
            return _State(cols, list(self.perm), self.lead)
        perm = [x - (x > pa) for j, x in enumerate(self.perm) if j != axis % self.rank]
        return _State(cols, perm, self.lead)


class QkvColumnsPass(FusePass):
    """Interleaved q / k / v columns of one projection made contiguous, the picks one Split (module docstring)."""

    name = "qkv-columns"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        if model.opset_imports.get("", 0) < 13:  # Split's sizes and Squeeze's axes as inputs
            return ir.passes.PassResult(model, modified=False)
        for graph in model.graphs():
            for node in list(graph):
                if is_default_op(node, "MatMul") and node.graph is graph:
                    try:
                        modified |= self._rewrite(graph, node)
                    except _Refused:
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
        leaves = self._leaves(y, lead, n)
        if len(leaves) < 2 or _rejoined([v for v, _ in leaves]):
            return False
        heads = {s.cols.shape[-1] if s.cols.ndim else 1 for _, s in leaves}
        if len(heads) != 1 or any(_widened(v, s) for v, s in leaves):
            return False  # pieces of different head sizes, or one joined to more head dims: not q / k / v
        order = np.concatenate([s.cols.reshape(-1) for _, s in leaves])
        if len(order) != n or not np.array_equal(np.sort(order), np.arange(n)):
            return False  # a column read twice or never
        in_order = np.array_equal(order, np.arange(n))
        if in_order and self._flat:
            return False  # already pieces of the last axis, in order (a Split, Slices of it)
        self._apply(graph, mm, w, add, b, y, leaves, None if in_order else order, len(lead))
        self.stats["projections"] += 1
        self.stats["picks"] += len(leaves)
        return True

    # -- following the readers -----------------------------------------------------------------
    def _leaves(self, y: ir.Value, lead: list, n: int) -> list[tuple[ir.Value, _State]]:
        """The leaves reached from y, ordered by their first column, each with its state; raises _Refused.

        Views (Reshape, Transpose, Squeeze, Unsqueeze) and picks (Gather, GatherND, Slice, Split) are
        followed up to the first pick on each path; after it only a single view reader is followed, so
        the leaves are the pieces the first picks make (q, k, v), not what the model does with them
        (a partial rotation's slices of q)."""
        leaves: list[tuple[ir.Value, _State]] = []
        todo = [(y, _State(np.arange(n), list(range(len(lead) + 1)), len(lead)), False)]
        seen: set[int] = set()
        self._flat = True   # every first pick reads y's last axis itself (no view before it)
        while todo:
            v, s, picked = todo.pop(0)
            if id(v) in seen:
                raise _Refused("a value reached twice")
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
                if not picked and use.node.op_type not in _VIEWS and sum(d != 1 for d in s.cols.shape) > 1:
                    self._flat = False  # a pick on a head view, not on Y's last axis (size-1 axes aside)
                children.extend((o, so, picked or use.node.op_type not in _VIEWS) for o, so in outs)
            if children is None:
                if v is y:
                    raise _Refused("the projection is read whole")
                leaves.append((v, s))
            else:
                todo.extend(children)
        leaves.sort(key=lambda vs: int(vs[1].cols.reshape(-1)[0]) if vs[1].cols.size else -1)
        return leaves

    def _follow(self, node: ir.Node, idx: int, s: _State, lead: list):
        """[(output, state)] for a view / pick node reading the region value as input 0, else None."""
        if idx != 0 or node.domain not in ("", "ai.onnx"):
            return None
        try:
            return self._step(node, s, lead)
        except _Refused:
            return None

    def _step(self, node: ir.Node, s: _State, lead: list):
        op, ins, outs = node.op_type, list(node.inputs), list(node.outputs)
        r = s.rank
        if op == "Transpose":
            p = perm_of(node)
            if p is None or sorted(p) != list(range(r)):
                return None
            return [(outs[0], _State(s.cols, [s.perm[j] for j in p], s.lead))]
        if op == "Reshape":
            if s.perm != list(range(r)) or len(ins) < 2:
                return None
            got = reshape_out_dims(outs[0], in_dims=[dim_text(d) for d in lead] + list(s.cols.shape))
            if got is None or len(got) < len(lead) or got[:len(lead)] != lead:
                return None
            tail = got[len(lead):]
            if any(a for _, a in tail) or int(np.prod([c for c, _ in tail])) != s.cols.size:
                return None
            shape = [c for c, _ in tail]
            return [(outs[0], _State(s.cols.reshape(shape), list(range(len(lead) + len(shape))), s.lead))]
        if op == "Gather":
            index = constant_tensor(ins[1]) if len(ins) == 2 else None
            if index is None or not index.dtype.is_integer() or len(index.shape) > 1:
                return None
            axis = int(attr_value(node, "axis", 0))
            d = s.cols.shape[s.trailing(axis, r)]
            ix = index.numpy().astype(np.int64)
            if ((ix < -d) | (ix >= d)).any():
                return None
            ix = ix % d
            return [(outs[0], s.take(axis, int(ix) if ix.ndim == 0 else list(ix), keep=ix.ndim == 1))]
        if op == "GatherND":
            index = constant_tensor(ins[1]) if len(ins) == 2 else None
            if index is None or attr_value(node, "batch_dims", 0) != 0 or len(index.shape) not in (1, 2) \
                    or index.shape[-1] != 1:
                return None
            ix = index.numpy().astype(np.int64)[..., 0]   # = Gather over axis 0 by these
            d = s.cols.shape[s.trailing(0, r)]
            if ((ix < -d) | (ix >= d)).any():
                return None
            ix = ix % d
            return [(outs[0], s.take(0, int(ix) if ix.ndim == 0 else list(ix), keep=ix.ndim == 1))]
        if op == "Slice":
            starts, ends = (_ints(ins[k]) if len(ins) > k else None for k in (1, 2))
            axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else None
            steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else None
            if starts is None or ends is None or len(starts) != len(ends) \
                    or (len(ins) > 3 and ins[3] is not None and axes is None) \
                    or (len(ins) > 4 and ins[4] is not None and steps is None):
                return None
            axes = list(range(len(starts))) if axes is None else axes
            steps = [1] * len(starts) if steps is None else steps
            if len(axes) != len(starts) or len(steps) != len(starts) or 0 in steps:
                return None
            out = s
            for a, b0, e0, st in zip(axes, starts, ends, steps):
                d = out.cols.shape[out.trailing(a, r)]
                out = out.take(a, _slice_range(b0, e0, st, d), keep=True)
            return [(outs[0], out)]
        if op == "Split":
            axis = int(attr_value(node, "axis", 0))
            d = s.cols.shape[s.trailing(axis, r)]
            if len(ins) > 1 and ins[1] is not None:
                sizes = _ints(ins[1])
            elif node.attributes.get("split") is not None:
                sizes = [int(x) for x in node.attributes["split"].value]
            else:
                k = int(attr_value(node, "num_outputs", len(outs)))
                if k != len(outs) or k < 1:
                    return None
                part = -(-d // k)
                sizes = [min(part, d - i * part) for i in range(k)]
            if sizes is None or len(sizes) != len(outs) or sum(sizes) != d or min(sizes) < 0:
                return None
            res, start = [], 0
            for o, size in zip(outs, sizes):
                res.append((o, s.take(axis, list(range(start, start + size)), keep=True)))
                start += size
            return res
        if op in ("Squeeze", "Unsqueeze"):
            axes = _ints(ins[1]) if len(ins) > 1 and ins[1] is not None else None
            if axes is None and node.attributes.get("axes") is not None:
                axes = [int(x) for x in node.attributes["axes"].value]
            if axes is None:
                return None
            if op == "Squeeze":
                out = s
                for a in sorted({a % r for a in axes if -r <= a < r}, reverse=True):
                    if out.cols.shape[out.trailing(a, out.rank)] != 1:
                        return None
                    out = out.take(a, 0, keep=False)
                return None if len(set(a % r for a in axes)) != len(axes) else [(outs[0], out)]
            r2 = r + len(axes)
            if any(not -r2 <= a < r2 for a in axes) or len({a % r2 for a in axes}) != len(axes):
                return None
            new = {a % r2 for a in axes}
            cols, perm, rest = s.cols, [], iter(s.perm)
            for j in range(r2):
                if j in new:
                    cols = cols[..., None]
                    perm.append(s.lead + cols.ndim - 1)
                else:
                    perm.append(next(rest))
            return [(outs[0], _State(cols, perm, s.lead))]
        return None

    # -- the rewrite ---------------------------------------------------------------------------
    def _apply(self, graph, mm, w, add, b, y, leaves, order, lead: int) -> None:
        taken = graph_names(graph)
        stem = y.name or mm.name or "qkv"
        if order is not None:  # None: the leaves' columns are in order already (Falcon's multi-query q | k | v)
            w_new = array_initializer(graph, f"{stem}_columns_w", w.numpy()[:, order], w.dtype, taken)
            mm.replace_input_with(1, w_new)
        if add is not None and order is not None:
            b_arr = b.numpy()
            b_new = array_initializer(graph, f"{stem}_columns_b", b_arr[..., order], b.dtype, taken)
            add.replace_input_with(1 if add.inputs[0] is mm.outputs[0] else 0, b_new)
        widths = [int(s.cols.size) for _, s in leaves]
        sizes = int64_initializer(graph, f"{stem}_columns_split", widths, taken)
        split = ir.node("Split", [y, sizes], attributes={"axis": -1}, num_outputs=len(leaves))
        new_nodes = [split]
        for i, (o, (leaf, s)) in enumerate(zip(split.outputs, leaves)):
            o.name = fresh_name(f"{stem}_part{i}", taken)
            o.type = y.type
            o.shape = None if y.shape is None else ir.Shape([*y.shape.dims[:-1], widths[i]])
            v = o
            if s.cols.ndim != 1:
                target = int64_initializer(graph, f"{stem}_part{i}_view", [0] * lead + list(s.cols.shape), taken)
                view = ir.node("Reshape", [v, target])
                view.outputs[0].name = fresh_name(f"{stem}_part{i}_heads", taken)
                view.outputs[0].type = y.type
                if y.shape is not None:
                    view.outputs[0].shape = ir.Shape([*y.shape.dims[:-1], *s.cols.shape])
                new_nodes.append(view)
                v = view.outputs[0]
            if s.perm != list(range(len(s.perm))):
                t = ir.node("Transpose", [v], attributes={"perm": s.perm})
                t.outputs[0].name = fresh_name(f"{stem}_part{i}_t", taken)
                t.outputs[0].type, t.outputs[0].shape = y.type, leaf.shape
                new_nodes.append(t)
                v = t.outputs[0]
            elif v.shape is not None and leaf.shape is not None:
                v.shape = leaf.shape
            reroute(leaf, v)
        graph.insert_after(y.producer(), new_nodes)
