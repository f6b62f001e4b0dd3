"""Inference BatchNormalization next to a Conv, ConvTranspose, Gemm or MatMul with constant weights becomes
new weights.

BN(y) = s * y + t per channel, with s = scale / sqrt(var + eps) and t = bias - mean * s; when y is a
linear op's output whose channel c is that op's output column c, s scales the weight's column c and
t joins the bias, so the BN disappears (exact up to float rounding). Cases handled:
- Conv (any group, dilation, pads; with or without bias): weight [M, C/g, k...] times s per M, bias
  b * s + t;
- ConvTranspose (any group, strides, pads, output_padding; with or without bias): weight [C, M/g, k...]
  times s per output channel g_c * M/g + j (g_c the group of input channel c), bias b * s + t; positions
  no input reaches (output_padding) hold the bias, and BN(b) = b * s + t there too;
- Gemm (transB either way, C absent or of any broadcastable shape, any beta): B's output column times
  s, C * s + t / beta (C = t and beta = 1 when there is no C or beta is 0);
- MatMul with a constant right operand: its last axis times s; a following Add of a constant bias that
  varies along that axis only becomes b * s + t, else an Add of t is inserted after the MatMul.
Between the op and the BN there may be Transposes, Reshapes and Flattens (LeViT: Linear on [B, N, C],
then BatchNorm1d over the tokens flattened to [B * N, C]): the BN's channel axis 1 is followed back
through them (a Reshape or Flatten keeps a last axis of C in place when its input and output both end
in a static C).

When nothing before the BN takes it, it folds forward into a Conv that is its output's one reader
(BN -> Conv, the Conv reading it as X): Conv(s * x + t) = Conv_{W * s}(x) + Conv_W(t), s scaling W's
input-channel axis (W[m, c'] belongs to input channel (m // (M/g)) * (C/g) + c'). Conv_W(t) is the
constant b' = b + sum over c', k of W[m, c', k] * t[c] only when every tap of every output position reads
the input itself, i.e. the Conv has no padding (pads all 0 or auto_pad VALID; SAME and nonzero pads are
refused): the original pads BN's output with zeros, so a padded tap adds nothing, while the folded bias
still holds W * t for that tap, so border outputs would be off by the sum of W * t over their padded
taps (zeros padded to x are not BN's zeros: BN(0) = t).

When neither folds, a BN between a Transpose that brings a last axis of C to axis 1 and the inverse
Transpose (BatchNorm1d over a [B, T, C] activation, written x.transpose(1, 2) both ways: PatchTST's norms
after its residual Adds) becomes Mul(x, s) and Add(., t) on the untransposed x, s and t of shape [C]
along its last axis: the same per-channel arithmetic without the two copies (3 nodes -> 2).

Refused: training_mode 1 (or spatial 0 before opset 9), non-constant BN parameters or weights, a BN
input or intermediate value (forward: the BN's output) that another node (but Shape or Size) or the
graph output reads, weights of dtypes NumPy cannot compute (bfloat16, float8), BNs inside subgraphs
(If / Loop bodies). Arithmetic runs in float64 and is cast back to the weight's dtype (float16
included). Folded weights are new initializers, so a weight shared with another op keeps its value
there; the new tensors are computed lazily (``ir.LazyTensor``), when the model is saved.

Runs at level >= 2 for every target, before the rules (a Conv-BN pair is then one Conv to them).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, is_default_op
from onnx_fuse.passes._new_values import fresh_name, graph_names
from onnx_fuse.passes.constant_folding import constant_tensor

_NUMPY_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16})


def _only_reader(value: ir.Value, node: ir.Node) -> bool:
    """``node`` is the one consumer of ``value``'s data, which is no graph output.

    Shape and Size read only the shape, which folding keeps (TorchScript's reshape_as reads the
    Linear's output for its Shape)."""
    if value.is_graph_output():
        return False
    readers = [u.node for u in value.uses()]
    data = [n for n in readers if not is_default_op(n, "Shape", "Size")]
    return len(data) == 1 and data[0] is node


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _static_last(value: ir.Value) -> int | None:
    if value.shape is None or len(value.shape) == 0:
        return None
    d = value.shape[-1]
    return d if isinstance(d, int) else None


def _bn_affine(bn: ir.Node):
    """(s, t) in float64 for an inference BN with constant parameters, else None."""
    if len(bn.inputs) != 5 or any(v is None for v in bn.inputs):
        return None
    attrs = bn.attributes
    if attrs.get_int("training_mode", 0) != 0 or attrs.get_int("spatial", 1) != 1:
        return None
    if any(list(o.uses()) or o.is_graph_output() for o in bn.outputs[1:]):
        return None  # running mean / var read: a training graph
    tensors = [constant_tensor(v) for v in bn.inputs[1:]]
    if any(t is None or t.dtype not in _NUMPY_FLOATS for t in tensors):
        return None
    scale, bias, mean, var = (np.asarray(t.numpy(), np.float64).reshape(-1) for t in tensors)
    if not scale.size == bias.size == mean.size == var.size:
        return None
    s = scale / np.sqrt(var + attrs.get_float("epsilon", 1e-5))
    return s, bias - mean * s


def _trace_channel(x: ir.Value, bn: ir.Node):
    """Follow BN's channel axis 1 back through single-reader Transposes / Reshapes / Flattens.

    Returns (producer node, its output, the channel axis there) or None."""
    value, reader, axis = x, bn, 1
    while True:
        if not _only_reader(value, reader):
            return None
        node = value.producer()
        if is_default_op(node, "Transpose"):
            rank = _rank(value)
            perm = node.attributes.get_ints("perm", None)
            if perm is None:
                if rank is None:
                    return None
                perm = list(reversed(range(rank)))
            axis = list(perm)[axis]
        elif is_default_op(node, "Reshape", "Flatten"):
            src, rank = node.inputs[0], _rank(value)
            c = _static_last(value)
            # a flat index mod C is the last-axis index on both sides when both end in C
            if rank is None or axis != rank - 1 or c is None or _static_last(src) != c:
                return None
            axis = len(src.shape) - 1
        else:
            return (node, value, axis) if node is not None else None
        value, reader = node.inputs[0], node
        if value is None:
            return None


def _lazy(fn, dtype: ir.DataType, shape) -> ir.LazyTensor:
    return ir.LazyTensor(lambda: ir.tensor(fn()), dtype=dtype, shape=ir.Shape(list(shape)))


def _channel_shape(s: np.ndarray, rank: int, axis: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = s.size
    return s.reshape(shape)


def _group(node: ir.Node) -> int:
    return node.attributes.get_int("group", 1)


def _channel_index(rows: int, cols: int, group: int) -> np.ndarray:
    """[rows, cols]: the channel on the far side of a grouped weight's entry (r, c): row r is in group
    r // (rows / g), whose channels there are g_r * cols + c."""
    return (np.arange(rows) // (rows // group))[:, None] * cols + np.arange(cols)[None, :]


def _unpadded(conv: ir.Node) -> bool:
    """Every tap of the Conv reads its input: no pads (auto_pad VALID, or NOTSET with pads all 0)."""
    auto_pad = conv.attributes.get_string("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return True
    return auto_pad == "NOTSET" and not any(conv.attributes.get_ints("pads", []) or [])


def _optional_bias(node: ir.Node, dtype: ir.DataType) -> tuple[bool, ir.TensorProtocol | None]:
    """Conv's / Gemm's optional third input: (True, None) when absent, (True, tensor) when a constant of
    the weight's dtype, (False, None) otherwise (a computed bias cannot take the shift)."""
    b_in = node.inputs[2] if len(node.inputs) > 2 else None
    if b_in is None:
        return True, None
    b = constant_tensor(b_in)
    return (b is not None and b.dtype == dtype), b


def _set_weight_and_bias(node: ir.Node, w: ir.Value, b: ir.Value) -> None:
    """Conv's / Gemm's inputs 1 and 2 replaced (input 2 added when the node had none)."""
    node.replace_input_with(1, w)
    if len(node.inputs) < 3:
        node.resize_inputs(3)
    node.replace_input_with(2, b)


class FoldBatchNormPass(FusePass):
    """Inference BatchNormalization folded into the Conv / Gemm / MatMul before it (module docstring)."""

    name = "fold-batch-norm"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph  # the new weights are initializers: main graph only
        for node in list(graph):
            if is_default_op(node, "BatchNormalization"):
                modified |= self._fold(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _fresh(self, graph: ir.Graph, base: str) -> str:
        return fresh_name(base, graph_names(graph))

    def _const(self, graph: ir.Graph, base: str, fn, dtype: ir.DataType, shape) -> ir.Value:
        value = ir.Value(name=self._fresh(graph, base), type=ir.TensorType(dtype), shape=ir.Shape(list(shape)),
                         const_value=_lazy(fn, dtype, shape))
        graph.register_initializer(value)
        return value

    def _fold(self, graph: ir.Graph, bn: ir.Node) -> bool:
        affine = _bn_affine(bn)
        if affine is None:
            return False
        s, t = affine
        traced = _trace_channel(bn.inputs[0], bn)
        if traced is None or not self._fold_back(graph, bn, s, t, traced):
            return self._into_next_conv(graph, bn, s, t) or self._untransposed(graph, bn, s, t)
        return True

    def _untransposed(self, graph, bn, s, t) -> bool:
        """Transpose(x, p) -> BN -> Transpose(., p^-1), p taking x's last axis to 1: Mul(x, s) + t (docstring)."""
        first, y = bn.inputs[0].producer(), bn.outputs[0]
        readers = [u.node for u in y.uses()]
        if not is_default_op(first, "Transpose") or len(readers) != 1 or y.is_graph_output():
            return False
        second, x = readers[0], first.inputs[0]
        rank = _rank(x)
        if (not is_default_op(second, "Transpose") or rank is None or rank < 2 or bn.inputs[0].is_graph_output()
                or len(list(bn.inputs[0].uses())) != 1):  # a Shape of it too would lose its producer
            return False
        p, q = first.attributes.get_ints("perm", None), second.attributes.get_ints("perm", None)
        if p is None or q is None or len(p) != rank or len(q) != rank or p[1] != rank - 1:
            return False
        if [p[i] for i in q] != list(range(rank)) or _static_last(x) != s.size:
            return False
        if x.dtype is None or x.dtype not in _NUMPY_FLOATS:
            return False
        np_dt, stem = x.dtype.numpy(), bn.name or y.name or "bn_affine"
        scale = self._const(graph, f"{stem}_bn_s", lambda: s.astype(np_dt), x.dtype, [s.size])
        shift = self._const(graph, f"{stem}_bn_t", lambda: t.astype(np_dt), x.dtype, [s.size])
        out = second.outputs[0]
        scaled = ir.Value(name=self._fresh(graph, f"{stem}_scaled"), type=out.type, shape=out.shape)
        mul = ir.Node("", "Mul", [x, scale], outputs=[scaled], name=f"{stem}_bn_scale")
        shifted = ir.Value(name=self._fresh(graph, f"{stem}_shifted"), type=out.type, shape=out.shape)
        add = ir.Node("", "Add", [scaled, shift], outputs=[shifted], name=f"{stem}_bn_shift")
        graph.insert_after(second, [mul, add])
        name, was_output = out.name, out.is_graph_output()
        out.replace_all_uses_with(shifted, replace_graph_outputs=True)
        if was_output:  # the model's output keeps its name
            out.name, shifted.name = None, name
        graph.remove([second, bn, first], safe=True)
        self.stats["BatchNormalization<>Transpose"] += 1
        return True

    def _fold_back(self, graph, bn, s, t, traced) -> bool:
        node, out, axis = traced
        stem = node.name or out.name or "bn_fold"
        done = False
        if is_default_op(node, "Conv") and axis == 1:
            done = self._conv(graph, node, s, t, stem)
        elif is_default_op(node, "Gemm") and axis == 1:
            done = self._gemm(graph, node, s, t, stem)
        elif is_default_op(node, "ConvTranspose") and axis == 1:
            done = self._conv_transpose(graph, node, s, t, stem)
        elif is_default_op(node, "MatMul", "Add") and _rank(out) is not None and axis == _rank(out) - 1:
            done = self._matmul(graph, node, s, t, stem)
        return self._remove(graph, bn, node) if done else False

    def _remove(self, graph: ir.Graph, bn: ir.Node, folded_into: ir.Node, forward: bool = False) -> bool:
        x, y = bn.inputs[0], bn.outputs[0]
        name, was_output = y.name, y.is_graph_output()
        y.replace_all_uses_with(x, replace_graph_outputs=True)
        graph.remove(bn, safe=True)
        if was_output:  # the model's output keeps its name
            y.name, x.name = None, name
        self.stats[f"BatchNormalization{'->' if forward else '<-'}{folded_into.op_type}"] += 1
        return True

    def _weight(self, w: ir.Value | None, channels: int, axis: int):
        tensor = constant_tensor(w)
        if tensor is None or tensor.dtype not in _NUMPY_FLOATS or len(tensor.shape) < 2:
            return None
        dim = tensor.shape[axis]
        return tensor if isinstance(dim, int) and dim == channels else None

    def _conv(self, graph, conv, s, t, stem) -> bool:
        w = self._weight(conv.inputs[1] if len(conv.inputs) > 1 else None, s.size, 0)
        if w is None:
            return False
        ok, b = _optional_bias(conv, w.dtype)
        if not ok:
            return False
        return self._scale_output_channels(graph, conv, w, b, _channel_shape(s, len(w.shape), 0), s, t, stem)

    def _scale_output_channels(self, graph, node, w, b, w_scale, s, t, stem) -> bool:
        """The op's weight times ``w_scale`` (s laid out along the weight's output-channel entries) and
        its bias b * s + t: BN(op(x)) for a Conv / ConvTranspose whose output channel c is scaled by s[c]."""
        np_dt = w.dtype.numpy()
        new_w = self._const(graph, f"{stem}_bn_w", lambda: (w.numpy().astype(np.float64) * w_scale).astype(np_dt),
                            w.dtype, w.shape)

        def bias():
            old = np.zeros(s.size) if b is None else b.numpy().astype(np.float64).reshape(-1)
            return (old * s + t).astype(np_dt)

        _set_weight_and_bias(node, new_w, self._const(graph, f"{stem}_bn_b", bias, w.dtype, [s.size]))
        return True

    def _conv_transpose(self, graph, node, s, t, stem) -> bool:
        w = self._weight(node.inputs[1] if len(node.inputs) > 1 else None, s.size // _group(node), 1)
        if w is None or len(w.shape) < 3 or s.size % _group(node) or w.shape[0] % _group(node):
            return False
        ok, b = _optional_bias(node, w.dtype)
        if not ok:
            return False
        # W[c, j] feeds output channel (c's group) * M/g + j
        index = _channel_index(w.shape[0], w.shape[1], _group(node))
        w_scale = s[index].reshape(index.shape + (1,) * (len(w.shape) - 2))
        return self._scale_output_channels(graph, node, w, b, w_scale, s, t, stem)

    def _into_next_conv(self, graph, bn, s, t) -> bool:
        """BN -> Conv without padding (module docstring): s into W's input channels, Conv_W(t) into the bias."""
        y = bn.outputs[0]
        conv = next((u.node for u in y.uses() if not is_default_op(u.node, "Shape", "Size")), None)
        if not is_default_op(conv, "Conv") or not _only_reader(y, conv) or conv.inputs[0] is not y or not _unpadded(conv):
            return False
        group = _group(conv)
        w = self._weight(conv.inputs[1] if len(conv.inputs) > 1 else None, s.size // group, 1)
        if w is None or len(w.shape) < 3 or s.size % group or w.shape[0] % group:
            return False
        ok, b = _optional_bias(conv, w.dtype)
        if not ok:
            return False
        # W[m, c'] reads input channel (m's group) * C/g + c'
        index = _channel_index(w.shape[0], w.shape[1], group)
        np_dt, rank = w.dtype.numpy(), len(w.shape)
        per_tap = index.shape + (1,) * (rank - 2)
        stem = conv.name or y.name or "bn_fold"
        new_w = self._const(graph, f"{stem}_bn_w", lambda: (w.numpy().astype(np.float64)
                            * s[index].reshape(per_tap)).astype(np_dt), w.dtype, w.shape)

        def bias():  # b + Conv_W(t): every tap reads the input, so each output sums W * t over all of them
            old = np.zeros(w.shape[0]) if b is None else b.numpy().astype(np.float64).reshape(-1)
            shift = (w.numpy().astype(np.float64) * t[index].reshape(per_tap)).sum(axis=tuple(range(1, rank)))
            return (old + shift).astype(np_dt)

        _set_weight_and_bias(conv, new_w, self._const(graph, f"{stem}_bn_b", bias, w.dtype, [w.shape[0]]))
        return self._remove(graph, bn, conv, forward=True)

    def _gemm(self, graph, gemm, s, t, stem) -> bool:
        attrs = gemm.attributes
        trans_b = attrs.get_int("transB", 0)
        w = self._weight(gemm.inputs[1], s.size, 0 if trans_b else 1)
        if w is None or len(w.shape) != 2:
            return False
        ok, c = _optional_bias(gemm, w.dtype)
        if not ok:
            return False
        beta = attrs.get_float("beta", 1.0)
        np_dt = w.dtype.numpy()
        new_w = self._const(graph, f"{stem}_bn_w", lambda: (w.numpy().astype(np.float64)
                            * (s[:, None] if trans_b else s[None, :])).astype(np_dt), w.dtype, w.shape)
        if c is None or beta == 0.0:
            c_shape, c_fn = [s.size], lambda: t.astype(np_dt)
            gemm.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
        else:
            c_shape = list(np.broadcast_shapes(tuple(c.shape), (s.size,)))
            c_fn = lambda: (c.numpy().astype(np.float64) * s + t / beta).astype(np_dt)  # noqa: E731
        _set_weight_and_bias(gemm, new_w, self._const(graph, f"{stem}_bn_c", c_fn, w.dtype, c_shape))
        return True

    def _matmul(self, graph, node, s, t, stem) -> bool:
        add = None
        if node.op_type == "Add":  # MatMul -> Add(bias): the bias takes the shift
            add = node
            for i in (0, 1):
                mm, b_in = add.inputs[i].producer() if add.inputs[i] is not None else None, add.inputs[1 - i]
                b = constant_tensor(b_in)
                if is_default_op(mm, "MatMul") and b is not None and _only_reader(add.inputs[i], add):
                    break
            else:
                return False
            # the bias varies along the last axis only, so s can scale it per channel
            if b.dtype not in _NUMPY_FLOATS or any(d != 1 for d in list(b.shape)[:-1]) or (
                    len(b.shape) and b.shape[-1] not in (1, s.size)):
                return False
            if len(b.shape) > _rank(add.outputs[0]):
                return False
            node = mm
        w = self._weight(node.inputs[1], s.size, -1)
        if w is None or constant_tensor(node.inputs[0]) is not None:
            return False
        if add is not None and b.dtype != w.dtype:
            return False
        np_dt = w.dtype.numpy()
        new_w = self._const(graph, f"{stem}_bn_w", lambda: (w.numpy().astype(np.float64) * s).astype(np_dt),
                            w.dtype, w.shape)
        node.replace_input_with(1, new_w)
        if add is not None:
            shape = list(b.shape)[:-1] + [s.size]
            new_b = self._const(graph, f"{stem}_bn_b", lambda: (
                b.numpy().astype(np.float64) * s + t).reshape(shape).astype(np_dt), w.dtype, shape)
            add.replace_input_with(1 - i, new_b)
            return True
        mm_out = node.outputs[0]
        new_t = self._const(graph, f"{stem}_bn_b", lambda: t.astype(np_dt), w.dtype, [s.size])
        shifted = ir.Value(name=self._fresh(graph, f"{mm_out.name or stem}_bn"), type=mm_out.type,
                           shape=mm_out.shape)
        mm_out.replace_all_uses_with(shifted)
        graph.insert_after(node, [ir.Node("", "Add", [mm_out, new_t], outputs=[shifted], name=f"{stem}_bn_shift")])
        return True
