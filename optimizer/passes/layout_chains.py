"""Layout chains: a Transpose sunk into the next Transpose, a Reshape of a Reshape read from its source.

Cases handled (each counted in ``stats``):
- ``transpose-sunk``: Transpose(x, p1) -> ops that do not care about layout -> Transpose(p2) becomes
  ops on x -> Transpose(p1[p2]); identity-elimination then drops an identity permutation, so an
  inverse pair cancels. Layout-agnostic ops: unary elementwise ones (Cast, Relu, Erf, ...) and the
  broadcasting ones (Add, Mul, Where, ...) whose other operands are constants (unsqueezed to the
  chain's rank and permuted with p1's inverse), values whose dims are all 1, or Transposes by the same
  p1 (read from before them).
- ``reshape-of-reshape``: Reshape(Reshape(x, s1), s2) reads x directly when s2 does not copy (0) a dim
  of the middle value that x does not have at the same axis; identity-elimination then drops a
  Reshape to x's own shape, so a head split undone by its merge cancels.

Every value between the two ends must have that one reader and must not be a graph output: a second
reader (a Shape read included) would need the old layout, so it blocks the rewrite. Runs in the
cleanup after the rules (levels.py): the lowerings' layout glue meets the exporter's there, once the
cleanup has dropped the shape reads the rules left beside it (LayoutLM's TorchScript export at
trt-O4: 8 Transposes, and the Reshapes around them, cancel in pairs).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import Dim, dim_text, div, mul, reshape_out_dims, shape_vector, value_dims
from onnx_fuse.passes._infra import FusePass, is_default_op
from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes.constant_folding import constant_tensor

_UNARY = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil", "Celu", "Cos", "Cosh",
    "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN",
    "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign",
    "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
})
# every input broadcasts elementwise (numpy rules); Clip's min / max are scalars, so they qualify
_BROADCAST = frozenset({
    "Add", "And", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Clip", "Div", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow", "Sub",
    "Sum", "Where", "Xor",
})


# the most axes a Transpose of the folded chain may have at trt (TensorRT's dims hold 8); ONNX and
# ONNX Runtime take any rank, so other targets fold without a cap (Hiera's unroll: one Transpose of
# 10 axes for three rounds of 6, half the time in ORT at batch 4, docs/holdout.md)
TRT_MAX_RANK = 8


def _one_reader(value: ir.Value) -> ir.Node | None:
    """The one node that reads ``value`` (once), which is no graph output; else None."""
    if value.is_graph_output():
        return None
    uses = list(value.uses())
    return uses[0].node if len(uses) == 1 else None


def _perm(node: ir.Node) -> list[int] | None:
    a = node.attributes.get("perm")
    if a is None:  # default: reverse the axes
        x = node.inputs[0] if node.inputs else None
        return None if x is None or x.shape is None else list(range(len(x.shape)))[::-1]
    if a.is_ref():
        return None
    return [int(p) for p in a.value]


def _fresh(base: str, taken: set) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _zero_entries(shape: ir.Value | None) -> list[int] | None:
    """Where a constant Reshape shape holds 0; None when it is not a small int constant."""
    t = constant_tensor(shape)
    if t is None or not t.dtype.is_integer() or t.size > 64:
        return None
    return [i for i, e in enumerate(t.numpy().reshape(-1)) if int(e) == 0]


def _all_ones(value: ir.Value) -> bool:
    return value.shape is not None and all(isinstance(d, int) and d == 1 for d in value.shape.dims)


class FoldLayoutChainsPass(FusePass):
    """Transposes sunk into the next Transpose, Reshapes of Reshapes read from the source (module docstring)."""

    name = "fold-layout-chains"

    def __init__(self, max_rank: int | None = TRT_MAX_RANK) -> None:
        super().__init__()
        self.max_rank = max_rank  # None: any rank

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph  # permuted constants become initializers: main graph only
        for node in list(graph):
            if node.graph is not graph:  # removed by an earlier rewrite of this sweep
                continue
            if is_default_op(node, "Transpose", "Reshape") and self._static_chain(graph, node):
                modified = True
            elif is_default_op(node, "Transpose"):
                modified |= self._sink_transpose(graph, node)
            elif is_default_op(node, "Reshape"):
                modified |= self._reshape_of_reshape(node)
        return ir.passes.PassResult(model, modified=modified)

    # -- Transpose -> layout-agnostic ops -> Transpose --------------------------------------------

    def _sink_transpose(self, graph: ir.Graph, t1: ir.Node) -> bool:
        p1 = _perm(t1)
        if p1 is None or len(t1.inputs) != 1 or t1.inputs[0] is None:
            return False
        x, cur = t1.inputs[0], t1.outputs[0]
        inv = list(np.argsort(p1))
        chain: list[tuple[ir.Node, int]] = []  # (node, which input carries the chain)
        while True:
            node = _one_reader(cur)
            if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
                return False
            index = next(u.idx for u in cur.uses())
            if node.op_type == "Transpose":
                p2 = _perm(node)
                if p2 is None or len(p2) != len(p1):
                    return False
                break
            if not self._agnostic(node, index, len(p1), p1):
                return False
            chain.append((node, index))
            cur = node.outputs[0]
        # rewrite: the chain runs on x's layout, the last Transpose does both permutations
        t2 = node
        for op, index in chain:
            for j, v in enumerate(op.inputs):
                if j == index or v is None:
                    continue
                if is_default_op(v.producer(), "Transpose") and _perm(v.producer()) == p1:
                    op.replace_input_with(j, v.producer().inputs[0])
                elif constant_tensor(v) is not None and not _all_ones(v):
                    op.replace_input_with(j, self._permuted(graph, v, inv, len(p1)))
            out = op.outputs[0]
            if out.shape is not None:
                out.shape = ir.Shape([out.shape.dims[i] for i in inv])
        first, index = chain[0] if chain else (t2, 0)
        first.replace_input_with(index, x)
        t2.attributes["perm"] = ir.AttrInt64s("perm", [p1[i] for i in p2])
        if not t1.outputs[0].uses():
            graph.remove(t1, safe=True)
        self.stats["transpose-sunk"] += 1
        return True

    @staticmethod
    def _agnostic(node: ir.Node, index: int, rank: int, p1: list[int]) -> bool:
        """``node`` computes elementwise, so it commutes with permuting its chain input."""
        out = node.outputs[0]
        if out.shape is None or len(out.shape) != rank:
            return False  # broadcasting must not add axes in front of the chain's
        if node.op_type in _UNARY:
            return len(node.inputs) == 1
        if node.op_type not in _BROADCAST:
            return False
        for j, v in enumerate(node.inputs):
            if j == index or v is None:
                continue
            producer = v.producer()
            if is_default_op(producer, "Transpose") and _perm(producer) == p1 and producer.inputs[0] is not None:
                continue
            t = constant_tensor(v)
            if t is not None and len(t.shape) <= rank and t.size <= (1 << 22):  # a permuted copy is made
                continue
            if not _all_ones(v) or len(v.shape) > rank:
                return False
        return True

    def _permuted(self, graph: ir.Graph, v: ir.Value, inv: list[int], rank: int) -> ir.Value:
        t = constant_tensor(v)
        arr = t.numpy().reshape((1,) * (rank - len(t.shape)) + tuple(t.shape))
        arr = np.ascontiguousarray(np.transpose(arr, inv))
        name = _fresh(f"{v.name or 'const'}_perm", set(graph.initializers) | {w.name for w in graph.inputs}
                      | {o.name for n in graph for o in n.outputs})
        value = ir.Value(name=name, type=ir.TensorType(t.dtype), shape=ir.Shape(list(arr.shape)),
                         const_value=ir.tensor(arr, dtype=t.dtype, name=name))
        graph.register_initializer(value)
        return value

    # -- Reshape(Reshape(x, s1), s2) --------------------------------------------------------------

    def _reshape_of_reshape(self, r2: ir.Node) -> bool:
        if len(r2.inputs) < 2 or r2.inputs[0] is None:
            return False
        mid = r2.inputs[0]
        r1 = mid.producer()
        if not is_default_op(r1, "Reshape") or len(r1.inputs) < 2 or r1.inputs[0] is None or _one_reader(mid) is not r2:
            return False
        x = r1.inputs[0]
        a1 = r1.attributes.get("allowzero")
        if a1 is not None and (a1.is_ref() or a1.value != 0) and _zero_entries(r1.inputs[1]) != []:
            return False  # a literal 0 in s1 (an empty middle value) or an unread s1: left alone
        a = r2.attributes.get("allowzero")
        if a is not None and (a.is_ref() or a.value not in (0, 1)):
            return False
        if not (a is not None and a.value == 1) and not self._zeros_copy_same(r2.inputs[1], mid, x):
            return False
        r2.replace_input_with(0, x)
        self.stats["reshape-of-reshape"] += 1
        return True

    @staticmethod
    def _zeros_copy_same(shape: ir.Value | None, mid: ir.Value, x: ir.Value) -> bool:
        """Each 0 of ``shape`` (copy the input's dim) copies the same dim from x as from ``mid``."""
        zeros = _zero_entries(shape)
        if zeros is None:
            return False
        if not zeros:
            return True
        got, have = reshape_out_dims(mid), value_dims(x)
        if got is None or have is None:
            return False
        return all(i < len(got) and i < len(have) and have[i] is not None and got[i] == have[i]
                   and not any(invented_name(s) for s in have[i][1]) for i in zeros)

    # -- Reshape / Transpose chains on known (int or symbolic) shapes ----------------------------

    def _static_chain(self, graph: ir.Graph, start: ir.Node) -> bool:
        """A chain of Reshapes and Transposes from a known shape, as at most Reshape, Transpose,
        Reshape (_atoms), when that is fewer nodes. Symbolic dims (``batch``, ``4*batch``) are atoms
        never split, so the folded chain is the same for every value they take."""
        x = start.inputs[0] if start.inputs else None
        before = x.producer() if x is not None else None
        if x is None or (is_default_op(before, "Transpose", "Reshape") and _one_reader(x) is start):
            return False  # not the chain's first node
        chain, node = [start], start
        while (nxt := _one_reader(node.outputs[0])) is not None and is_default_op(nxt, "Transpose", "Reshape"):
            chain.append(node := nxt)
        shape = _known_dims(x)
        if len(chain) < 2 or shape is None:
            return False
        steps = [_perm(n) if n.op_type == "Transpose" else _reshape_target(n) for n in chain]
        if any(s is None for s in steps):
            return False
        plan = _atoms(shape, [(n.op_type, s) for n, s in zip(chain, steps)])
        if plan is None:
            return False
        sizes, perm, final = plan
        if self.max_rank is not None and len(perm) > self.max_rank:
            return False
        ops = []  # (op, perm or (target dims, the Reshape's input dims))
        if perm != list(range(len(perm))):
            if sizes != shape:
                ops.append(("Reshape", (sizes, shape)))
            ops.append(("Transpose", perm))
            moved = [sizes[p] for p in perm]
            if moved != final:
                ops.append(("Reshape", (final, moved)))
        else:
            ops.append(("Reshape", (final, shape)))
        if len(ops) >= len(chain):
            return False
        targets = {k: _target_entries(*arg) for k, (op, arg) in enumerate(ops) if op == "Reshape"}
        if any(t is None for t in targets.values()):
            return False  # more than one symbolic entry that no 0 can copy
        last = chain[-1]
        taken = {o.name for n in graph for o in n.outputs} | set(graph.initializers) | {v.name for v in graph.inputs}
        cur = x
        for k, (op, arg) in enumerate(ops):
            if op == "Transpose":
                new = ir.node("Transpose", [cur], attributes={"perm": arg})
                dims = [sizes[p] for p in arg]
            else:
                shape_value = self._shape_const(graph, f"{last.name or 'layout'}_shape", targets[k])
                taken.add(shape_value.name)
                new = ir.node("Reshape", [cur, shape_value])
                dims = arg[0]
            graph.insert_before(last, new)
            cur = new.outputs[0]
            cur.name = _fresh(f"{last.outputs[0].name or 'layout'}_{op.lower()}{k}", taken)
            cur.dtype = x.dtype
            cur.shape = ir.Shape([d[0] if not d[1] else dim_text(d) for d in dims])
        out = last.outputs[0]
        name, was_output = out.name, out.is_graph_output()
        cur.type, cur.shape = out.type, out.shape
        out.replace_all_uses_with(cur, replace_graph_outputs=True)
        for n in reversed(chain):
            graph.remove(n, safe=True)
        if was_output:  # the model's output keeps its name
            out.name, cur.name = None, name
        self.stats["layout-chain"] += 1
        return True

    def _shape_const(self, graph: ir.Graph, base: str, dims: list[int]) -> ir.Value:
        name = _fresh(base, set(graph.initializers) | {w.name for w in graph.inputs}
                      | {o.name for n in graph for o in n.outputs})
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(dims)]),
                         const_value=ir.tensor(np.array(dims, dtype=np.int64), name=name))
        graph.register_initializer(value)
        return value


