"""Constant folding: evaluate nodes whose inputs are all constants and store the results.

Cases handled:
- inputs that are initializers (never ones that are also graph inputs: those can be overridden at
  run time), Constant nodes, and earlier folded results;
- Shape / Size of a value whose (sliced) shape is static, whatever produces it: the pattern that
  dynamo exports use for every reshape, and Gather/Slice/Concat/... of a partly symbolic shape
  vector that pick only static dims; CastLike of a constant to a value of known dtype;
- a Reshape target Concat'ed from positive constants and one computed entry: the constant with -1
  for that entry (passes/_reshape_target.py);
- Constant nodes are lifted to initializers of the same name in their own graph (so CSE merges
  twins), inside If / Loop / Scan bodies as in the main graph;
- the common shape and elementwise ops in NumPy, with ONNX semantics (integer Div truncates,
  dtypes are kept exactly, Reshape 0/-1, Slice clamping); anything else deterministic through
  ``onnx.reference.ReferenceEvaluator``, with the output dtype checked against ONNX inference.

Integer overflow: runtimes disagree (ORT reduces integers through float64, so an int64
ReduceProd that overflows gives INT64_MAX and one above 2**53 is rounded; it wraps Mul/Add), so
an integer Add/Sub/Mul/Neg/Abs/Div/Range whose exact result does not fit its dtype, and an
integer ReduceSum/ReduceProd whose |x| reduction exceeds 2**53, are not folded (checked with
exact Python integers); the other integer arithmetic ops (MatMul, CumSum, Pow, ReduceSumSquare,
...) are not folded at all.

Never folded: nondeterministic ops (Random*, Multinomial, Bernoulli, Dropout), a DequantizeLinear
whose float result has more than ``MAX_DEQUANTIZED_ELEMENTS`` entries (a quantized weight: folding
it would store the float weight and undo the compression; scalars and tiny vectors, which rules
match on value, still fold), ops outside the default domain, nodes with subgraphs, results over
``MAX_OUTPUT_ELEMENTS`` / ``MAX_OUTPUT_BYTES``
(data-moving ops such as Transpose, whose result is no bigger than their input, may produce up to
``MAX_INPUT_BYTES``), inputs over ``MAX_INPUT_BYTES`` (a large external weight is never read just to fold it), and dtypes
NumPy does not represent exactly (bfloat16, float8, int4, strings).

Results become initializers named after the value they replace (deterministic), of the graph the
node was in (a subgraph's own initializers keep the name in its scope, as ONNX allows since IR 4;
the rules write their constants there too); where the value is a graph output they become
Constant nodes, so the output keeps its name.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._shape_values import invented_name, shape_entries

MAX_OUTPUT_ELEMENTS = 1 << 20
MAX_OUTPUT_BYTES = 4 << 20
MAX_INPUT_BYTES = 16 << 20
# Transposes of constants bigger than this are folded lazily: the result is computed when the
# model is saved (tensor by tensor), so folding a model's weight transposes costs no time here.
LAZY_BYTES = 1 << 20

# A DequantizeLinear of a constant is a compressed weight: only results this small are stored as floats.
MAX_DEQUANTIZED_ELEMENTS = 64
NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout",
})
# Ops whose output can be far larger than their inputs: folded only when the size is known first.
_EXPANDING = frozenset({"ConstantOfShape", "Expand", "Tile", "Range", "Pad", "OneHot", "Resize",
                        "Upsample", "EyeLike", "MatMul", "Gemm", "Einsum", "CumSum"})
# Ops that only move or relabel data: their result is no bigger than their input, so they may fold
# up to MAX_INPUT_BYTES (the transposed weights of exported Linear layers).
_SIZE_PRESERVING = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten"})
# Ops through which a partly symbolic shape vector can still yield static entries (_shape_values).
_SHAPE_VALUE_OPS = frozenset({"Gather", "Slice", "Concat", "Squeeze", "Unsqueeze", "Reshape", "Cast"})
_FOLDABLE_DTYPES = frozenset({
    ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.INT8, ir.DataType.INT16,
    ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8, ir.DataType.UINT16,
    ir.DataType.UINT32, ir.DataType.UINT64, ir.DataType.BOOL,
})
_INT64_MAX = np.iinfo(np.int64).max
# Integer ops checked for overflow against exact Python-integer arithmetic (_check_exact_ints).
_INT_CHECKED = frozenset({"Add", "Sub", "Mul", "Neg", "Abs", "Div", "ReduceSum", "ReduceProd"})
# Integer arithmetic the reference evaluator would compute with NumPy's wrapping (or float) math:
# never folded for integer outputs, since no runtime is bound to agree on overflow.
_INT_UNCHECKED = frozenset({"MatMul", "Gemm", "Einsum", "CumSum", "Pow", "ReduceSumSquare",
                            "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean",
                            "MatMulInteger", "Sum", "Mean", "Conv", "ConvInteger"})
_EXACT_CHECK_ELEMENTS = 1 << 16


class _NoFold(Exception):
    """This node cannot be folded safely; the message says why (counted in stats)."""


def _default_domain(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx")


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    if a is None:
        return default
    if a.is_ref():
        raise _NoFold("reference attribute")
    return a.value


def constant_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The tensor behind ``value`` when it is a true constant, else None.

    An initializer that is also a graph input is not a constant (callers may feed it).
    """
    if value is None or value.is_graph_input():
        return None
    if value.is_initializer():
        return value.const_value
    node = value.producer()
    if node is None or node.op_type != "Constant" or not _default_domain(node):
        return None
    if len(node.attributes) != 1:
        return None
    (name, a), = node.attributes.items()
    if a.is_ref():
        return None
    if name == "value":
        return a.value
    scalars = {"value_float": np.float32, "value_int": np.int64}
    lists = {"value_floats": np.float32, "value_ints": np.int64}
    if name in scalars:
        return ir.tensor(np.array(a.value, scalars[name]))
    if name in lists:
        return ir.tensor(np.array(list(a.value), lists[name]))
    return None  # strings, sparse: not folded


