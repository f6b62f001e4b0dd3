"""Precision conversion: float32 weights and compute -> float16 or bfloat16, with fp32 islands.

TensorRT 11 builds strongly typed networks, so precision has to live in the ONNX graph. This pass
decides, per node, whether it computes in the low type (LOW) or stays in float32 (KEEP), then
converts weights and dtype attributes and inserts Cast nodes where the two meet. See
docs/precision.md for the policy, the fp32 op list and the measured tolerances.

Cases handled:
- compute-bound ops (MatMul, Gemm, Conv, attention ops) are LOW; ops in ``fp32_ops`` (norms, Softmax,
  Exp/Log/Pow/Erf/Sqrt, reductions, Cos/Sin, Range...) are KEEP; every other op follows its inputs:
  KEEP when one of its float inputs is float32 (so a decomposed LayerNorm stays fp32 as a whole);
- float values computed from integers (Cast(int->float) and what follows from it with constants:
  positions, masks, rotary angles) stay float32, and so does everything upstream of a shape sink
  (Cast to an integer type, Range, Resize scales/roi, OneHot depth);
- each op's type constraints (ONNX schemas; ORT's for com.microsoft) decide which slots may change
  type: a slot typed ``tensor(float)`` (Resize scales, SkipLayerNorm's mean) stays float32, and an
  op whose constraints exclude the low type, or of an unknown domain, is KEEP;
- ops with dtype attributes (Cast ``to``, ConstantOfShape ``value``, Random* / EyeLike /
  Bernoulli ``dtype``) are rewritten consistently with their outputs;
- initializers and Constant nodes are converted (clipped to the low type's finite range: +-65504,
  and for bfloat16 +-3.3895e38, since finfo(float32).min rounds to -inf there; clipping and flush to
  zero counted in stats), or duplicated when both precisions consume them;
- graph inputs/outputs keep float32 unless ``keep_io_types=False``; boundary Casts get deterministic
  names ``<value>__to_fp16`` (one per value and dtype); exact Cast pairs (low->fp32->low) and
  identity Casts left by the conversion are removed; the exception is PagedAttention's float32 KV
  pools (``kv_pool_{k,v}.N`` in, ``kv_pool_{k,v}_out.N`` out): state the op updates in place, they
  are exempt from ``keep_io_types`` and take the op's low type at the graph I/O, so no Cast is ever
  put between them and the op (passes/_kv_pools.py); pools of another type (fp8, from
  ``kv-cache-fp8``) are left as they are;
- nodes with subgraphs (If/Loop/Scan) are KEEP and their bodies are untouched; an outer value a body
  reads is cast back to float32 for it.
- a quantizer (QuantizeLinear, DynamicQuantizeLinear) sees the values the original computes: it and
  its cone stay float32 back to DequantizeLinear outputs, constants and the compute ops not fed by
  DequantizeLinears (passes/_quant_regions.py): a 16-bit input moves elements across a rounding
  boundary, a whole quantization step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.passes._consts import is_constant
from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._kv_pools import POOL_SLOTS, pool_io, retype_pools
from onnx_fuse.passes._op_signatures import PLUGIN_DOMAIN
from onnx_fuse.passes._op_signatures import TYPE_STR as _TYPE_STR
from onnx_fuse.passes._op_signatures import (fill_output_types, plugin_low_ops, signature,
                                             slot_allows)
from onnx_fuse.passes._quant_regions import quantizer_cones

F32 = ir.DataType.FLOAT
LOW_TYPES = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
_SUFFIX = {F32: "fp32", ir.DataType.FLOAT16: "fp16", ir.DataType.BFLOAT16: "bf16"}
FP16_MAX = float(np.finfo(np.float16).max)
# bfloat16's largest finite value: float32's max (HF's finfo.min masks) rounds past it to inf
BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
# Attention masks cast down at run time (mask_floor). ORT's Attention-23 reads a mask entry at its
# dtype's lowest value (or -inf) as -inf and gives 0 for a query row whose keys all have it; a
# float32 mask with a floor above that (lower.yaml's keep-masked-rows: -1e30) gives such a row
# uniform weights, but a boundary Cast to float16 overflows -1e30 to -inf. Entries between float32's
# lowest and this floor are mapped into (floor - 2048, floor] before the Cast, in order (_mask_floor),
# as keep-masked-rows does for float16 graphs (s + (-60000) in float16 absorbs |s| < 16); -inf and
# float32's lowest itself, -inf to ORT in either precision, are left to become -inf. keep-masked-rows reads it through the rule
# language's mask_floor(dtype) (optimizer/rewrite/_expr.py), so the two cannot drift apart.
FP16_MASK_FLOOR = -60000.0
# bfloat16 holds -1e30, but float32's lowest (HF's finfo.min masks) rounds to -inf, and
# MultiHeadAttention / GroupQueryAttention give NaN for a row of -inf biases where the float32 graph
# gives uniform weights: for bfloat16, every attention mask or bias is clipped to bfloat16's lowest
# (-inf stays -inf).
_MASK_SLOTS = {("", "Attention"): 3, ("com.microsoft", "MultiHeadAttention"): 5,
               ("com.microsoft", "Attention"): 5, ("com.microsoft", "GroupQueryAttention"): 10}

#: Ops computed in the low type whenever their type constraints allow it (where the speed is).
LOW_OPS = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention", "MultiHeadAttention",
    "GroupQueryAttention", "PackedAttention", "PackedMultiHeadAttention",
})

#: Ops kept in float32 by default: reductions and statistics that lose accuracy in 16 bits.
DEFAULT_FP32_OPS = frozenset({
    # normalizations (their mean/variance reductions)
    "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "GroupNormalization",
    "InstanceNormalization", "LpNormalization", "MeanVarianceNormalization",
    # softmax statistics
    "Softmax", "LogSoftmax",
    # transcendental functions and powers
    "Exp", "Log", "Pow", "Erf", "Sqrt", "Reciprocal", "Cos", "Sin", "Softplus",
    # reductions and scans
    "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceProd", "CumSum",
    # shape arithmetic
    "Range",
    # sampling: ORT's CPU provider has no float16 kernels for these; samples are cast instead
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
})

#: (op, input index) whose float value decides a shape or integer value: upstream stays float32.
_SHAPE_SINKS = {("Range", 0), ("Range", 1), ("Range", 2), ("Resize", 1), ("Resize", 2),
                ("Upsample", 1), ("OneHot", 1)}
#: Ops whose float output type is an attribute: op -> (attribute, default is float32 when absent).
_DTYPE_ATTRS = {"Cast": ("to", False), "RandomNormal": ("dtype", True),
                "RandomUniform": ("dtype", True), "RandomNormalLike": ("dtype", False),
                "RandomUniformLike": ("dtype", False), "EyeLike": ("dtype", False),
                "Bernoulli": ("dtype", False)}
#: Ops that read only the shape of their input: any dtype will do, no Cast needed.
_SHAPE_READERS = frozenset({"Shape", "Size"})
_INT_TYPES = frozenset(t for t in ir.DataType if t.is_integer())


# --- the pass ----------------------------------------------------------------------------------

class PrecisionConversionPass(FusePass):
    """Convert float32 compute and weights to ``precision`` ("fp16" or "bf16"), fp32 islands kept."""

    name = "precision"

    def __init__(self, precision: str = "fp16", *, keep_io_types: bool = True,
                 fp32_ops: Iterable[str] = DEFAULT_FP32_OPS) -> None:
        super().__init__()
        if precision not in LOW_TYPES:
            raise ValueError(f"precision must be one of {sorted(LOW_TYPES)}, not {precision!r}")
        self.precision = precision
        self.low = LOW_TYPES[precision]
        self.keep_io_types = keep_io_types
        self.fp32_ops = frozenset(fp32_ops)
        self.plugin_low_ops = plugin_low_ops(self.low)

    # Decisions ---------------------------------------------------------------------------------

    def _lowerable(self, node: ir.Node, opsets: dict[str, int]) -> tuple[set[int], set[int]] | None:
        """Float32 input/output slots that may take the low type, or None if the node must stay."""
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in node.attributes.values()):
            return None
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = node.version or opsets.get(domain)
        if version is None:
            return None
        sig = signature(domain, node.op_type, version)
        if sig is None:
            return None
        low = _TYPE_STR[self.low]
        # a sequence (optional) value keeps its element type: lowering a SequenceConstruct's tensor
        # inputs left its seq(tensor(float)) output a type ORT refuses (fuzz_s41 seq_shapes)
        if any(v is not None and v.type is not None and not isinstance(v.type, ir.TensorType)
               for v in (*node.inputs, *node.outputs)):
            return None
        ins, outs = set(), set()
        for i, v in enumerate(node.inputs):
            if v is not None and v.dtype is None:
                return None
            if v is not None and v.dtype == F32 and slot_allows(sig[0], i, low) and (
                    not _reads_shape_only(node, i)):
                ins.add(i)
        for i, v in enumerate(node.outputs):
            if v.dtype is None:
                return None
            if v.dtype == F32 and (slot_allows(sig[1], i, low) or node.op_type in _DTYPE_ATTRS):
                outs.add(i)  # a dtype attribute decides these outputs' type (rewritten below)
        return ins, outs

    def _is_compute(self, node: ir.Node) -> bool:
        """One of the ops lowered whenever their constraints allow (LOW_OPS, the plugin ops)."""
        return (node.op_type in self.plugin_low_ops if node.domain == PLUGIN_DOMAIN
                else node.op_type in LOW_OPS)

    def _decide(self, graph: ir.Graph, opsets: dict[str, int]) -> tuple[dict, set[ir.Node]]:
        """``slots``: node -> lowerable slots for LOW nodes; plus the set of KEEP nodes."""
        quantized = quantizer_cones(graph, self._is_compute, lambda v: v.dtype == F32)
        if kept := sum(map(self._is_compute, quantized)):
            self.stats["compute-kept-fp32-for-quantizers"] += kept
        forced = self._shape_upstream(graph) | quantized
        int_derived: set[ir.Value] = set()
        fp32_values: set[ir.Value] = set()  # float32 values that stay float32 (non-constant)
        for inp in graph.inputs:
            if inp.dtype == F32 and (self.keep_io_types or inp.is_initializer()):
                fp32_values.add(inp)
        slots: dict[ir.Node, tuple[set[int], set[int]]] = {}
        keep: set[ir.Node] = set()
        affine: set[ir.Node] = set()   # lowered scale / shift ops of decomposed LayerNorms
        for node in graph:
            if node.domain in ("", "ai.onnx") and (
                    node.op_type == "Constant" or node.op_type in _SHAPE_READERS):
                continue
            floats_out = [v for v in node.outputs if v.dtype == F32]
            floats_in = [v for i, v in enumerate(node.inputs)
                         if v is not None and v.dtype == F32 and not _reads_shape_only(node, i)]
            if self._is_int_derived(node, int_derived):
                int_derived.update(floats_out)
            if not floats_out and not floats_in:
                continue  # integer, bool and string ops are untouched
            lowerable = self._lowerable(node, opsets)
            is_keep = (lowerable is None or not (lowerable[0] or lowerable[1])
                       or node in forced or node.op_type in self.fp32_ops
                       or any(v in int_derived for v in floats_out)
                       or (node.op_type == "Cast" and not _casts_to_float(node))
                       or _is_upcast(node))
            always_low = self._is_compute(node)
            if not is_keep and not always_low:
                is_keep = any(v in fp32_values for v in floats_in)  # follow the inputs
                if is_keep and self._is_norm_affine(node, slots, affine):
                    # the scale / shift of a decomposed LayerNorm of a 16-bit value (_is_norm_affine):
                    # low; its result still votes float32, so what follows it stays as before
                    affine.add(node)
                    slots[node] = lowerable
                    fp32_values.update(floats_out)
                    continue
            if is_keep:
                keep.add(node)
                fp32_values.update(floats_out)
            else:
                slots[node] = lowerable
                fp32_values.update(v for i, v in enumerate(node.outputs)
                                   if v.dtype == F32 and i not in lowerable[1])
        return slots, keep

    def _is_norm_affine(self, node: ir.Node, slots: dict, affine: set[ir.Node]) -> bool:
        """``node`` scales or shifts a decomposed LayerNorm of a 16-bit value by a constant: Mul(n, c)
        with n = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps), then Add(., c). Such a norm's
        statistics and its normalized values are float32 (rule 5), but its input arrives low (a
        lowered producer, a Cast up from the low type, a low graph input), and the float32 island
        then reads it through a Cast up. ONNX Runtime (1.32) fuses that Cast with the norm: its
        LayerNormFusion takes the Cast's 16-bit input as X and the float32 constants as scale and
        bias, and the model is refused ("LayerNormalization bound to different types"; fuzz 23004 -
        23006, O1, where the norm is not fused by us). With the scale / shift low (a Cast down after
        the Div), ORT fuses X, scale and bias all in the low type, the form it expects from mixed
        precision training (Cast up, norm, Cast down, affine), and computes it in float32; elsewhere
        the normalized values are rounded to the low type once more before the affine."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Mul", "Add") or len(node.inputs) != 2:
            return False
        a, b = node.inputs
        if a is None or b is None or is_constant(a) == is_constant(b):
            return False
        p = (b if is_constant(a) else a).producer()
        if p is None:
            return False
        if node.op_type == "Add":
            return p in affine
        x = _layer_norm_input(p)
        if x is None:
            return False
        src = x.producer()
        if src is None:
            return x.is_graph_input() and not x.is_initializer() and not self.keep_io_types
        if src in slots:
            return x.index() in slots[src][1]
        return _is_upcast(src) and src.inputs[0].dtype == self.low

    @staticmethod
    def _is_int_derived(node: ir.Node, int_derived: set[ir.Value]) -> bool:
        """Float outputs computed from integer data (Cast(int->float)) and constants only."""
        if node.op_type in ("Cast", "CastLike") and node.inputs[0] is not None:
            return node.inputs[0].dtype in _INT_TYPES or node.inputs[0] in int_derived
        if node.op_type in _DTYPE_ATTRS or node.op_type in ("Shape", "Size", "ConstantOfShape"):
            return False
        seen = False
        for v in node.inputs:
            if v is None or v.dtype in _INT_TYPES or v.dtype == ir.DataType.BOOL:
                continue
            if v in int_derived:
                seen = True
            elif not is_constant(v):
                return False
        return seen

    @staticmethod
    def _shape_upstream(graph: ir.Graph) -> set[ir.Node]:
        """Nodes whose float32 results flow into a shape sink (Cast to int, Range, scales...)."""
        stack = []
        for node in graph:
            if node.op_type == "Cast" and node.inputs[0] is not None and not _casts_to_float(node):
                if _attr_int(node, "to") in {int(t) for t in _INT_TYPES}:
                    stack.append(node.inputs[0])
            for i, v in enumerate(node.inputs):
                if v is not None and (node.op_type, i) in _SHAPE_SINKS:
                    stack.append(v)
        found: set[ir.Node] = set()
        while stack:
            v = stack.pop()
            p = v.producer()
            if v.dtype != F32 or p is None or p in found or p.graph is not graph:
                continue
            found.add(p)
            stack.extend(x for x in p.inputs if x is not None)
        return found

    # Rewrite -----------------------------------------------------------------------------------

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        opsets = dict(model.opset_imports)
        opset = opsets.get("", opsets.get("ai.onnx", 0))
        if self.low == ir.DataType.BFLOAT16 and opset < 13:
            # Cast to bfloat16 is Cast-13's: below it no boundary Cast (nor a Cast's `to`) can say bfloat16 (ORT
            # refused the output: fuzz_s44's opset-11 graphs at --precision bf16), so the model stays float32
            self.stats_reason = f"bfloat16 needs opset >= 13 (Cast-13); the model is opset {opset}: left float32"
            return ir.passes.PassResult(model, modified=False)
        # bodies stay float32 (module docstring): said, since a model whose layers are all in an
        # If (an Optimum merged decoder that was not paged) would otherwise convert silently nothing
        inside = [n for n in ir.traversal.RecursiveGraphIterator(graph) if n.graph is not graph
                  and any(v.dtype == F32 for v in n.outputs)]
        self.stats_reason = (f"{len(inside)} float32 nodes inside If / Loop / Scan bodies stay float32 (the "
                             "conversion covers the main graph)") if inside else None
        if any(v.dtype is None for n in graph for v in n.outputs):
            _infer_types(model)
            if fill_output_types(graph, opsets):
                _infer_types(model)
        # the outputs that are float32 now: only these are the model's float32 signature to keep (a model
        # whose outputs are float16 already keeps them so, not cast to float32)
        f32_outputs = {i for i, v in enumerate(graph.outputs) if v.dtype == F32}
        slots, keep = self._decide(graph, opsets)
        self._names = {v.name for n in ir.traversal.RecursiveGraphIterator(graph) for v in n.outputs}
        self._names |= {v.name for v in graph.inputs} | set(graph.initializers)
        self._node_names = {n.name for n in ir.traversal.RecursiveGraphIterator(graph)}
        if not slots:
            return ir.passes.PassResult(model, modified=False)
        # Which dtype does each use of a float32 value require?
        wants: dict[ir.Value, dict[ir.DataType, list[tuple[ir.Node, int]]]] = {}
        for node in ir.traversal.RecursiveGraphIterator(graph):
            lowered_in = slots[node][0] if node in slots else set()
            for i, v in enumerate(node.inputs):
                if v is not None and v.dtype == F32 and not _reads_shape_only(node, i):
                    dtype = self.low if i in lowered_in else F32
                    wants.setdefault(v, {}).setdefault(dtype, []).append((node, i))
        # Low nodes: outputs and dtype attributes.
        for node, (_, outs) in slots.items():
            for i in outs:
                node.outputs[i].type = ir.TensorType(self.low)
            self._retype_attributes(node, outs)
            self.stats["nodes-lowered"] += 1
        self.stats["nodes-kept-fp32"] += len(keep)
        pool_outs = self._pools_in_op_type(slots)   # before the Casts: none goes on a pool
        if not self.keep_io_types:
            for inp in graph.inputs:
                if inp.dtype == F32 and not inp.is_initializer():
                    inp.type = ir.TensorType(self.low)
                    self.stats["io-converted"] += 1
        # Constants first (they are converted or duplicated, never cast at run time).
        for v, by_dtype in list(wants.items()):
            if is_constant(v) and not v.is_graph_input():
                self._convert_constant(graph, v, by_dtype)
                del wants[v]
        # Boundary casts for everything else (attention masks raised to a floor first).
        for v, by_dtype in wants.items():
            for dtype, uses in by_dtype.items():
                if dtype == v.dtype:
                    continue
                masks = [u for u in uses if _is_attention_mask(*u, dtype)]
                plain = [u for u in uses if u not in masks]
                for group, src in ((plain, v), (masks, masks and self._mask_floor(graph, v, dtype))):
                    if group:
                        cast = self._cast_after(graph, src, dtype)
                        for node, i in group:
                            node.replace_input_with(i, cast)
        self._fix_outputs(graph, pool_outs, f32_outputs)
        self.stats["io-converted"] += sum(graph.outputs[i].dtype != F32 for i in f32_outputs
                                          if graph.outputs[i] not in pool_outs)
        self._remove_redundant_casts(graph)
        return ir.passes.PassResult(model, modified=True)

    def _pools_in_op_type(self, slots: dict) -> set[ir.Value]:
        """PagedAttention's KV pools are state it updates in place, not user data: the float32
        graph input and output of each pool of a lowered node take the low type whatever
        ``keep_io_types`` says, so no boundary Cast is made for them (a Cast would convert the
        whole pool twice per step and break the TensorRT plugin's in-place aliasing;
        passes/_kv_pools.py). Pools of another type (fp8) stay as they are. Returns the pool
        graph outputs, which ``_fix_outputs`` leaves in the low type."""
        outs: set[ir.Value] = set()
        for node, (lowered_in, lowered_out) in slots.items():
            if node.domain != PLUGIN_DOMAIN or node.op_type != "PagedAttention":
                continue
            pools = pool_io(node)
            if pools is None or not all(
                    i in lowered_in and i - 2 in lowered_out and pool.dtype == F32
                    for (_, i), (_, pool, _) in zip(POOL_SLOTS, pools)):
                continue   # not the op's own graph I/O, or not float32 pools (fp8: untouched)
            retype_pools(pools, self.low)
            outs.update(out for _, _, out in pools)
            self.stats[f"kv-pools-{self.precision}"] += len(pools)
        return outs

    def _retype_attributes(self, node: ir.Node, outs: set[int]) -> None:
        if 0 not in outs:
            return
        if node.op_type in _DTYPE_ATTRS:
            attr, default_float = _DTYPE_ATTRS[node.op_type]
            present = attr in node.attributes
            if (present and _attr_int(node, attr) == int(F32)) or (not present and default_float):
                node.attributes[attr] = ir.AttrInt64(attr, int(self.low))
        elif node.op_type == "ConstantOfShape":
            a = node.attributes.get("value")
            if a is not None:
                node.attributes["value"] = ir.AttrTensor("value", self._convert_tensor(a.as_tensor()))
            else:  # default is float32 zero
                node.attributes["value"] = ir.AttrTensor(
                    "value", ir.tensor(np.zeros(1, self.low.numpy())))

    def _convert_tensor(self, t: ir.TensorProtocol, name: str | None = None) -> ir.Tensor:
        arr = t.numpy().astype(np.float32)
        limit = FP16_MAX if self.low == ir.DataType.FLOAT16 else BF16_MAX
        over = np.isfinite(arr) & (np.abs(arr) > limit)
        self.stats["values-clipped"] += int(over.sum())
        arr = np.where(over, np.clip(arr, -limit, limit), arr)
        out = arr.astype(np.float16 if self.low == ir.DataType.FLOAT16 else ml_dtypes.bfloat16)
        self.stats["values-flushed-to-zero"] += int(((arr != 0) & (out == 0)).sum())
        return ir.Tensor(out, name=name if name is not None else t.name)

    def _convert_constant(self, graph: ir.Graph, v: ir.Value, by_dtype: dict) -> None:
        if self.low not in by_dtype:
            return
        both = F32 in by_dtype or v.is_graph_output()
        producer = v.producer()
        if producer is None:  # an initializer
            new = self._convert_tensor(v.const_value)
            if both:
                target = ir.Value(name=self._fresh(f"{v.name}__{_SUFFIX[self.low]}"),
                                  shape=v.shape, type=ir.TensorType(self.low), const_value=new)
                new.name = target.name
                graph.register_initializer(target)
                for node, i in by_dtype[self.low]:
                    node.replace_input_with(i, target)
            else:
                v.const_value = new
                v.type = ir.TensorType(self.low)
            self.stats["initializers-converted"] += 1
            return
        tensor = self._convert_tensor(ir.convenience.get_const_tensor(v) or v.const_value)
        if both:
            out_name = self._fresh(f"{v.name}__{_SUFFIX[self.low]}")
            new_node = ir.node("Constant", [], attributes={"value": tensor}, name=self._fresh_node(
                f"{producer.name or v.name}__{_SUFFIX[self.low]}"), outputs=[ir.Value(name=out_name)])
            new_node.outputs[0].type = ir.TensorType(self.low)
            new_node.outputs[0].shape = v.shape
            graph.insert_after(producer, new_node)
            for node, i in by_dtype[self.low]:
                node.replace_input_with(i, new_node.outputs[0])
        else:
            for key in ("value_float", "value_floats"):
                producer.attributes.pop(key, None)
            producer.attributes["value"] = ir.AttrTensor("value", tensor)
            v.type = ir.TensorType(self.low)
            v.const_value = tensor
        self.stats["constants-converted"] += 1

    def _cast_after(self, graph: ir.Graph, v: ir.Value, dtype: ir.DataType) -> ir.Value:
        suffix = _SUFFIX[dtype]
        out = ir.Value(name=self._fresh(f"{v.name}__to_{suffix}"), shape=v.shape,
                       type=ir.TensorType(dtype))
        cast = ir.node("Cast", [v], attributes={"to": dtype}, outputs=[out],
                       name=self._fresh_node(f"precision/cast/{v.name}__to_{suffix}"))
        producer = v.producer()
        if producer is not None and producer.graph is graph:
            graph.insert_after(producer, cast)
        else:
            graph.insert_before(graph.node(0), cast) if len(graph) else graph.append(cast)
        self.stats["casts-inserted"] += 1
        return out

    def _mask_floor(self, graph: ir.Graph, v: ir.Value, dtype: ir.DataType) -> ir.Value:
        """Where(v <= keep, v, Max(v, v * c + floor)) in float32, after v's producer: float16 keeps
        float32's lowest and -inf and maps the rest below FP16_MASK_FLOOR into (F - 2048, F], in
        order (c = 2**-117: float32's lowest times c is -2048), so two masked levels a float16 step
        (32) apart after the map, i.e. >= 5.4e36 apart before it (finfo.min and finfo.min / 8, or
        keep-masked-rows' images of them), keep their order in a row with no kept key; bfloat16
        keeps -inf and raises the rest to its own lowest (c = 0)."""
        if dtype == ir.DataType.FLOAT16:
            keep, floor, c = float(np.finfo(np.float32).min), FP16_MASK_FLOOR, 2.0 ** -117
        else:
            keep, floor, c = -np.inf, -BF16_MAX, 0.0
        consts = []
        for tag, x in (("lowest", keep), ("floor", floor), ("squeeze", c))[:3 if c else 2]:
            cv = ir.Value(name=self._fresh(f"{v.name}__mask_{tag}"), shape=ir.Shape([1]), type=ir.TensorType(F32),
                          const_value=ir.tensor(np.array([x], np.float32)))
            graph.register_initializer(cv)
            consts.append(cv)
        lowest, lo = consts[:2]
        base = f"precision/mask-floor/{v.name}"

        def val(stem: str, elem: ir.DataType = F32) -> ir.Value:
            return ir.Value(name=self._fresh(f"{v.name}__{stem}"), shape=v.shape, type=ir.TensorType(elem))

        ninf, raised, out = val("ninf", ir.DataType.BOOL), val("raised"), val("floored")
        nodes = [ir.node("LessOrEqual", [v, lowest], outputs=[ninf], name=self._fresh_node(f"{base}/lowest"))]
        if c:   # v * c + F <= v for v >= F, so the Max gives v itself there
            scaled, shifted = val("scaled"), val("shifted")
            nodes += [ir.node("Mul", [v, consts[2]], outputs=[scaled], name=self._fresh_node(f"{base}/squeeze")),
                      ir.node("Add", [scaled, lo], outputs=[shifted], name=self._fresh_node(f"{base}/shift"))]
            lo = shifted
        nodes += [ir.node("Max", [v, lo], outputs=[raised], name=self._fresh_node(f"{base}/max")),
                  ir.node("Where", [ninf, v, raised], outputs=[out], name=self._fresh_node(f"{base}/where"))]
        producer = v.producer()
        if producer is not None and producer.graph is graph:
            graph.insert_after(producer, nodes)
        else:
            graph.insert_before(graph.node(0), nodes)
        self.stats["mask-floors"] += 1
        return out

    def _fix_outputs(self, graph: ir.Graph, pool_outs: set[ir.Value], f32_outputs: set[int]) -> None:
        """Graph outputs that were float32 (positions ``f32_outputs``) get float32 back (or the low type
        without keep_io); KV pool outputs keep the low type, and outputs of other dtypes stay as they were."""
        for idx, v in enumerate(list(graph.outputs)):
            if idx not in f32_outputs:
                continue
            want = F32 if self.keep_io_types else self.low
            if v.dtype not in (F32, self.low) or v.dtype == want or v in pool_outs:
                continue
            if not self.keep_io_types and (v.is_graph_input() or v.is_initializer()):
                continue
            if self.keep_io_types and v.dtype == self.low and v.is_graph_input():
                continue
            original = v.name
            v.name = self._fresh(f"{original}__{_SUFFIX[v.dtype]}")
            existing = [c.outputs[0] for c in v.consumers() if c.op_type == "Cast"
                        and c.graph is graph and _attr_int(c, "to") == int(want)
                        and not c.outputs[0].is_graph_output()]
            out = existing[0] if existing else self._cast_after(graph, v, want)
            out.name = original
            graph.outputs[idx] = out

    def _remove_redundant_casts(self, graph: ir.Graph) -> None:
        """Drop Casts that became identities and exact pairs low->fp32->low (fp32->low is lossy)."""
        for node in list(graph):
            if node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
                continue
            src, out = node.inputs[0], node.outputs[0]
            if src is None or out.is_graph_output():
                continue
            to = _attr_int(node, "to")
            replacement = None
            if src.dtype is not None and int(src.dtype) == to:
                replacement = src
            else:
                p = src.producer()
                if (p is not None and p.op_type == "Cast" and p.domain in ("", "ai.onnx")
                        and p.inputs[0] is not None and p.inputs[0].dtype == self.low
                        and _attr_int(p, "to") == int(F32) and to == int(self.low)):
                    replacement = p.inputs[0]
            if replacement is None:
                continue
            out.replace_all_uses_with(replacement)
            graph.remove(node, safe=True)
            self.stats["casts-removed"] += 1
            if p_unused := (src.producer() if not src.uses() else None):
                if p_unused.op_type == "Cast" and not any(o.is_graph_output() for o in p_unused.outputs):
                    graph.remove(p_unused, safe=True)
                    self.stats["casts-removed"] += 1

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def _fresh_node(self, base: str) -> str:
        name, k = base, 1
        while name in self._node_names:
            name, k = f"{base}_{k}", k + 1
        self._node_names.add(name)
        return name


