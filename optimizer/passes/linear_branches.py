"""Merge linear branches: a value that is an affine function of one activation x, built from several
MatMuls with constant weights, becomes one MatMul (+ bias Add) with the merged weight.

Fine-tuned models exported with their adapters unmerged (PEFT's LoRA, DoRA, LoKr, LoHa) compute each
projection as x @ W + b plus a branch over the same x: (x @ A) @ B * s for LoRA, the column-norm
rescale m * (base + lora) for DoRA, x @ dW for LoKr / LoHa once folding computed dW. The recognizers
look for one projection per Q / K / V (a packed Q/K/V weight for ORT's Attention), and each branch
costs two more GEMMs at run time, so the sum is computed here as x @ M + c.

Nothing here names an adapter: a value qualifies when it is built only from
  - MatMul(a, W) with W a 2-D constant, or GPT-2's Conv1D form Reshape(Gemm(Reshape(a, [-1, K]), W, C))
    back to a's leading dims, where a is x or (read by that MatMul only) another such MatMul of x;
  - Add / Sub of two such values, Mul / Div / Add / Sub by a constant that varies along the last axis
    only (a per-column scale or bias), Neg;
every path reaching x through at least one MatMul, the merged weight no larger than the weights the merge
frees (a low-rank chain x @ A @ B alone stays: merged it would cost K * N instead of (K + N) * r; so does a
branch beside a weight another op reads too, a tied embedding), and
at least two MatMuls in all, or one rescaled by a
per-column vector (IA3's scales on k / v: (x @ W + b) * l is x @ (W * l) + b * l). One MatMul with its
bias is already the plain form, and a scalar or uniform scale after it stays (the attention's
1 / sqrt(d) on q, which the recognizers read). M and c come from evaluating those ops on the rows of the identity
and on a zero row (each op acts on rows alone, so f(x) = x @ (f(I) - f(0)) + f(0)), in float64, cast
to the weights' dtype. The result keeps the plain export's form: MatMul + Add (or the Conv1D's
Reshape / Gemm / Reshape). Intermediate values read outside the branch, or graph outputs, refuse it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import array_initializer, fresh_name, graph_names
from onnx_fuse.passes.constant_folding import constant_tensor

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


# A per-column constant is at most this many elements (a hidden size): the shape is read before any data,
# so a multi-GB 1-D constant beside an Add is never loaded (tests/test_memory.py).
_ROW_MAX = 1 << 20


def _float_tensor(value: ir.Value | None):
    t = constant_tensor(value)
    return t if t is not None and t.dtype in _FLOATS else None


def _row_const(value: ir.Value | None):
    """A constant that varies along the last axis only (scalar, [N], [1, .., N]), flattened (float64)."""
    t = _float_tensor(value)
    if t is None:
        return None
    dims = tuple(int(d) for d in t.shape)
    if any(d != 1 for d in dims[:-1]) or (dims and dims[-1] > _ROW_MAX):
        return None
    c = np.asarray(t.numpy()).astype(np.float64)
    return c.reshape(-1) if c.ndim else c


class _Weight:
    """A 2-D constant weight, read (in float64, transposed and scaled as its op uses it) only when a merge is
    made: every projection of a model is looked at, and most are plain, so their data stays where it is."""

    def __init__(self, tensor, transpose: bool = False, scale: float = 1.0):
        self.tensor, self.transpose, self.scale = tensor, transpose, scale
        rows, cols = (int(d) for d in tensor.shape)
        self.shape = (cols, rows) if transpose else (rows, cols)
        self.size = rows * cols
        self._array = None

    def array(self) -> np.ndarray:
        if self._array is None:
            w = np.asarray(self.tensor.numpy()).astype(np.float64)
            self._array = self.scale * (w.T if self.transpose else w)
        return self._array


def _known_equal(dims, others) -> bool:
    """Two shapes the same dim for dim, each dim known (an int or a named symbol: two unknowns prove nothing)."""
    known = lambda d: isinstance(d, int) or getattr(d, "value", None) is not None  # noqa: E731
    return len(dims) == len(others) and all(known(d) and known(e) and d == e for d, e in zip(dims, others))


def _varies(c: np.ndarray) -> bool:
    """A per-column vector with different entries (a scalar or uniform scale is the attention's 1/sqrt(d)
    idiom that the recognizers read, so it stays)."""
    return c.size > 1 and bool(np.any(c != c.reshape(-1)[0]))


def _weight(node: ir.Node):
    """MatMul(a, W) with W a 2-D constant: W (a _Weight, not yet read)."""
    if not is_default_op(node, "MatMul") or len(node.inputs) != 2:
        return None
    t = _float_tensor(node.inputs[1])
    return _Weight(t) if t is not None and len(t.shape) == 2 else None


def _conv1d(value: ir.Value):
    """Reshape(Gemm(Reshape(a, [.., K]), W, C), back): (outer Reshape, Gemm, inner Reshape, op weight
    [K, N] float64, bias [N] float64) when the flattening keeps rows (a's last axis K, one -1) and the
    result has a's leading dims (read from the inferred shapes)."""
    outer = value.producer()
    if not is_default_op(outer, "Reshape") or outer.inputs[0] is None:
        return None
    gemm = outer.inputs[0].producer()
    if not is_default_op(gemm, "Gemm") or attr_value(gemm, "transA", 0) or len(gemm.inputs[0].uses()) != 1:
        return None
    inner = gemm.inputs[0].producer()
    if not is_default_op(inner, "Reshape") or len(list(outer.inputs[0].uses())) != 1:
        return None
    a, target = inner.inputs[0], constant_tensor(inner.inputs[1])
    t = _float_tensor(gemm.inputs[1])
    if a is None or target is None or t is None or len(t.shape) != 2 or a.shape is None or value.shape is None:
        return None
    w = _Weight(t, transpose=bool(attr_value(gemm, "transB", 0)), scale=attr_value(gemm, "alpha", 1.0))
    dims = list(target.numpy())
    if len(dims) != 2 or dims[-1] != w.shape[0] or a.shape[-1] != w.shape[0]:
        return None
    if not _known_equal(list(value.shape), [*list(a.shape)[:-1], w.shape[1]]):
        return None
    bias = np.zeros(w.shape[1])
    if len(gemm.inputs) > 2 and gemm.inputs[2] is not None:
        c = _row_const(gemm.inputs[2])
        if c is None:
            return None
        bias = bias + attr_value(gemm, "beta", 1.0) * c
    return outer, gemm, inner, w, bias


def k_n(branch: "_Branch", top: ir.Value) -> int:
    """Elements of the merged weight [K, N]: K from the root, N from the top's last dim."""
    (x,) = branch.roots
    k, n = x.shape[-1], top.shape[-1] if top.shape is not None else None
    return k * n if isinstance(k, int) and isinstance(n, int) else 1 << 62


class _Branch:
    """The affine ops from one top value down to its activation x (module docstring)."""

    def __init__(self, pre_scales: bool = False):
        self.pre_scales = pre_scales   # after the rules: a per-column scale of the input joins the weight too
        self.nodes: list[ir.Node] = []   # every node of the branch (Conv1D forms: all three)
        self.steps: dict[int, tuple] = {}   # id(value) -> how it is computed
        self.roots: set = set()
        self.matmuls = 0
        self.conv1d = None   # (inner Reshape target, outer Reshape target) of a Conv1D form reading x
        self.rescaled = False   # a Mul / Div by a per-column vector (IA3's k / v scales): part of the weight
        self.weights: list[tuple[ir.Value, int]] = []   # (weight value, elements): the merged one must not be larger

    def post(self, v: ir.Value) -> bool:
        """v: a sum / scale / bias of linear maps of x."""
        if id(v) in self.steps:
            return True
        node = v.producer()
        if node is None or node.domain not in ("", "ai.onnx"):
            return False
        op = node.op_type
        if op in ("MatMul", "Reshape"):
            return self.linear(v)
        if op == "Neg" and len(node.inputs) == 1:
            ok = self.post(node.inputs[0])
            step = ("neg", node.inputs[0])
        elif op in ("Add", "Sub", "Mul", "Div") and len(node.inputs) == 2:
            a, b = node.inputs
            ca, cb = _row_const(a), _row_const(b)
            if ca is None and cb is None and op in ("Add", "Sub"):
                ok = self.post(a) and self.post(b)
                step = (op.lower(), a, b)
            elif cb is not None and ca is None:
                ok = self.post(a)
                step = (op.lower() + "_c", a, cb)
                self.rescaled |= op in ("Mul", "Div") and _varies(cb)
            elif ca is not None and cb is None and op in ("Add", "Mul", "Sub"):
                ok = self.post(b)
                step = ("c_" + op.lower(), b, ca)
                self.rescaled |= op == "Mul" and _varies(ca)
            else:
                return False
        else:
            return False
        if ok:
            self.steps[id(v)] = step
            self.nodes.append(node)
        return ok

    def linear(self, v: ir.Value) -> bool:
        node = v.producer()
        w = _weight(node)
        if w is not None:
            a = node.inputs[0]
            self.nodes.append(node)
            self.weights.append((node.inputs[1], w.size))
        else:
            form = _conv1d(v)
            if form is None:
                return False
            outer, gemm, inner, w, bias = form
            a = inner.inputs[0]
            self.nodes += [inner, gemm, outer]
            self.weights.append((gemm.inputs[1], w.size))
        self.matmuls += 1
        if a is None or a.shape is None or len(a.shape) < 2:
            return False
        inner_mm = a.producer()
        if len(a.uses()) == 1 and not a.is_graph_output() and _weight(inner_mm) is not None:
            if not self.linear(a):   # LoRA's x @ A, read by the B MatMul only
                return False
        else:
            self.roots.add(self._pre_scale(a))   # the MatMul still reads a: its step below keeps it
            if w is not None and node is not None and not is_default_op(node, "MatMul"):
                self.conv1d = (inner.inputs[1], outer.inputs[1])
        self.steps[id(v)] = ("matmul", a, w) if is_default_op(node, "MatMul") else ("gemm", a, w, bias)
        return True

    def _pre_scale(self, a: ir.Value) -> ir.Value:
        """With pre_scales: a = Mul(a2, l) / Div(a2, l), l a per-column vector with different entries read
        by this MatMul only (IA3's scale of the feed-forward input): (a2 * l) @ W = a2 @ (diag(l) W).
        Before the rules the same form is a norm's gamma before a single projection, which they must see."""
        node = a.producer()
        if not self.pre_scales or not is_default_op(node, "Mul", "Div") or len(node.inputs) != 2 \
                or len(a.uses()) != 1 or a.is_graph_output():
            return a
        x0, x1 = node.inputs
        c1, c0 = _row_const(x1), (_row_const(x0) if node.op_type == "Mul" else None)
        if c1 is not None and c0 is None and _varies(c1):
            step = ("mul_c" if node.op_type == "Mul" else "div_c", x0, c1)
        elif c0 is not None and c1 is None and _varies(c0):
            step = ("c_mul", x1, c0)
        else:
            return a
        self.steps[id(a)] = step
        self.nodes.append(node)
        self.rescaled = True
        return step[1]

    def evaluate(self, top: ir.Value, x: np.ndarray, root: ir.Value) -> np.ndarray:
        memo = {id(root): x}

        def ev(v):
            if id(v) in memo:
                return memo[id(v)]
            kind, a, *rest = self.steps[id(v)]
            va = ev(a)
            if kind == "matmul":
                out = va @ rest[0].array()
            elif kind == "gemm":
                out = va @ rest[0].array() + rest[1]
            elif kind == "neg":
                out = -va
            elif kind in ("add", "sub"):
                vb = ev(rest[0])
                out = va + vb if kind == "add" else va - vb
            else:
                c = rest[0]
                out = {"add_c": lambda: va + c, "sub_c": lambda: va - c, "mul_c": lambda: va * c,
                       "div_c": lambda: va / c, "c_add": lambda: c + va, "c_sub": lambda: c - va,
                       "c_mul": lambda: c * va}[kind]()
            memo[id(v)] = out
            return out

        return np.broadcast_to(ev(top), (x.shape[0], ev(top).shape[-1]))


class MergeLinearBranchesPass(FusePass):
    """Affine sums of several constant-weight MatMuls of one activation as one MatMul (module docstring)."""

    name = "merge-linear-branches"

    def __init__(self, pre_scales: bool = False) -> None:
        super().__init__()
        self.pre_scales = pre_scales   # the instance after the rules (levels.py): input scales too
        self.tops = ("Add", "Sub", "Mul", "Div", "MatMul") if pre_scales else ("Add", "Sub", "Mul", "Div")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in reversed(list(graph)):   # the widest sum first: its parts are not tops then
                if node.graph is graph and is_default_op(node, *self.tops):
                    modified |= self._merge(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _merge(self, graph: ir.Graph, top_node: ir.Node) -> bool:
        top = top_node.outputs[0]
        branch = _Branch(self.pre_scales)
        if not branch.post(top) or len(branch.roots) != 1:
            return False
        if branch.matmuls < 2 and not branch.rescaled:   # one projection and its bias: the plain form
            return False
        (x,) = branch.roots
        inside = {id(n) for n in branch.nodes}
        # the weights the merge frees (read by the branch only: a weight tied to another op stays) must
        # hold at least the merged [K, N]: a low-rank chain alone (x @ A @ B) or a LoRA beside a tied
        # lm_head would grow the model
        freed = sum(size for w, size in branch.weights
                    if not w.is_graph_output() and all(id(u.node) in inside for u in w.uses()))
        if freed < k_n(branch, top):
            return False
        for n in branch.nodes:   # nothing of the branch but its top may be read elsewhere
            if n is top_node:
                continue
            for o in n.outputs:
                if o.is_graph_output() or any(id(u.node) not in inside for u in o.uses()):
                    return False
        dtypes = {n.inputs[1].dtype for n in branch.nodes if is_default_op(n, "MatMul", "Gemm")}
        if len(dtypes) != 1 or top.dtype not in dtypes:
            return False
        k = int(x.shape[-1]) if isinstance(x.shape[-1], int) else None
        if k is None:
            return False
        bias = branch.evaluate(top, np.zeros((1, k)), x)[0]
        weight = branch.evaluate(top, np.eye(k), x) - bias
        self._rewrite(graph, top_node, x, weight, bias, branch)
        self.stats["merged"] += 1
        self.stats["MatMul"] += branch.matmuls
        return True

    def _rewrite(self, graph, top_node, x, weight, bias, branch) -> None:
        top = top_node.outputs[0]
        dtype = top.dtype
        np_dtype = ir.DataType(dtype).numpy()
        taken = graph_names(graph)
        stem = top.name or "linear"

        def init(base, array):
            return array_initializer(graph, base, array.astype(np_dtype), dtype, taken)

        def out(base, shape=None):
            return ir.Value(name=fresh_name(base, taken), type=top.type, shape=shape)

        w = init(f"{stem}_merged_w", weight)
        has_bias = bool(np.any(bias != 0))
        nodes = []
        if branch.conv1d is not None:   # keep the Conv1D form: Reshape -> Gemm (bias as C) -> Reshape
            flat_target, back_target = branch.conv1d
            flat = out(f"{stem}_merged_rows")
            gemm_in = [flat, w] + ([init(f"{stem}_merged_b", bias)] if has_bias else [])
            rows = out(f"{stem}_merged_gemm")
            final = out(f"{stem}_merged", top.shape)
            nodes += [ir.Node("", "Reshape", [x, flat_target], outputs=[flat]),
                      ir.Node("", "Gemm", gemm_in, outputs=[rows]),
                      ir.Node("", "Reshape", [rows, back_target], outputs=[final])]
        else:
            mm = out(f"{stem}_merged_mm" if has_bias else f"{stem}_merged", top.shape)
            nodes.append(ir.Node("", "MatMul", [x, w], outputs=[mm]))
            final = mm
            if has_bias:
                final = out(f"{stem}_merged", top.shape)
                nodes.append(ir.Node("", "Add", [mm, init(f"{stem}_merged_b", bias)], outputs=[final]))
        graph.insert_before(top_node, nodes)
        reroute(top, final)
        order = {id(n): i for i, n in enumerate(graph)}
        for n in sorted(set(branch.nodes), key=lambda n: -order[id(n)]):
            graph.remove(n, safe=True)
