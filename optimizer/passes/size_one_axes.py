"""Size-1 axes around batched MatMuls: the Unsqueezes and Squeezes an Einsum's decomposition leaves.

tf2onnx (its Einsum optimizer; Keras' MultiHeadAttention computes its scores and output with einsum)
writes each einsum as rank-5 views: q [B,S,N,H] -> Unsqueeze(axis 3) -> Transpose -> Reshape
[B*N, S, H], the product viewed back as Reshape [B, N, S, T, 1] -> Squeeze(axis 4). Between them sit
the [B*N, S, H] views the batched-heads attention rules read (rules/attention/batched_heads.yaml;
torch.bmm's exports), hidden by the size-1 axis. Rewrites, each exact:
- ``transpose-unsqueeze``: Transpose(Unsqueeze(x, U), p) is Unsqueeze(Transpose(x, q), J): the
  size-1 axes move to where p puts them, q permutes x's own axes in p's order (no Transpose where q keeps
  them). Only where that saves a node: q keeps x's order, or the Transpose's readers are Reshapes that then
  read x's elements (reshape-unsqueeze; Shapes besides). Elsewhere it saves none, and a 4-D K^T
  Transpose(Unsqueeze(k)) the attention rules read would become Unsqueeze(Transpose(k)).
- ``unsqueeze-transpose``: the converse, Unsqueeze(Transpose(x, q), J) is Transpose(Unsqueeze(x, J), p), where every
  reader of it is a MatMul (and the Transpose has no other reader): one-head K^T written Unsqueeze(Transpose(k3,
  [0, 2, 1]), [1]) becomes the Transpose(Unsqueeze(k3), [0, 1, 3, 2]) the attention rules read. Node count equal;
  disjoint from transpose-unsqueeze (that one needs Reshape readers), so the two never undo each other.
- ``reshape-unsqueeze``: Reshape(Unsqueeze(x) or Squeeze(x), t) reads x: a Reshape of the same
  elements in the same order. Only where t's constant entries hold no 0 (a 0 copies the input's dim
  at its index, which the size-1 axis shifts) and allowzero is 0; t's computed entries (products of
  dims read from shapes) are sizes, 0 only for an empty tensor.
- ``squeeze-reshape``: Squeeze(Reshape(x, t), A) is Reshape(x, t without the entries at A) where
  those entries are constant 1s (t constant, or a Concat of pieces whose lengths are known) and no
  constant 0 entry follows them.
- ``max-same``: Max(a, a), Min(a, a) are a (tf2onnx's broadcast of two equal batch shapes, once
  CSE made them one value).
- ``scale-before-view``: Mul(Reshape(MatMul(a, b), t), c) for one constant number c is
  Reshape(Mul(MatMul(a, b), c), t): the same products scaled (Keras scales the einsum's scores after
  their [B, N, S, T] view; the batched-heads rules take the scale on the [B*N, S, T] product).
- ``shape-of-view``: Shape(Reshape(MatMul(..) (* c), t)) is t where t has no constant 0 or -1 entry (its
  computed entries are sizes read from shapes): Keras' ones_like(scores) reads the scores' shape,
  which kept the view an intermediate read outside the attention.
- ``transpose-batch-merge``: Transpose(Reshape(y, t), [0, 2, 1]) where the Reshape provably views
  y [d0, d1, d2, d3] as [d0*d1, d2, d3] and y = Transpose(x, p) moved x's last axis to y's third,
  is Reshape(Transpose(x, p with its last two entries swapped), t with its last two entries
  swapped): v's merged-heads view [B*N, S, H], as the batched-heads rules read v (tf2onnx wrote
  v [B, S, N, H] -> [B, N, H, S] -> [B*N, H, S] -> [B*N, S, H]).
Every rewritten node keeps its output value's readers; a value read elsewhere keeps its old node.
Runs at O3 before the attention rules (levels.py: attention-prepare).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import raw_axes
from onnx_fuse.passes._dim_products import mul, reshape_out_dims, value_dims
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes.constant_folding import constant_tensor
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass


def _ints(value: ir.Value | None) -> list[int] | None:
    t = constant_tensor(value)
    if t is None:
        return None
    a = t.numpy()
    return [int(v) for v in a.reshape(-1)] if a.dtype.kind in "iu" and a.ndim <= 1 else None


def _rank(value: ir.Value | None) -> int | None:
    return None if value is None or value.shape is None else len(value.shape)


class SizeOneAxesPass(FusePass):
    """Unsqueeze / Squeeze of size-1 axes moved past Transposes and into Reshapes (module docstring)."""

    name = "size-one-axes"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        self._taken = {v.name for g in model.graphs() for n in g for v in (*n.inputs, *n.outputs) if v is not None}
        self._taken |= {v.name for g in model.graphs() for v in (*g.inputs, *g.initializers.values())}
        for _ in range(8):   # a rewrite can expose the next one upstream (a few rounds at most)
            changed = self._round(model)
            modified |= changed
            if not changed:
                break
        if modified:   # the views left unread would count as readers of the attention's intermediates
            DeadCodeEliminationPass()(model)
        return ir.passes.PassResult(model, modified=modified)

    def _round(self, model: ir.Model) -> bool:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is None:
                    continue
                if is_default_op(node, "Transpose"):
                    modified |= self._transpose_unsqueeze(graph, node) or self._transpose_batch_merge(graph, node)
                elif is_default_op(node, "Reshape"):
                    modified |= self._reshape_unsqueeze(node)
                elif is_default_op(node, "Unsqueeze"):
                    modified |= self._unsqueeze_transpose(graph, node)
                elif is_default_op(node, "Squeeze"):
                    modified |= self._squeeze_reshape(graph, node)
                elif is_default_op(node, "Shape"):
                    modified |= self._shape_of_view(graph, node)
                elif is_default_op(node, "Mul"):
                    modified |= self._scale_before_view(graph, node)
                elif is_default_op(node, "Max", "Min") and len(node.inputs) == 2 and node.inputs[0] is not None \
                        and node.inputs[0] is node.inputs[1]:
                    reroute(node.outputs[0], node.inputs[0])
                    graph.remove(node, safe=True)
                    self.stats["max-same"] += 1
                    modified = True
        return modified

    def _fresh(self, base: str) -> str:
        """A value / node name no value of the model has (nodes here are named like their output)."""
        name, k = base, 0
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._taken.add(name)
        return name

    def _new_const(self, graph: ir.Graph, base: str, values: list[int]) -> ir.Value:
        v = ir.Value(name=self._fresh(base), const_value=ir.tensor(np.array(values, np.int64)))
        graph.register_initializer(v)
        return v

    def _transpose_unsqueeze(self, graph: ir.Graph, node: ir.Node) -> bool:
        src = node.inputs[0]
        unsq = None if src is None else src.producer()
        if not is_default_op(unsq, "Unsqueeze") or unsq.graph is not graph:
            return False
        x, axes = unsq.inputs[0], raw_axes(unsq)
        perm = attr_value(node, "perm", None)
        rank = _rank(x)
        if x is None or axes is None or perm is None or rank is None:
            return False
        out_rank = rank + len(axes)
        ones = sorted(a % out_rank for a in axes)
        perm = list(perm)
        if len(set(ones)) != len(ones) or sorted(perm) != list(range(out_rank)):
            return False
        own = [p for p in perm if p not in ones]                  # x's axes in the output's order
        q = [p - sum(1 for u in ones if u < p) for p in own]
        where = [i for i, p in enumerate(perm) if p in ones]      # the size-1 axes' new places
        # only where it saves a node: the Transpose moved only size-1 axes (q keeps x's order: no Transpose left;
        # Range(S) -> [1, S] -> [S, 1], ModernBERT's distances), or its readers are Reshapes that then drop the
        # Unsqueeze (reshape-unsqueeze; Shapes besides). Elsewhere it would hide the 4-D form the attention rules
        # read (one-head q / k / v [B, S, D] unsqueezed at the heads axis: Unsqueeze(Transpose(k)) is no K^T)
        readers = [n for n, _ in node.outputs[0].uses()]
        moved = q != list(range(rank))
        if moved and (node.outputs[0].is_graph_output() or not any(is_default_op(n, "Reshape") for n in readers)
                      or not all(is_default_op(n, "Shape") or self._drops_view(n, node.outputs[0]) for n in readers)):
            return False
        stem = node.name or "transpose"
        t_out = ir.Value(name=self._fresh(f"{stem}_moved"), type=x.type,
                         shape=None if x.shape is None else ir.Shape([x.shape[i] for i in q])) if moved else x
        t_node = [ir.Node("", "Transpose", [x], attributes=[ir.AttrInt64s("perm", q)], outputs=[t_out],
                          name=self._fresh(f"{stem}_moved"))] if moved else []
        u_out = ir.Value(name=self._fresh(f"{stem}_unsqueezed"), type=node.outputs[0].type, shape=node.outputs[0].shape)
        u_node = ir.Node("", "Unsqueeze", [t_out, self._new_const(graph, f"{stem}_axes", where)], outputs=[u_out],
                         name=self._fresh(f"{stem}_unsqueezed"))
        graph.insert_before(node, [*t_node, u_node])
        reroute(node.outputs[0], u_out)
        graph.remove(node, safe=True)
        self.stats["transpose-unsqueeze"] += 1
        return True

    def _unsqueeze_transpose(self, graph: ir.Graph, node: ir.Node) -> bool:
        src = node.inputs[0]
        tr = None if src is None else src.producer()
        if not is_default_op(tr, "Transpose") or tr.graph is not graph or src.is_graph_output() \
                or len(list(src.uses())) != 1:
            return False
        out = node.outputs[0]
        readers = [n for n, _ in out.uses()]
        if out.is_graph_output() or not readers or not all(is_default_op(n, "MatMul") for n in readers):
            return False
        x, axes, q, rank = tr.inputs[0], raw_axes(node), attr_value(tr, "perm", None), _rank(tr.inputs[0])
        if x is None or axes is None or q is None or rank is None or sorted(q) != list(range(rank)):
            return False
        q = list(q)
        # a Transpose under the moved one is composed into it (Transpose(Transpose(y, p), q) = Transpose(y, p[q])):
        # moved alone it would sit behind the Unsqueeze, where transpose-pair can no longer merge the two
        # (glm5_next_text's K^T, hold-out 48)
        inner = x.producer()
        while is_default_op(inner, "Transpose") and inner.graph is graph and inner.inputs[0] is not None:
            p = attr_value(inner, "perm", None)
            if p is None or sorted(p) != list(range(rank)):
                break
            x, q = inner.inputs[0], [list(p)[i] for i in q]
            inner = x.producer()
        out_rank = rank + len(axes)
        ones = sorted(a % out_rank for a in axes)
        if len(set(ones)) != len(ones):
            return False
        own = [i for i in range(out_rank) if i not in ones]       # where Unsqueeze(x, J) puts x's axes
        it = iter(list(q))
        perm = [i if i in ones else own[next(it)] for i in range(out_rank)]
        stem = node.name or "unsqueeze"
        u_out = ir.Value(name=self._fresh(f"{stem}_first"), type=x.type,
                         shape=None if x.shape is None else
                         ir.Shape([1 if i in ones else x.shape[own.index(i)] for i in range(out_rank)]))
        t_out = ir.Value(name=self._fresh(f"{stem}_moved"), type=out.type, shape=out.shape)
        graph.insert_before(node, [ir.Node("", "Unsqueeze", [x, self._new_const(graph, f"{stem}_axes", ones)],
                                           outputs=[u_out], name=self._fresh(f"{stem}_first")),
                                   ir.Node("", "Transpose", [u_out], attributes=[ir.AttrInt64s("perm", perm)],
                                           outputs=[t_out], name=self._fresh(f"{stem}_moved"))])
        reroute(out, t_out)
        graph.remove(node, safe=True)
        graph.remove(tr, safe=True)
        self.stats["unsqueeze-transpose"] += 1
        return True

    def _drops_view(self, node: ir.Node, value: ir.Value) -> bool:
        """Whether ``node`` is a Reshape of ``value`` that reads through an Unsqueeze / Squeeze before it: a target
        with no constant 0 entry (which copies the input's dim at its index) and allowzero 0."""
        return is_default_op(node, "Reshape") and len(node.inputs) >= 2 and node.inputs[0] is value \
            and attr_value(node, "allowzero", 0) == 0 \
            and not self._has_zero_entry(node.inputs[1], 0)

    def _reshape_unsqueeze(self, node: ir.Node) -> bool:
        src = node.inputs[0]
        prod = None if src is None else src.producer()
        if not is_default_op(prod, "Unsqueeze", "Squeeze") or prod.inputs[0] is None or not self._drops_view(node, src):
            return False
        node.replace_input_with(0, prod.inputs[0])
        self.stats["reshape-unsqueeze"] += 1
        return True

    @staticmethod
    def _pieces(target: ir.Value) -> list[tuple[ir.Value, int, list[int] | None]] | None:
        """A Reshape target as (value, length, constant entries or None) pieces: itself when constant,
        a Concat's inputs when each has a known length; None otherwise."""
        const = _ints(target)
        if const is not None:
            return [(target, len(const), const)]
        cat = target.producer()
        if not is_default_op(cat, "Concat") or attr_value(cat, "axis", 0) not in (0, -1):
            return None
        pieces = []
        for v in cat.inputs:
            c = _ints(v)
            if c is not None:
                pieces.append((v, len(c), c))
            elif v is not None and v.shape is not None and len(v.shape) == 1 and isinstance(v.shape[0], int):
                pieces.append((v, v.shape[0], None))
            else:
                return None
        return pieces

    def _has_zero_entry(self, target: ir.Value | None, start: int) -> bool:
        """Whether a constant entry of the target at position >= start is 0 (True when unreadable)."""
        pieces = None if target is None else self._pieces(target)
        if pieces is None:
            return True
        pos = 0
        for _, n, const in pieces:
            if const is not None and any(c == 0 for i, c in enumerate(const) if pos + i >= start):
                return True
            pos += n
        return False

    def _squeeze_reshape(self, graph: ir.Graph, node: ir.Node) -> bool:
        src = node.inputs[0]
        resh = None if src is None else src.producer()
        if not is_default_op(resh, "Reshape") or len(resh.inputs) < 2 or resh.inputs[1] is None:
            return False
        axes, rank = raw_axes(node), _rank(src)
        pieces = self._pieces(resh.inputs[1])
        if axes is None or rank is None or pieces is None or sum(n for _, n, _ in pieces) != rank:
            return False
        drop = sorted({a % rank for a in axes})
        if not drop or attr_value(resh, "allowzero", 0) != 0 or self._has_zero_entry(resh.inputs[1], drop[0]):
            return False
        plan, pos = [], 0   # each piece kept (a value) or its constant entries left (a list)
        for v, n, const in pieces:
            mine = [i - pos for i in drop if pos <= i < pos + n]
            if mine:
                if const is None or any(const[i] != 1 for i in mine):
                    return False                                  # only constant 1 entries go
                kept = [c for i, c in enumerate(const) if i not in mine]
                if kept:
                    plan.append(kept)
            else:
                plan.append(v)
            pos += n
        # constants made only now that nothing refuses (a refusal leaves the graph as it was)
        new_inputs = [self._new_const(graph, f"{node.name or 'squeeze'}_target", v) if isinstance(v, list) else v
                      for v in plan]
        stem = node.name or "squeeze"
        if len(new_inputs) == 1 and _ints(new_inputs[0]) is not None:
            target = new_inputs[0]
            extra = []
        else:
            target = ir.Value(name=self._fresh(f"{stem}_target"))
            extra = [ir.Node("", "Concat", new_inputs, attributes=[ir.AttrInt64("axis", 0)], outputs=[target],
                             name=self._fresh(f"{stem}_target"))]
        out = ir.Value(name=self._fresh(f"{stem}_reshaped"), type=node.outputs[0].type, shape=node.outputs[0].shape)
        graph.insert_before(node, [*extra, ir.Node("", "Reshape", [resh.inputs[0], target], outputs=[out],
                                                   name=self._fresh(f"{stem}_reshaped"))])
        reroute(node.outputs[0], out)
        graph.remove(node, safe=True)
        self.stats["squeeze-reshape"] += 1
        return True

    def _transpose_batch_merge(self, graph: ir.Graph, node: ir.Node) -> bool:
        src = node.inputs[0]
        resh = None if src is None else src.producer()
        if list(attr_value(node, "perm", None) or []) != [0, 2, 1] or not is_default_op(resh, "Reshape") \
                or resh.graph is not graph or len(resh.inputs) < 2 or attr_value(resh, "allowzero", 0) != 0:
            return False
        y, target = resh.inputs
        dims, out = value_dims(y), reshape_out_dims(src)
        if dims is None or out is None or len(dims) != 4 or len(out) != 3 or any(d is None for d in dims) \
                or out[1] is None and out[2] is None:
            return False
        if out[0] != mul(dims[0], dims[1]) or out[2] not in (None, dims[3]) or out[1] not in (None, dims[2]):
            return False
        pieces = self._pieces(target)
        if pieces is None or [n for _, n, _ in pieces] not in ([3], [1, 1, 1]) or self._has_zero_entry(target, 1):
            return False
        # only into a Transpose of y that moved the last axis, which then keeps it: v [B, S, N, H]
        # seen as [B, N, H, S] becomes the head split [B, N, S, H] (K^T's view stays as it is)
        prod = y.producer()
        first = list(attr_value(prod, "perm", None) or []) if is_default_op(prod, "Transpose") else []
        if prod is None or prod.graph is not graph or len(first) != 4 or first[3] == 3 or first[2] != 3:
            return False
        # every check before the first new node: an ir.Node made and then dropped still counts
        # as a reader of its inputs (the target's Shape pieces), which kept a Shape of GPT-2's
        # present.N.key alive and its paging refused
        stem = node.name or "transpose"
        if len(pieces) == 1:
            c = pieces[0][2]
            new_target = self._new_const(graph, f"{stem}_target", [c[0], c[2], c[1]])
            extra = []
        else:
            new_target = ir.Value(name=self._fresh(f"{stem}_target"))
            extra = [ir.Node("", "Concat", [pieces[0][0], pieces[2][0], pieces[1][0]],
                             attributes=[ir.AttrInt64("axis", 0)], outputs=[new_target],
                             name=self._fresh(f"{stem}_target"))]
        perm, base = [first[p] for p in (0, 1, 3, 2)], prod.inputs[0]
        t_out = ir.Value(name=self._fresh(f"{stem}_swapped"), type=y.type,
                         shape=None if base.shape is None else ir.Shape([base.shape[p] for p in perm]))
        r_out = ir.Value(name=self._fresh(f"{stem}_merged"), type=node.outputs[0].type, shape=node.outputs[0].shape)
        graph.insert_before(node, [*extra,
                                   ir.Node("", "Transpose", [base], attributes=[ir.AttrInt64s("perm", perm)],
                                           outputs=[t_out], name=self._fresh(f"{stem}_swapped")),
                                   ir.Node("", "Reshape", [t_out, new_target], outputs=[r_out],
                                           name=self._fresh(f"{stem}_merged"))])
        reroute(node.outputs[0], r_out)
        graph.remove(node, safe=True)
        self.stats["transpose-batch-merge"] += 1
        return True

    def _scale_before_view(self, graph: ir.Graph, node: ir.Node) -> bool:
        if len(node.inputs) != 2:
            return False
        for i in (0, 1):
            view, c = node.inputs[i], node.inputs[1 - i]
            resh = None if view is None else view.producer()
            t = constant_tensor(c)
            if not is_default_op(resh, "Reshape") or resh.graph is not graph or t is None or t.size != 1 \
                    or len(t.shape) > 1 or len(list(view.uses())) != 1 or view.is_graph_output():
                continue
            mm = resh.inputs[0].producer() if resh.inputs[0] is not None else None
            if not is_default_op(mm, "MatMul") or c.dtype != resh.inputs[0].dtype:
                continue
            x = resh.inputs[0]
            stem = node.name or "scale"
            scaled = ir.Value(name=self._fresh(f"{stem}_scaled"), type=x.type, shape=x.shape)
            out = ir.Value(name=self._fresh(f"{stem}_view"), type=node.outputs[0].type, shape=node.outputs[0].shape)
            graph.insert_before(node, [ir.Node("", "Mul", [x, c], outputs=[scaled], name=self._fresh(f"{stem}_scaled")),
                                       ir.Node("", "Reshape", [scaled, resh.inputs[1]], outputs=[out],
                                               attributes=list(resh.attributes.values()),
                                               name=self._fresh(f"{stem}_view"))])
            reroute(node.outputs[0], out)
            graph.remove(node, safe=True)
            self.stats["scale-before-view"] += 1
            return True
        return False

    def _shape_of_view(self, graph: ir.Graph, node: ir.Node) -> bool:
        v = node.inputs[0] if node.inputs else None
        resh = None if v is None else v.producer()
        if not is_default_op(resh, "Reshape") or len(resh.inputs) < 2 or resh.inputs[1] is None \
                or node.attributes.get("start") is not None or node.attributes.get("end") is not None:
            return False
        src = resh.inputs[0].producer() if resh.inputs[0] is not None else None
        if is_default_op(src, "Mul") and any(constant_tensor(i) is not None for i in src.inputs):
            src = next((i.producer() for i in src.inputs if i is not None and constant_tensor(i) is None), None)
        if not is_default_op(src, "MatMul"):   # a (scaled) product's view, the scores Keras' ones_like reads
            return False
        target = resh.inputs[1]
        pieces = self._pieces(target)
        if pieces is None or self._has_zero_entry(target, 0) or any(c is not None and -1 in c for _, _, c in pieces):
            return False
        reroute(node.outputs[0], target)
        graph.remove(node, safe=True)
        self.stats["shape-of-view"] += 1
        return True