def _infer_types(model: ir.Model) -> None:
    """Dtypes drive every decision: infer them where missing (best effort; untyped nodes stay).
    The pipeline's own inference pass: data propagation only when no 1-D value is long (a big 1-D
    weight would cost gigabytes of dim lists, passes/shape_inference.py), and it only adds facts."""
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    try:
        ShapeInferencePass()(model)
    except Exception:  # noqa: BLE001 - a node without a type is kept in float32 below
        pass


def _attr_int(node: ir.Node, name: str) -> int | None:
    a = node.attributes.get(name)
    return None if a is None else int(a.value)


def _casts_to_float(node: ir.Node) -> bool:
    return _attr_int(node, "to") in (int(F32), int(ir.DataType.FLOAT16), int(ir.DataType.BFLOAT16),
                                     int(ir.DataType.DOUBLE))


def _reads_shape_only(node: ir.Node, index: int) -> bool:
    """Shape/Size, and *Like ops given a dtype, read only their input's shape: any dtype will do."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in _SHAPE_READERS:
        return True
    return (node.op_type in ("RandomNormalLike", "RandomUniformLike", "EyeLike") and index == 0
            and "dtype" in node.attributes)


def _is_upcast(node: ir.Node) -> bool:
    """Cast(fp16|bf16 -> float32) is deliberate (ours from an earlier run, or the exporter's float32
    island in a 16-bit model, whichever 16-bit type it comes from): keep it. A float16 model's
    Cast(fp16 -> float32) before a decomposed LayerNorm became Cast(fp16 -> bf16) under bf16, the
    island's input rounded to 8 bits (fuzz seed 23002, graph 2281700563)."""
    return (node.op_type == "Cast" and node.inputs[0] is not None
            and node.inputs[0].dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
            and _attr_int(node, "to") == int(F32))