def _to_numpy(tensor: ir.TensorProtocol) -> np.ndarray:
    if tensor.dtype not in _FOLDABLE_DTYPES:
        raise _NoFold(f"dtype {tensor.dtype}")
    if tensor.nbytes > MAX_INPUT_BYTES:
        raise _NoFold("input too large")
    arr = tensor.numpy()
    return arr.reshape(tuple(tensor.shape.numpy()))


def _ints(arr: np.ndarray | None) -> list[int] | None:
    return None if arr is None else [int(v) for v in np.asarray(arr).reshape(-1)]


def _check_size(shape) -> None:
    n = int(np.prod([int(d) for d in shape], dtype=np.float64)) if len(shape) else 1
    if n > MAX_OUTPUT_ELEMENTS:
        raise _NoFold("output too large")


# --- NumPy implementations with ONNX semantics -------------------------------------------------

def _div(node, x, y):
    if np.issubdtype(x.dtype, np.floating):
        return np.divide(x, y).astype(x.dtype, copy=False)
    if np.any(y == 0):
        raise _NoFold("integer division by zero")
    q = np.floor_divide(x, y)
    # ONNX (like C) truncates toward zero; floor_divide rounds toward -inf.
    fix = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
    return (q + fix.astype(q.dtype)).astype(x.dtype, copy=False)


def _same(fn):
    def run(node, *args):
        out = fn(*args)
        return np.asarray(out).astype(args[0].dtype, copy=False)
    return run


def _cast(node, x):
    return _cast_to(x, ir.DataType(_attr(node, "to")))


def _cast_to(x: np.ndarray, to: ir.DataType) -> np.ndarray:
    if to not in _FOLDABLE_DTYPES:
        raise _NoFold(f"cast to {to}")
    target = to.numpy()
    if np.issubdtype(x.dtype, np.floating) and np.issubdtype(target, np.integer):
        info = np.iinfo(target)
        if not np.all(np.isfinite(x)) or x.size and (x.min() < info.min or x.max() > info.max):
            raise _NoFold("cast out of range")  # implementation-defined in ONNX
    return x.astype(target)