def _reshape_target(node: ir.Node) -> list[Dim] | None:
    """A Reshape's target entries with 0 (copy) and -1 still to resolve: a constant, or a vector
    computed from shapes (TorchScript's Concat of Shape Gathers) read as dim products; None when an
    entry cannot be read or names a dim inference invented."""
    if len(node.inputs) < 2:
        return None
    t = constant_tensor(node.inputs[1])
    if t is not None:
        if not t.dtype.is_integer() or t.size > 64:
            return None
        entries = [(int(e), ()) for e in t.numpy().reshape(-1)]
    else:
        got = shape_vector(node.inputs[1], {})
        if got is None or got[1] or any(e is None or any(invented_name(a) for a in e[1]) for e in got[0]):
            return None
        entries = list(got[0])
    a = node.attributes.get("allowzero")
    if a is not None and (a.is_ref() or a.value != 0) and (0, ()) in entries:
        return None  # a literal 0: an empty tensor
    return entries


def _known_dims(x: ir.Value) -> list[Dim] | None:
    """x's dims as products (``4*batch`` is (4, ("batch",))); None when one is unknown or invented
    by inference (no fact to fold on) or not positive."""
    dims = value_dims(x)
    if dims is None or any(d is None or d[0] <= 0 or any(invented_name(a) for a in d[1]) for d in dims):
        return None
    return dims