def _layer_norm_input(div: ir.Node) -> ir.Value | None:
    """x when ``div`` is Div(x - mean(x), Sqrt(mean((x - mean(x))^2) + eps)) (the square a Pow by 2
    or a Mul of the difference by itself, its Sub the Div's or a twin of it), else None."""
    def op(v: ir.Value | None, op_type: str) -> ir.Node | None:
        p = None if v is None else v.producer()
        return p if p is not None and p.op_type == op_type and p.domain in ("", "ai.onnx") else None

    def centered(v: ir.Value | None) -> ir.Value | None:   # x of x - ReduceMean(x)
        sub = op(v, "Sub")
        mean = sub and op(sub.inputs[1], "ReduceMean")
        return sub.inputs[0] if mean and mean.inputs[0] is sub.inputs[0] else None

    if div.op_type != "Div" or div.domain not in ("", "ai.onnx") or (x := centered(div.inputs[0])) is None:
        return None
    sqrt = op(div.inputs[1], "Sqrt")
    add = sqrt and op(sqrt.inputs[0], "Add")
    var = add and next((r for r in map(lambda v: op(v, "ReduceMean"), add.inputs) if r), None)
    sq = var and (op(var.inputs[0], "Pow") or op(var.inputs[0], "Mul"))
    if not sq:
        return None
    d = sq.inputs[0]
    if sq.op_type == "Pow":
        exponent = ir.convenience.get_const_tensor(sq.inputs[1]) if sq.inputs[1] is not None else None
        if exponent is None or exponent.numpy().size != 1 or float(exponent.numpy().reshape(())) != 2.0:
            return None
    elif sq.inputs[1] is not d:
        return None
    return x if centered(d) is x else None