def _reshape(node, x, shape):
    shape = _ints(shape)
    allowzero = _attr(node, "allowzero", 0)
    out = []
    for i, d in enumerate(shape):
        out.append(x.shape[i] if d == 0 and not allowzero else d)
    return x.reshape(out)


def _unsqueeze(node, x, axes=None):
    axes = _ints(axes) if axes is not None else list(_attr(node, "axes", []))
    rank = x.ndim + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        x = np.expand_dims(x, a)
    return x


def _squeeze(node, x, axes=None):
    axes = _ints(axes) if axes is not None else _attr(node, "axes", None)
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(int(a) for a in axes)) if len(axes) else x


def _concat(node, *xs):
    return np.concatenate(xs, axis=_attr(node, "axis"))


def _gather(node, x, idx):
    axis = _attr(node, "axis", 0)
    dim = x.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise _NoFold("index out of range")
    return np.take(x, idx.astype(np.int64), axis=axis)


def _slice(node, x, starts=None, ends=None, axes=None, steps=None):
    if starts is None:  # opset < 10: attributes
        starts, ends = _attr(node, "starts"), _attr(node, "ends")
        axes = _attr(node, "axes", None)
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise _NoFold("slice step 0")
        a = a + x.ndim if a < 0 else a
        dim = x.shape[a]
        # Python slicing clamps exactly like ONNX for all step signs once ends are bounded.
        s = max(min(s, dim), -dim - 1) if s < 0 else min(s, dim)
        e = max(e, -dim - 1) if e < 0 else min(e, dim)
        index[a] = slice(s, None if (st < 0 and e < -dim) else e, st)
    return x[tuple(index)]


def _transpose(node, x):
    perm = _attr(node, "perm", None)
    return np.transpose(x, None if perm is None else list(perm))


def _expand(node, x, shape):
    out_shape = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
    _check_size(out_shape)
    return np.broadcast_to(x, out_shape).copy()


def _constant_of_shape(node, shape):
    dims = _ints(shape)
    _check_size(dims)
    value = _attr(node, "value", None)
    if value is None:
        return np.zeros(dims, np.float32)
    fill = _to_numpy(value).reshape(-1)
    return np.full(dims, fill[0], dtype=fill.dtype)


def _range(node, start, limit, delta):
    s, l, d = start.item(), limit.item(), delta.item()
    if d == 0:
        raise _NoFold("range delta 0")
    n = max(int(np.ceil((l - s) / d)), 0)
    _check_size([n])
    if n and np.issubdtype(start.dtype, np.integer):
        info = np.iinfo(start.dtype)
        if not info.min <= int(s) + (n - 1) * int(d) <= info.max:
            raise _NoFold("integer overflow")
    return (s + np.arange(n) * d).astype(start.dtype) if n else np.zeros(0, start.dtype)


def _where(node, c, x, y):
    return np.where(c, x, y).astype(x.dtype, copy=False)


def _reduce(fn):
    def run(node, x, axes=None):
        keep = bool(_attr(node, "keepdims", 1))
        if axes is None:
            axes_list = _attr(node, "axes", None)
        else:
            axes_list = _ints(axes)
        if axes_list is not None and len(axes_list) == 0:
            if _attr(node, "noop_with_empty_axes", 0):
                return x
            axes_list = None
        out = fn(x, axis=None if axes_list is None else tuple(axes_list), keepdims=keep)
        return np.asarray(out).astype(x.dtype, copy=False)
    return run


def _float_unary(fn):
    def run(node, x):
        if not np.issubdtype(x.dtype, np.floating):
            raise _NoFold("integer input to float op")
        return fn(x).astype(x.dtype, copy=False)
    return run