def _target_entries(target: list[Dim], ins: list[Dim]) -> list[int] | None:
    """A Reshape target for ``target`` dims from an input with dims ``ins``: ints as they are, a
    symbolic entry as 0 where the input has the same dim at that axis, else as the one -1; None when
    two entries would need -1."""
    out = [d[0] if not d[1] else 0 if i < len(ins) and ins[i] == d else None for i, d in enumerate(target)]
    if out.count(None) > 1:
        return None
    return [-1 if e is None else e for e in out]


def _atoms(shape: list[Dim], steps: list[tuple[str, list]]):
    """Follow a Reshape / Transpose chain on x's ``shape`` (dims as products, _dim_products.Dim) as a
    permutation of x's axes split into factors ("atoms"); a Reshape's step is its target entries
    (Dims, (0, ()) a copy, (-1, ()) the one to solve). Returns (atom sizes in x's order, the
    permutation of the atoms, the final shape), adjacent atoms that stay adjacent merged and 1s
    dropped; None when a Reshape does not split the atoms on their boundaries (or a divisor), splits a
    symbolic dim, or a shape entry cannot be resolved."""
    one: Dim = (1, ())
    size = {i: d for i, d in enumerate(shape)}
    order = list(range(len(shape)))  # the atoms in x's memory order
    axes = [[i] for i in order]      # the atoms of each axis of the current value, outer first
    dims = list(shape)
    fresh = len(shape)
    for op, arg in steps:
        if op == "Transpose":
            if sorted(arg) != list(range(len(axes))):
                return None
            axes, dims = [axes[p] for p in arg], [dims[p] for p in arg]
            continue
        if any(e[0] < 0 and e != (-1, ()) for e in arg) or arg.count((-1, ())) > 1:
            return None
        target = [dims[i] if e == (0, ()) and i < len(dims) else None if e == (-1, ()) else e
                  for i, e in enumerate(arg)]
        if any(d is not None and d[0] <= 0 for d in target):
            return None
        total = one
        for d in dims:
            total = mul(total, d)
        known = one
        for d in target:
            known = mul(known, d) if d is not None else known
        if None in target:
            solved = div(total, known)
            if solved is None or solved[0] <= 0:
                return None
            target[target.index(None)] = solved
        elif known != total:
            return None
        flat = [a for ax in axes for a in ax if size[a] != one]
        axes, k = [], 0
        for d in target:
            group, have = [], one
            while have != d:
                need = div(d, have)  # what this axis still takes
                if k >= len(flat) or need is None:
                    return None
                a = flat[k]
                if div(need, size[a]) is not None:
                    group.append(a)
                    have = mul(have, size[a])
                    k += 1
                    continue
                if size[a][1] or need[1] or size[a][0] % need[0]:
                    return None  # a symbolic dim is never split, an int one only by a divisor
                outer, inner = fresh, fresh + 1  # a as [need, size / need]
                fresh += 2
                size[outer], size[inner] = need, (size[a][0] // need[0], ())
                order[order.index(a):order.index(a) + 1] = [outer, inner]
                flat[k:k + 1] = [outer, inner]
                group.append(outer)
                have = mul(have, need)
                k += 1
            axes.append(group)
        dims = target
    final_order = [a for ax in axes for a in ax if size[a] != one]
    order = [a for a in order if size[a] != one]
    # merge atoms adjacent in both orders
    merged: list[list[int]] = []
    for a in final_order:
        if merged and order.index(a) == order.index(merged[-1][-1]) + 1:
            merged[-1].append(a)
        else:
            merged.append([a])
    groups = sorted(merged, key=lambda g: order.index(g[0]))
    sizes = []
    for g in groups:
        d = one
        for a in g:
            d = mul(d, size[a])
        sizes.append(d)
    perm = [groups.index(g) for g in merged]
    return sizes, perm, dims