def _is_attention_mask(node: ir.Node, index: int, low: ir.DataType) -> bool:
    """An attention op's additive mask / bias slot that mask_floor guards when cast to ``low``:
    Attention-23's attn_mask for float16, every attention op's for bfloat16 (a bool mask is never
    float32, so never cast)."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    if low == ir.DataType.FLOAT16:
        return domain == "" and node.op_type == "Attention" and index == 3
    return _MASK_SLOTS.get((domain, node.op_type)) == index


#: ``optimize(verify=True)`` tolerance (atol, rtol) on outputs of a converted model, elementwise
#: |got - ref| <= atol + rtol * |ref|; measured errors are in docs/precision.md.
VERIFY_TOLERANCE = {"fp16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}


def emulate_bf16(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a bf16 model that ONNX Runtime's CPU provider can run (it has no bf16 MatMul).

    Every bfloat16 value becomes float32 rounded through Cast(->bf16->fp32) (ORT runs those),
    bf16 initializers and dtype attributes become float32 (exactly). Arithmetic is float32, as
    bf16 kernels accumulate in float32: what is modelled is the rounding of every stored tensor.
    Types come from the model's value_info (onnx-ir writes them), so contrib ops are covered.
    """
    from onnx import TensorProto, helper, numpy_helper

    bf16, f32 = TensorProto.BFLOAT16, TensorProto.FLOAT
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}
    for init in g.initializer:
        if init.data_type == bf16:
            init.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(init).astype(np.float32), init.name))
    nodes = []
    for node in g.node:
        if node.op_type == "Cast" and node.domain in ("", "ai.onnx") and node.input and types.get(node.input[0]) == bf16 \
                and any(a.name == "to" and a.i == f32 for a in node.attribute):
            # Cast(bf16 -> float32) would read a float32 value here, an identity that ORT 1.32's graph
            # optimizations dropped while a node still read its output ("... is not a graph input,
            # initializer, or output of a previous node": fuzz 23005, graph 1332654939, --verify too):
            # a round trip through bfloat16 instead, exact on a value rounded to it already
            rounded = f"{node.output[0]}__emulated_round"
            nodes.append(helper.make_node("Cast", [node.input[0]], [rounded], to=bf16))
            node.input[0] = rounded
        nodes.append(node)
        for i, out in enumerate(node.output):
            if types.get(out) != bf16:
                continue
            for a in node.attribute:
                if a.name in ("to", "dtype") and a.i == bf16:
                    a.i = f32
                elif a.name == "value" and a.t.data_type == bf16:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32)))
            raw = f"{out}__emulated"
            node.output[i] = raw
            nodes += [helper.make_node("Cast", [raw], [raw + "_bf16"], to=bf16),
                      helper.make_node("Cast", [raw + "_bf16"], [out], to=f32)]
    del g.node[:]
    g.node.extend(nodes)
    for v in [*g.value_info, *g.input, *g.output]:
        if v.type.tensor_type.elem_type == bf16:
            v.type.tensor_type.elem_type = f32
    return m


def precision_pass(precision: str | None, *, keep_io_types: bool = True,
                   fp32_ops: Sequence[str] | None = None) -> list[ir.passes.PassBase]:
    """The passes for ``--precision``: none for None/"fp32", else one PrecisionConversionPass."""
    if precision in (None, "fp32"):
        return []
    return [PrecisionConversionPass(precision, keep_io_types=keep_io_types,
                                    fp32_ops=DEFAULT_FP32_OPS if fp32_ops is None else fp32_ops)]