_NUMPY_OPS = {
    "Add": _same(np.add), "Sub": _same(np.subtract), "Mul": _same(np.multiply), "Div": _div,
    "Neg": _same(np.negative), "Abs": _same(np.abs), "Min": _same(np.minimum),
    "Max": _same(np.maximum),
    "Equal": lambda n, a, b: np.equal(a, b), "Less": lambda n, a, b: np.less(a, b),
    "Greater": lambda n, a, b: np.greater(a, b), "Not": lambda n, a: np.logical_not(a),
    "And": lambda n, a, b: np.logical_and(a, b), "Or": lambda n, a, b: np.logical_or(a, b),
    "Where": _where, "Cast": _cast, "Reshape": _reshape, "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze, "Concat": _concat, "Gather": _gather, "Slice": _slice,
    "Transpose": _transpose, "Expand": _expand, "ConstantOfShape": _constant_of_shape,
    "Range": _range, "Identity": lambda n, x: x,
    "ReduceProd": _reduce(np.prod), "ReduceSum": _reduce(np.sum),
    "Sqrt": _float_unary(np.sqrt), "Reciprocal": _float_unary(np.reciprocal),
    "Exp": _float_unary(np.exp), "Log": _float_unary(np.log), "Floor": _float_unary(np.floor),
    "Ceil": _float_unary(np.ceil),
}
def _check_exact_ints(node: ir.Node, fn, args: list[np.ndarray], out: np.ndarray) -> None:
    """Refuse a folded integer result that differs from exact integer arithmetic (overflow)."""
    if not np.issubdtype(out.dtype, np.integer) or out.dtype == np.bool_:
        return
    if sum(a.size for a in args) > _EXACT_CHECK_ELEMENTS:
        raise _NoFold("integer overflow not checkable")
    if node.op_type == "Div":
        info = np.iinfo(out.dtype)
        x, y = args
        if info.min < 0 and np.any((x == info.min) & (y == -1)):
            raise _NoFold("integer overflow")
        return
    info = np.iinfo(out.dtype)
    lo, hi = info.min, info.max
    if node.op_type in ("ReduceSum", "ReduceProd"):
        # ORT reduces integers through float64 (3037000499**2 comes out ...960, an overflow
        # saturates to INT64_MAX): agree with exact arithmetic only while every partial result
        # is exact in float64, i.e. the reduction of |x| stays within 2**53.
        args = [np.abs(args[0].astype(object)), *args[1:]]
        lo, hi = -(1 << 53), 1 << 53
    exact = np.asarray(fn(node, *(a.astype(object) for a in args)), dtype=object)
    if exact.size and any(not lo <= int(v) <= hi for v in exact.reshape(-1)):
        raise _NoFold("integer overflow")


# Binary ops whose two inputs share one dtype in ONNX; anything else there is a malformed model.
_SAME_DTYPE = frozenset({"Add", "Sub", "Mul", "Div", "Min", "Max", "Equal", "Less", "Greater"})


def _static_dims(value: ir.Value, start: int | None, end: int | None) -> list[int] | None:
    shape = value.shape
    if shape is None:
        return None
    dims = list(shape)[slice(start, end)]
    if not all(isinstance(d, int) for d in dims):
        return None
    return [int(d) for d in dims]


def _fold_shape_op(node: ir.Node) -> list[np.ndarray] | None:
    """Shape / Size of a value whose relevant dims are static, without reading the value."""
    x = node.inputs[0] if node.inputs else None
    if x is None:
        return None
    if node.op_type == "Shape":
        dims = _static_dims(x, _attr(node, "start", None), _attr(node, "end", None))
        return None if dims is None else [np.array(dims, np.int64)]
    dims = _static_dims(x, None, None)
    return None if dims is None else [np.array(int(np.prod(dims, dtype=np.int64)), np.int64)]


def _lazy_transpose(node: ir.Node) -> ir.LazyTensor | None:
    """Transpose of a large constant, as a tensor computed only when its bytes are needed."""
    if node.op_type != "Transpose" or not node.inputs:
        return None
    src = constant_tensor(node.inputs[0])
    if src is None or src.dtype not in _FOLDABLE_DTYPES or not LAZY_BYTES < src.nbytes <= MAX_INPUT_BYTES:
        return None
    dims = [int(d) for d in src.shape.numpy()]
    perm = _attr(node, "perm", None)
    perm = list(range(len(dims)))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(len(dims))):
        raise _NoFold("bad perm")

    def compute() -> ir.TensorProtocol:
        return ir.tensor(np.ascontiguousarray(np.transpose(src.numpy().reshape(dims), perm)))

    return ir.LazyTensor(compute, dtype=src.dtype, shape=ir.Shape([dims[p] for p in perm]))


def _opset(node: ir.Node, model: ir.Model) -> int:
    return node.version or model.opset_imports.get("", onnx.defs.onnx_opset_version())


def _reference_eval(node: ir.Node, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Run one node through onnx's reference evaluator; check dtypes against ONNX inference."""
    from onnx.reference import ReferenceEvaluator

    in_names = [f"i{k}" if a is not None else "" for k, a in enumerate(args)]
    out_names = [f"o{k}" if v is not None else "" for k, v in enumerate(node.outputs)]
    proto_node = ir.serde.serialize_node(node)
    del proto_node.input[:]
    proto_node.input.extend(in_names)
    del proto_node.output[:]
    proto_node.output.extend(out_names)
    inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip(in_names, args) if a is not None]
    outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in out_names if n]
    graph = onnx.helper.make_graph([proto_node], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        expected = {vi.name: vi.type.tensor_type.elem_type for vi in inferred.graph.output}
        results = ReferenceEvaluator(model).run(None, {n: a for n, a in zip(in_names, args) if n})
    except Exception as exc:  # the reference does not cover this op/opset: leave the node alone
        raise _NoFold(f"reference: {type(exc).__name__}") from None
    out = []
    for name, r in zip([n for n in out_names if n], results):
        if isinstance(r, (list, tuple)):  # a sequence (SequenceConstruct of constants): no tensor to store
            raise _NoFold("sequence result")
        r = np.asarray(r)
        want = expected.get(name, 0)
        if not want or onnx.helper.np_dtype_to_tensor_dtype(r.dtype) != want:
            raise _NoFold("reference result dtype differs from ONNX inference")
        out.append(r)
    return out


def _fold_equal_dims(node: ir.Node) -> list[np.ndarray] | None:
    """Equal of two shape values whose entries are provably equal (the same int or exporter
    symbol) or provably different (two different ints): Optimum's DeBERTa-v2 tests
    ``query.size(-2) != key.size(-2)`` on one symbol. Names onnx invented prove nothing."""
    a, b = (shape_entries(v) for v in node.inputs)
    if a is None or b is None or len(a[0]) != len(b[0]) or (a[1] != b[1] and len(a[0]) != 1):
        return None
    out = []
    for x, y in zip(a[0], b[0]):
        if invented_name(x) or invented_name(y):
            return None
        if x == y:
            out.append(True)
        elif isinstance(x, int) and isinstance(y, int):
            out.append(False)
        else:
            return None
    arr = np.array(out, dtype=bool)
    return [arr.reshape(()) if a[1] and b[1] else arr]


class ConstantFoldingPass(FusePass):
    """Replace nodes computable at optimization time by their results (see module docstring)."""

    name = "constant-folding"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is graph and self._try_fold(node, graph, model):
                    modified = True
        return ir.passes.PassResult(model, modified=modified)

    # -- one node ---------------------------------------------------------------------------

    def _try_fold(self, node: ir.Node, graph: ir.Graph, model: ir.Model) -> bool:
        if not _default_domain(node) or node.op_type in NONDETERMINISTIC:
            return False
        if node.op_type == "Constant":
            return self._lift_constant(node, graph)
        if any(isinstance(a, (ir.Attr,)) and a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in node.attributes.values()):
            return False
        if not node.outputs or all(not o.uses() and not o.is_graph_output() for o in node.outputs):
            return False  # dead: DCE's job, and folding it would only cost time
        if node.op_type == "Reshape" and self._fold_reshape_target(node, graph):
            return True
        try:
            lazy = _lazy_transpose(node)
            if lazy is not None:
                tensors = [lazy]
            else:
                results = self._evaluate(node, model)
                if results is None:
                    return False
                self._check_results(node, results)
                tensors = [ir.tensor(np.array(arr, order="C", copy=True)) for arr in results]
            for out, t in zip(node.outputs, tensors):
                if out.dtype is not None and out.dtype != t.dtype:
                    raise _NoFold(f"dtype mismatch {t.dtype} vs declared {out.dtype}")
        except _NoFold as why:
            self.stats[f"skipped: {str(why).split(':')[0]}"] += 1
            return False
        for out, t in zip(node.outputs, tensors):
            self._replace(out, t, graph)
        graph.remove(node, safe=True)
        self.stats[node.op_type] += 1
        return True

    def _fold_reshape_target(self, node: ir.Node, graph: ir.Graph) -> bool:
        """A computed Reshape target with one entry not constant becomes the constant with -1
        there (passes/_reshape_target.py)."""
        from onnx_fuse.passes._reshape_target import solved_target

        target = solved_target(node)
        if target is None:
            return False
        const = ir.node("Constant", [], attributes={"value": ir.tensor(target)})
        const.outputs[0].type = ir.TensorType(ir.DataType.INT64)
        const.outputs[0].shape = ir.Shape([len(target)])
        graph.insert_before(node, const)
        node.replace_input_with(1, const.outputs[0])   # no 0 entry: allowzero means nothing here
        self.stats["Reshape-target"] += 1
        return True

    def _lift_constant(self, node: ir.Node, graph: ir.Graph) -> bool:
        """A Constant node becomes an initializer of the same name in its graph (so CSE can merge
        duplicates); graph outputs stay as they are."""
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if out is None or out.is_graph_output() or not out.uses():
            return False
        tensor = constant_tensor(out)
        if tensor is None or not out.name:
            return False
        self._replace(out, tensor, graph)
        graph.remove(node, safe=True)
        self.stats["Constant-lifted"] += 1
        return True

    def _evaluate(self, node: ir.Node, model: ir.Model) -> list[np.ndarray] | None:
        if node.op_type in ("Shape", "Size"):
            folded = _fold_shape_op(node)
            if folded is not None:
                return folded
        out_dtype = node.outputs[0].dtype
        if node.op_type == "Equal" and len(node.inputs) == 2:
            folded = _fold_equal_dims(node)
            if folded is not None:
                return folded
        if (node.op_type in _SHAPE_VALUE_OPS and out_dtype is not None and out_dtype.is_integer()
                and any(constant_tensor(v) is None for v in node.inputs if v is not None)):
            # A slice/gather/concat of a partly symbolic shape that only picks static dims.
            found = shape_entries(node.outputs[0])
            if found is not None and all(isinstance(e, int) for e in found[0]):
                arr = np.array(found[0], dtype=out_dtype.numpy())
                return [arr.reshape(()) if found[1] else arr]
            return None
        if node.op_type == "CastLike" and len(node.inputs) == 2 and node.inputs[1] is not None:
            # The second input only supplies a dtype: its values need not be constant.
            src, like = constant_tensor(node.inputs[0]), node.inputs[1].dtype
            if src is None or like is None:
                return None
            return [_cast_to(_to_numpy(src), like)]
        tensors = [constant_tensor(v) if v is not None else None for v in node.inputs]
        if any(t is None for v, t in zip(node.inputs, tensors) if v is not None):
            return None  # some input is not constant
        if not node.inputs and node.op_type not in ("ConstantOfShape",):
            return None  # source ops (e.g. RandomX, EyeLike without input): not ours to fold
        self._check_declared_size(node)
        if node.op_type == "DequantizeLinear" and tensors[0].size > MAX_DEQUANTIZED_ELEMENTS:
            raise _NoFold("quantized weight")
        args = [_to_numpy(t) if t is not None else None for t in tensors]
        fn = _NUMPY_OPS.get(node.op_type)
        if node.op_type in _SAME_DTYPE and len({a.dtype for a in args if a is not None}) > 1:
            raise _NoFold("mixed dtypes")
        if fn is not None:
            while args and args[-1] is None:
                args.pop()
            if any(a is None for a in args):
                fn = None  # an omitted optional input in the middle: leave it to the reference
        if fn is not None:
            with np.errstate(all="ignore"):
                try:
                    out = fn(node, *args)
                except _NoFold:
                    raise
                except Exception as exc:  # malformed node; the runtime will report it, not us
                    raise _NoFold(f"numpy: {type(exc).__name__}") from None
            out = np.asarray(out)
            if node.op_type in _INT_CHECKED:
                _check_exact_ints(node, fn, args, out)
            return [out]
        first = next((a for a in args if a is not None), None)
        if node.op_type in _INT_UNCHECKED and any(
                o.dtype.is_integer() if o.dtype is not None
                else first is not None and np.issubdtype(first.dtype, np.integer) for o in node.outputs):
            raise _NoFold("integer arithmetic")
        if node.op_type in _EXPANDING and not self._static_outputs_small(node):
            raise _NoFold("output size unknown")
        if sum(a.size for a in args if a is not None) > MAX_OUTPUT_ELEMENTS:
            raise _NoFold("inputs too large")
        return _reference_eval(node, args, _opset(node, model))

    @staticmethod
    def _check_declared_size(node: ir.Node) -> None:
        """Refuse before computing anything when inference already says the result is too big."""
        limit = MAX_INPUT_BYTES if node.op_type in _SIZE_PRESERVING else MAX_OUTPUT_BYTES
        for out in node.outputs:
            if out.shape is None or out.dtype is None or not all(isinstance(d, int) for d in out.shape):
                continue
            n = int(np.prod([int(d) for d in out.shape], dtype=np.float64))
            if node.op_type not in _SIZE_PRESERVING and n > MAX_OUTPUT_ELEMENTS:
                raise _NoFold("output too large")
            if out.dtype.bitwidth and n * out.dtype.bitwidth // 8 > limit:
                raise _NoFold("output too large")

    @staticmethod
    def _static_outputs_small(node: ir.Node) -> bool:
        for out in node.outputs:
            if out.shape is None or not all(isinstance(d, int) for d in out.shape):
                return False
            _check_size(list(out.shape))
        return True

    @staticmethod
    def _check_results(node: ir.Node, results: list[np.ndarray]) -> None:
        if len(results) != len(node.outputs):
            raise _NoFold("output count")
        for out, arr in zip(node.outputs, results):
            if node.op_type in _SIZE_PRESERVING:
                if arr.nbytes > MAX_INPUT_BYTES:
                    raise _NoFold("output too large")
            elif arr.size > MAX_OUTPUT_ELEMENTS or arr.nbytes > MAX_OUTPUT_BYTES:
                raise _NoFold("output too large")
            try:
                dtype = ir.DataType.from_numpy(arr.dtype)
            except (TypeError, ValueError):
                raise _NoFold("result dtype") from None
            if dtype not in _FOLDABLE_DTYPES:
                raise _NoFold("result dtype")
            if out.dtype is not None and out.dtype != dtype:
                raise _NoFold(f"dtype mismatch {dtype} vs declared {out.dtype}")
            if out.shape is not None and all(isinstance(d, int) for d in out.shape):
                if tuple(int(d) for d in out.shape) != arr.shape:
                    raise _NoFold("shape mismatch with declared shape")

    def _replace(self, out: ir.Value, tensor: ir.TensorProtocol, graph: ir.Graph) -> None:
        name = out.name
        tensor.name = name
        # An initializer of the node's graph (its scope); a graph output: a Constant node in
        # place, which keeps the output name.
        if out.is_graph_output() or not name:
            const = ir.node("Constant", [], attributes={"value": tensor})
            new = const.outputs[0]
            graph.insert_before(out.producer(), const)
        else:
            new = ir.Value(name=None, const_value=tensor)
        new.type = ir.TensorType(tensor.dtype)
        new.shape = ir.Shape(list(tensor.shape))
        out.replace_all_uses_with(new, replace_graph_outputs=True)
        out.name = None
        new.name = name
        if new.producer() is None:
            graph.register_initializer(new)
