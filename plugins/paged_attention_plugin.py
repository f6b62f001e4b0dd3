"""TensorRT plugin ``onnx_fuse::PagedAttention`` (decode and chunked prefill over a block-paged
KV pool).

The ONNX node (docs/ops.md, reference ``onnx_fuse.reference.paged_attention_op``) maps to this
plugin through TensorRT's ONNX parser: op type ``PagedAttention``, ``plugin_namespace =
"onnx_fuse"``, ``plugin_version = "1"``, and ``aot`` (1: the ahead-of-time kernel, 0: JIT).

    inputs   query [B, Sq, Hq*D], key [B, Sq, Hkv*D], value [B, Sq, Hkv*D] (the Sq new tokens)
             key_cache, value_cache [num_blocks, block_size, Hkv, D]      fp16 | bf16 (all same)
             or float8e4m3fn (an fp8 pool: decode only, JIT only, D in {64, 96, 128, 256})
             block_tables int32 [B, max_blocks], seq_lens int32 [B] (cache length incl. the new
             tokens); optional k_scale, v_scale float32 [Hkv] (fp8 pools: value = e4m3 *
             scale; required there, unused with 16-bit pools); optional sinks float32 [Hq]
             (attention-sink logits, GPT-OSS: one more score per softmax row, value zero)
    outputs  output [B, Sq, Hq*D]; key_cache_out, value_cache_out: the caches, updated in place
             (TensorRT aliases them to inputs 3 and 4; new token i is written at position
             seq_lens[b] - Sq + i and attends to positions 0 .. seq_lens[b] - Sq + i)
    attrs    num_heads, kv_num_heads (divides num_heads, group <= 16; 0 = num_heads), scale
             (0.0 = 1/sqrt(D)), window (0 = none; W > 0: positions p - W < j <= p only); the
             builder writes the defaults and ``aot`` (prepare_node)
    limits   Sq = 1 (decode): D in {64, 80, 96, 128, 256}, sm_80+. Sq > 1 (chunked prefill, one
             Sq for the whole batch): D in {64, 128}, block_size a power of two, compute
             capability 9.x (the paged prefill kernel is sm_90a machine code), JIT path only.
             Hidden sizes static.

tensorrt.plugin takes a fixed number of tensor inputs (no optional ones), so the plugin always
has ten: :func:`prepare_node` feeds a constant 1.0 [Hkv] to both scale inputs where a node has
none, and a constant -inf [Hq] to ``sinks`` where it has none (a sink of -inf adds nothing:
exp(-inf) = 0 in every softmax denominator).
An fp8 pool is FLOAT8E4M3FN in ONNX and ``DataType.FP8`` in TensorRT (e4m3, exponent bias 7, the
OCP float8_e4m3fn the kernels store). Not UINT8: TensorRT's plugin tensors cannot be kUINT8
(PluginTensorDesc), kUINT8 "cannot be used to represent quantized floating-point values", and
the ONNX parser takes UINT8 only for network I/O touched by Cast / Identity / Equal /
QuantizeLinear (plugins/data/trt_onnx_ops.yaml), while FLOAT8E4M3FN is an ordinary type to it.

Two paths, chosen per node by ``aot``:

* JIT (:func:`impl`, ``aot = 0``): ``KernelLib.append_kv`` (``append_kv_fp8`` for an fp8 pool)
  writes the Sq new tokens into the pool, then ``KernelLib.paged_decode`` /
  ``paged_decode_fp8`` (Sq == 1, split-K as ``launch_plan.plan_paged_decode`` plans it) or
  ``KernelLib.paged_prefill`` (Sq > 1, 16-bit pools, causal bottom-right over the pool, uniform
  batch) runs on TensorRT's stream. Needs Python and the kernel library at run time. The split-K
  partials live in a device buffer this module keeps per stream (:class:`Workspace`), because
  tensorrt.plugin's Python API has no workspace: its ``impl`` gets the tensors, the attributes
  and the stream, nothing else, and the plugin class it builds declares no workspace size.
* AOT (:func:`aot_impl`, ``aot = 1``): one embedded PTX kernel, grid (Hkv, 1, B): each CTA
  appends its (sequence, kv head) token, then decodes over the whole context in one split. It is
  **decode-only**: TensorRT's AOT launcher runs exactly one kernel, and the append must finish
  before other CTAs read the new tokens, which for Sq > 1 needs the second (prefill) launch. So
  :func:`prepare_node` writes ``aot = 1`` only where the query's length is statically 1, and
  ``aot = 0`` otherwise; :func:`check_node` refuses an explicit ``aot = 1`` on a node whose query
  length is not statically 1, and :func:`aot_impl` refuses one at build time. The AOT kernel
  has no fp8 pool form either (it re-expands paged_attention.cu's 16-bit decode body; an fp8
  adapter would need an fp8 decode body entry there), so fp8 nodes always get ``aot = 0``.

Functions, kept separate as tensorrt.plugin expects: :func:`register` (shape/type rule and the
in-place aliasing), :func:`autotune`, :func:`impl`, :func:`aot_impl`; :func:`run_jit` is the JIT
launch sequence on plain buffers (what :func:`impl` calls; the GPU test runs it with torch
tensors). TensorRT is imported only by :func:`register_plugin`.
"""

from __future__ import annotations

import functools
import math
import re
import struct
import sys
import threading
from typing import List, Tuple, Union  # noqa: F401 - used in string annotations

import onnx

from onnx_fuse.plugin_ids import PLUGIN_NAMESPACE, PLUGIN_VERSIONS

from onnx_fuse.plugins._launch_trace import TracedBuffer, slot, trace
from onnx_fuse.plugins.fused_attention_plugin import (FLOAT_TYPES, HEAD_DIMS, _tname,
                                                      check_attributes, check_plugin_identity,
                                                      heads_view, register_plugin_module)
from onnx_fuse.plugins.fused_attention_plugin import _View as _BaseView
from onnx_fuse.plugins.kernel_lib import KernelLib

__all__ = ["PLUGIN_NAME", "PLUGIN_NAMESPACE", "PLUGIN_VERSION", "PLUGIN_ID", "ATTRIBUTES",
           "check_node", "prepare_node", "register_plugin", "register", "impl", "aot_impl",
           "autotune", "run_jit", "query_len", "PREFILL_HEAD_DIMS", "FP8_HEAD_DIMS",
           "Workspace", "adapter_source", "decode_variants", "is_fp8_node"]

PLUGIN_NAME = "PagedAttention"
PLUGIN_VERSION = PLUGIN_VERSIONS[PLUGIN_NAME]
PLUGIN_ID = f"{PLUGIN_NAMESPACE}::{PLUGIN_NAME}"
INPUTS = ("query", "key", "value", "key_cache", "value_cache", "block_tables", "seq_lens",
          "k_scale", "v_scale", "sinks")
REQUIRED_INPUTS = 7   # the scales and sinks are optional in ONNX; the TensorRT plugin always has ten
SINKS = 9             # input index of the attention-sink logits
OUTPUTS = ("output", "key_cache_out", "value_cache_out")
ATTRIBUTES = {
    "num_heads": (onnx.AttributeProto.INT, "query heads Hq"),
    "kv_num_heads": (onnx.AttributeProto.INT, "key/value heads Hkv; divides Hq, Hq/Hkv <= 16"),
    "scale": (onnx.AttributeProto.FLOAT, "softmax scale; 0.0 means 1/sqrt(D)"),
    "window": (onnx.AttributeProto.INT, "sliding window W: the token at position p sees cache "
               "positions p - W < j <= p; 0 = none"),
}
ATTRIBUTE_DEFAULTS = {"kv_num_heads": 0, "scale": 0.0, "window": 0}   # docs/ops.md; written by prepare_node
MAX_GROUP = 16
# Head sizes of the paged prefill kernel (Sq > 1): onnx_fuse_paged_prefill_fwd in
# kernels/fused_attention.cu; paged_attention.yaml kernel.prefill_over_prefix.head_dims.
PREFILL_HEAD_DIMS = (64, 128)
# Head sizes of the fp8 (e4m3) pool decode kernel (launch_plan.PA8_HEAD_DIMS: no D = 80).
FP8_HEAD_DIMS = (64, 96, 128, 256)
FP8 = onnx.TensorProto.FLOAT8E4M3FN
_TILE = 64  # the JIT path's split granularity (a multiple of every variant's token tile)

# One launch per plugin call (the TensorRT AOT path runs exactly one kernel), grid (Hkv, 1, B):
# each CTA first writes the new token of its (sequence, kv head) into the pool, then decodes
# over the whole context in one split (no workspace, no reduction kernel). Generated by
# re-expanding the kernel file's own OF_PA_KERNELS(...) lines with the macro redefined.
AOT_ADAPTER_HEADER = r"""
#include "paged_attention.cu"
#define OF_PA_TRT(DTN, T, D, W, ST, BULK)                                                      \
  extern "C" __global__ void __launch_bounds__(32 * W) onnx_fuse_pa_trt_##DTN##_d##D##_w##W##s##ST( \
      const T* q, const T* k_new, const T* v_new, const T* k_pool_in, const T* v_pool_in,      \
      const int* block_tables, const int* seq_lens, const float* k_scale,                      \
      const float* v_scale, const float* sinks, int Hq, int Hkv, int block_size, int max_blocks, \
      int part_tokens,                                                                         \
      int scale_log2_bits, int window, T* out, T* k_pool, T* v_pool) {                         \
    (void)k_scale; (void)v_scale; /* 16-bit pools only: the scale inputs are ones */           \
    const int hkv = blockIdx.x, b = blockIdx.z;                                                \
    const int pos = seq_lens[b] - 1;                                                           \
    const int lb = pos >= 0 ? pos / block_size : -1;                                           \
    if (lb >= 0 && lb < max_blocks) {                                                          \
      const int blk = block_tables[(size_t)b * max_blocks + lb];                               \
      const long long dst = (((long long)blk * block_size + pos % block_size) * Hkv + hkv) * D; \
      const long long src = ((long long)b * Hkv + hkv) * D;                                    \
      for (int d = threadIdx.x; d < D; d += blockDim.x) {                                      \
        k_pool[dst + d] = k_new[src + d];                                                      \
        v_pool[dst + d] = v_new[src + d];                                                      \
      }                                                                                        \
    }                                                                                          \
    __syncthreads();                                                                           \
    const long long row = (long long)Hq * D;                                                   \
    onnx_fuse::pa_decode_body<T, D, W, ST, BULK>(q, row, k_pool, v_pool, block_tables,         \
                                                 seq_lens,                                     \
                                           out, row, nullptr, nullptr, Hq, Hkv, block_size,    \
                                           max_blocks, part_tokens,                            \
                                           __int_as_float(scale_log2_bits), window, sinks);    \
  }
"""


def decode_variants() -> list[tuple[int, int]]:
    """(warps, pipeline stages) of each non-bulk decode variant in paged_attention.cu's
    OF_PA_VARIANTS list. Bulk-copy variants (sm_90+) are left out: the AOT PTX targets
    compute_80 and must run on every supported GPU."""
    from onnx_fuse.plugins.build_kernels import KERNEL_DIR

    text = (KERNEL_DIR / "paged_attention.cu").read_text()
    found = re.findall(r"X\(DTN,\s*T,\s*D,\s*(\d+),\s*(\d+),\s*(\d+)\s*,", text)
    return sorted({(int(w), int(st)) for w, st, bulk in found if bulk == "0"}) or [(4, 3)]


def adapter_source() -> str:
    """The adapter for the current plugins/kernels/paged_attention.cu: one fused append+decode
    entry per (dtype, head size) it instantiates and per decode variant."""
    from onnx_fuse.plugins.build_kernels import KERNEL_DIR

    text = (KERNEL_DIR / "paged_attention.cu").read_text()
    types = re.findall(r"^OF_PA_KERNELS\((\w+),\s*([\w:]+),\s*(\d+)\)\s*$", text, flags=re.MULTILINE)
    lines = [f"OF_PA_TRT({dt}, {t}, {d}, {w}, {st}, 0)"
             for dt, t, d in types for w, st in decode_variants()]
    return AOT_ADAPTER_HEADER + "\n".join(lines) + "\n"


trtp = None
trt = None
_registered = False


# --------------------------------------------------------------------------- static contract

def check_node(node: onnx.NodeProto, info) -> list[str]:
    """Why TensorRT could not build this PagedAttention node with our plugin ([] if it can)."""
    issues = check_plugin_identity(node, PLUGIN_VERSION, PLUGIN_NAMESPACE)
    more, a = check_attributes(node, ATTRIBUTES, ATTRIBUTE_DEFAULTS)
    issues += more
    inputs = list(node.input)
    n_in = len(inputs)
    # 7 inputs, 9 (the fp8 scales), or 10 (sinks; the scale slots may be empty for 16-bit pools)
    scales_ok = all(inputs[REQUIRED_INPUTS:SINKS]) or (n_in == len(INPUTS) and not any(inputs[REQUIRED_INPUTS:SINKS]))
    shaped = (n_in in (REQUIRED_INPUTS, SINKS, len(INPUTS)) and all(inputs[:REQUIRED_INPUTS]) and scales_ok
              and (n_in < len(INPUTS) or bool(inputs[SINKS])))
    if not shaped:
        issues.append(f"needs {REQUIRED_INPUTS} inputs ({', '.join(INPUTS[:REQUIRED_INPUTS])}), "
                      f"{SINKS} (with {' and '.join(INPUTS[REQUIRED_INPUTS:SINKS])}) or {len(INPUTS)} "
                      f"(with {INPUTS[SINKS]}; the scales both given or both empty); got {n_in}")
    outputs = [o for o in node.output if o]
    if len(outputs) != len(OUTPUTS):
        issues.append(f"needs {len(OUTPUTS)} outputs ({', '.join(OUTPUTS)}); got {len(outputs)}")
    hq, hkv = a.get("num_heads"), a.get("kv_num_heads")
    if hkv == 0:
        hkv = hq
    if isinstance(hq, int) and isinstance(hkv, int):
        if hq <= 0 or hkv <= 0 or hq % hkv:
            issues.append(f"kv_num_heads={hkv} must be positive and divide num_heads={hq}")
        elif hq // hkv > MAX_GROUP:
            issues.append(f"GQA group {hq // hkv} > {MAX_GROUP} is not supported by the kernel")
    if "scale" in a and (a["scale"] < 0 or not math.isfinite(a["scale"])):
        issues.append(f"scale must be >= 0 and finite (got {a['scale']})")
    if isinstance(a.get("window"), int) and a["window"] < 0:
        issues.append(f"window must be >= 0, 0 = none (got {a['window']})")
    if shaped:
        fp8 = is_fp8_node(node, info)
        issues += _type_issues(node, info, fp8)
        q_shape = info.shape(inputs[0])
        d = None
        if q_shape is not None:
            if len(q_shape) != 3:
                issues.append(f"query must be rank 3 [B, Sq, Hq*D] (got rank {len(q_shape)})")
            elif q_shape[2] is None:
                issues.append("query's last dim (heads*D) must be static")
            elif isinstance(hq, int) and hq > 0 and (
                    q_shape[2] % hq or q_shape[2] // hq not in HEAD_DIMS):
                issues.append(f"head size {q_shape[2] / hq:g} not supported (supported: "
                              f"{', '.join(map(str, HEAD_DIMS))})")
            elif isinstance(hq, int) and hq > 0:
                d = q_shape[2] // hq
        sq = query_len(node, info)
        if sq != 1:
            issues += _prefill_issues(node, info, d, sq)
        if fp8:
            issues += _fp8_issues(node, d, sq)
        for name, n in zip(INPUTS[1:3], inputs[1:3]):
            shape = info.shape(n)
            if shape is not None and len(shape) != 3:
                issues.append(f"{name} must be rank 3 [B, Sq, Hkv*D] (got rank {len(shape)})")
            elif (shape is not None and d is not None and isinstance(hkv, int)
                  and shape[2] not in (None, hkv * d)):
                issues.append(f"{name} has hidden size {shape[2]}, kv_num_heads * D is {hkv * d}")
            elif (shape is not None and isinstance(sq, int) and isinstance(shape[1], int)
                  and shape[1] != sq):
                issues.append(f"{name} has {shape[1]} tokens per sequence, query has {sq}")
        for name, n in zip(INPUTS[3:5], inputs[3:5]):
            shape = info.shape(n)
            if shape is not None and len(shape) != 4:
                issues.append(f"{name} must be rank 4 [num_blocks, block_size, Hkv, D]")
            elif shape is not None and isinstance(hkv, int) and shape[2] not in (None, hkv):
                issues.append(f"{name} has {shape[2]} kv heads, kv_num_heads is {hkv}")
        bt = info.shape(inputs[5])
        if bt is not None and len(bt) != 2:
            issues.append("block_tables must be rank 2 [B, max_blocks]")
        for name, n in zip(INPUTS[REQUIRED_INPUTS:SINKS], inputs[REQUIRED_INPUTS:SINKS]):
            shape = info.shape(n) if n else None
            if shape is not None and (len(shape) != 1 or (
                    isinstance(hkv, int) and shape[0] not in (None, hkv))):
                issues.append(f"{name} must be float32 [kv_num_heads] = [{hkv}] (got shape "
                              f"{list(shape)})")
        shape = info.shape(inputs[SINKS]) if n_in > SINKS else None
        if shape is not None and (len(shape) != 1 or (isinstance(hq, int) and shape[0] not in (None, hq))):
            issues.append(f"sinks must be float32 [num_heads] = [{hq}] (got shape {list(shape)})")
    return list(dict.fromkeys(issues))


def is_fp8_node(node: onnx.NodeProto, info) -> bool:
    """Whether the node's key cache is typed float8e4m3fn (an fp8 pool)."""
    return (info is not None and len(node.input) > 3 and bool(node.input[3])
            and info.dtype(node.input[3]) == FP8)


def _type_issues(node: onnx.NodeProto, info, fp8: bool) -> list[str]:
    inputs = list(node.input)
    issues = []
    types = [info.dtype(n) for n in inputs[:5]]
    fp8 = fp8 or FP8 in types[3:5]   # either cache in fp8 makes it an fp8 pool
    for name, t in zip(INPUTS[:5], types):
        if t is not None and t not in FLOAT_TYPES and not (fp8 and name.endswith("_cache")):
            kinds = ("float16 or bfloat16" if not name.endswith("_cache") else
                     "float16 or bfloat16 (like the query) or float8e4m3fn")
            issues.append(f"{name} must be {kinds} (got {_tname(t)})")
    if fp8:
        if len({t for t in types[:3] if t is not None}) > 1:
            issues.append("query, key and value must share one dtype")
        if types[4] not in (None, FP8) or types[3] not in (None, FP8):
            issues.append("key_cache and value_cache must both be float8e4m3fn (an fp8 pool) "
                          "or both the query's type")
        if len(inputs) < SINKS or not all(inputs[REQUIRED_INPUTS:SINKS]):
            issues.append("fp8 (float8e4m3fn) caches need the k_scale and v_scale inputs "
                          "(float32 [kv_num_heads], value = e4m3 * scale)")
    elif len({t for t in types if t is not None}) > 1:
        issues.append("query, key, value and the caches must share one dtype")
    for name, n in zip(INPUTS[5:7], inputs[5:7]):
        t = info.dtype(n)
        if t is not None and t != onnx.TensorProto.INT32:
            issues.append(f"{name} must be int32 (got {_tname(t)})")
    for name, n in zip(INPUTS[REQUIRED_INPUTS:], inputs[REQUIRED_INPUTS:]):
        t = info.dtype(n) if n else None
        if t is not None and t != onnx.TensorProto.FLOAT:
            issues.append(f"{name} must be float32 (got {_tname(t)})")
    return issues


def _fp8_issues(node: onnx.NodeProto, d: int | None, sq: int | None) -> list[str]:
    """What rules out an fp8 (e4m3) pool: decode only, the fp8 kernel's head sizes, JIT only."""
    issues = []
    if sq != 1:
        tokens = f"{sq} query tokens per sequence" if sq is not None else \
            "a query length not fixed at 1"
        issues.append(f"fp8 (float8e4m3fn) caches with {tokens}: there is no fp8 prefill "
                      "kernel, fp8 pools are decode-only (a static query length of 1)")
    if d is not None and d not in FP8_HEAD_DIMS:
        issues.append(f"head size {d} with fp8 (float8e4m3fn) caches: the fp8 decode kernel "
                      f"takes head sizes {', '.join(map(str, FP8_HEAD_DIMS))}")
    if _aot_attr(node) == 1:
        issues.append("aot=1 with fp8 (float8e4m3fn) caches: the AOT kernel has no fp8 pool "
                      "form; use aot=0 (JIT: append_kv_fp8 + paged_decode_fp8)")
    return issues


def query_len(node: onnx.NodeProto, info) -> int | None:
    """The node's tokens per sequence (query dim 1) where the graph fixes it, else None."""
    shape = info.shape(node.input[0]) if info is not None and node.input else None
    return shape[1] if shape is not None and len(shape) == 3 and isinstance(shape[1], int) \
        else None


def _aot_attr(node: onnx.NodeProto) -> int | None:
    a = next((a for a in node.attribute if a.name == "aot"), None)
    return int(onnx.helper.get_attribute_value(a)) if a is not None else None


def _prefill_issues(node: onnx.NodeProto, info, d: int | None, sq: int | None) -> list[str]:
    """What rules out Sq > 1 (chunked prefill) for a node whose query length is not fixed at 1
    (``d``: the head size where known)."""
    tokens = (f"{sq} query tokens per sequence" if sq is not None
              else "a query length not fixed at 1")
    fix = "" if sq is not None else " (a static query length of 1 builds a decode-only engine)"
    issues = []
    if d is not None and d not in PREFILL_HEAD_DIMS:
        issues.append(f"head size {d} with {tokens}: the paged prefill kernel (Sq > 1) takes "
                      f"head sizes {' and '.join(map(str, PREFILL_HEAD_DIMS))}{fix}")
    pool = info.shape(node.input[3]) if len(node.input) > 3 else None
    bs = pool[1] if pool is not None and len(pool) == 4 else None
    if isinstance(bs, int) and (bs <= 0 or bs & (bs - 1)):
        issues.append(f"block_size {bs} with {tokens}: the paged prefill kernel (Sq > 1) needs a "
                      f"power-of-two block size{fix}")
    if _aot_attr(node) == 1:
        issues.append(f"aot=1 with {tokens}: the AOT kernel is decode-only (Sq = 1); use aot=0 "
                      "(JIT: append_kv + paged prefill) or a static query length of 1")
    return issues


def prepare_node(node: onnx.NodeProto, fresh_name, info=None) -> list[onnx.NodeProto]:
    """Write the contract defaults and ``aot`` onto ``node`` (in place) and fill its optional
    inputs (tensorrt.plugin has none, so the plugin always takes ten): where the scales are
    absent, a Constant of ones [Hkv] wired to both (16-bit pools never read them); where sinks
    are absent, a Constant of -inf [Hq] (a sink that adds nothing). Returns the new Constants.

    ``aot`` (unless set): 1 (the embedded decode kernel, no Python at run time) where ``info``
    (a ``trt_support.GraphInfo``) shows a query length of exactly 1 and a 16-bit pool, else 0
    (the JIT path, which also runs Sq > 1 and fp8 pools)."""
    have = {a.name for a in node.attribute}
    for name, value in ATTRIBUTE_DEFAULTS.items():
        if name not in have:
            node.attribute.append(onnx.helper.make_attribute(name, value))
    if "aot" not in have:
        aot = 1 if query_len(node, info) == 1 and not is_fp8_node(node, info) else 0
        node.attribute.append(onnx.helper.make_attribute("aot", aot))
    if len(node.input) not in (REQUIRED_INPUTS, SINKS, len(INPUTS)):
        return []   # check_node reports the input count
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    hq = int(attrs.get("num_heads") or 0)
    hkv = int(attrs.get("kv_num_heads") or 0) or hq
    if hkv <= 0:
        return []   # check_node reports the attributes
    made = []

    def constant(suffix: str, values: list[float]) -> str:
        base = f"{node.name or node.output[0]}_{suffix}"
        name = fresh_name(base) if fresh_name is not None else base
        made.append(onnx.helper.make_node("Constant", [], [name], name=name, value=onnx.helper.make_tensor(
            name, onnx.TensorProto.FLOAT, [len(values)], values)))
        return name

    ins = list(node.input) + [""] * (len(INPUTS) - len(node.input))
    if not any(ins[REQUIRED_INPUTS:SINKS]):
        ins[REQUIRED_INPUTS] = ins[REQUIRED_INPUTS + 1] = constant("unit_kv_scale", [1.0] * hkv)
    if not ins[SINKS]:
        ins[SINKS] = constant("no_sinks", [-math.inf] * hq)
    del node.input[:]
    node.input.extend(ins)
    return made


# --------------------------------------------------------------------------- tensorrt.plugin

def register(query: "trtp.TensorDesc", key: "trtp.TensorDesc", value: "trtp.TensorDesc",
             key_cache: "trtp.TensorDesc", value_cache: "trtp.TensorDesc",
             block_tables: "trtp.TensorDesc", seq_lens: "trtp.TensorDesc",
             k_scale: "trtp.TensorDesc", v_scale: "trtp.TensorDesc", sinks: "trtp.TensorDesc",
             num_heads: int, kv_num_heads: int, scale: float, window: int
             ) -> "Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc]":
    """Output like the query; the two cache outputs alias the cache inputs (in-place update,
    in the caches' type: fp16 / bf16, or FP8 for an e4m3 pool)."""
    return query.like(), key_cache.aliased(), value_cache.aliased()


def autotune(query: "trtp.TensorDesc", key: "trtp.TensorDesc", value: "trtp.TensorDesc",
             key_cache: "trtp.TensorDesc", value_cache: "trtp.TensorDesc",
             block_tables: "trtp.TensorDesc", seq_lens: "trtp.TensorDesc",
             k_scale: "trtp.TensorDesc", v_scale: "trtp.TensorDesc", sinks: "trtp.TensorDesc",
             outputs: "Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc]"
             ) -> "List[trtp.AutoTuneCombination]":
    """fp16 or bf16 for the query, new K/V and output; the caches in that type, or FP8 (e4m3)
    where the network gives FP8 caches; int32 tables, float32 scales and sinks; linear layouts. One tactic
    per AOT decode variant (warps, stages) for 16-bit pools; the fp8 pool runs the JIT path,
    which plans its own variant, so one tactic."""
    fp8 = _is_fp8(key_cache.dtype)
    return [trtp.AutoTuneCombination(_io_types(fp8), "LINEAR",
                                      [1] if fp8 else list(range(1, len(decode_variants()) + 1)))]


def _io_types(fp8: bool) -> str:
    """tensorrt.plugin's io_types string, inputs (INPUTS order) then outputs: dependent '|'
    choices, position 0 fp16 and position 1 bf16 everywhere."""
    f, c = "FP16|BF16", ("FP8|FP8" if fp8 else "FP16|BF16")
    return ", ".join([f] * 3 + [c] * 2 + ["INT32|INT32"] * 2 + ["FP32|FP32"] * 3 + [f, c, c])


def _is_fp8(dtype) -> bool:
    fp8 = getattr(getattr(trt, "DataType", None), "FP8", None)
    return fp8 is not None and dtype == fp8


def _dims(hidden: int, heads: int) -> int:
    if heads <= 0 or hidden % heads or hidden // heads not in HEAD_DIMS:
        raise ValueError(f"hidden {hidden} / {heads} heads is not a supported head size "
                         f"{HEAD_DIMS}")
    return hidden // heads


def _scale(scale: float, d: int) -> float:
    return 1.0 / math.sqrt(d) if scale == 0.0 else float(scale)


def _dtype_tag(dtype) -> str:
    if dtype == trt.float16:
        return "f16"
    if dtype == trt.bfloat16:
        return "bf16"
    raise ValueError(f"PagedAttention supports float16 and bfloat16, not {dtype}")


def impl(query: "trtp.Tensor", key: "trtp.Tensor", value: "trtp.Tensor",
         key_cache: "trtp.Tensor", value_cache: "trtp.Tensor", block_tables: "trtp.Tensor",
         seq_lens: "trtp.Tensor", k_scale: "trtp.Tensor", v_scale: "trtp.Tensor",
         sinks: "trtp.Tensor", num_heads: int, kv_num_heads: int, scale: float, window: int,
         outputs: "Tuple[trtp.Tensor, trtp.Tensor, trtp.Tensor]", stream: int) -> None:
    """JIT path: append the new K/V in place, then decode (Sq == 1, split-K) or prefill over the
    pool (Sq > 1), on TensorRT's stream; an FP8 pool quantizes on append and dequantizes in
    the decode kernel with the scale inputs. The sinks (-inf where the node has none) go to every
    attention kernel."""
    from onnx_fuse.plugins.fused_attention_plugin import kernel_lib

    dt = "float16" if _dtype_tag(query.dtype) == "f16" else "bfloat16"
    fp8 = _is_fp8(key_cache.dtype)
    run_jit(kernel_lib(), query, key, value, key_cache, value_cache, block_tables, seq_lens,
            outputs[0], k_scale=k_scale if fp8 else None, v_scale=v_scale if fp8 else None,
            num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale, dtype=dt,
            stream=stream, window=window, sinks=sinks)


_MODULE_WORKSPACE = object()   # run_jit's default: the module's WORKSPACE (defined below)


class _View(_BaseView):
    """A strided buffer view; ``dim()`` as KernelLib.paged_prefill reads it."""

    def dim(self) -> int:
        return len(self.shape)


def run_jit(lib, query, key, value, key_cache, value_cache, block_tables, seq_lens, output, *,
            num_heads: int, kv_num_heads: int, scale: float, dtype: str, stream: int,
            k_scale=None, v_scale=None, workspace=_MODULE_WORKSPACE, device=None,
            num_splits: int | None = None, window: int = 0, sinks=None):
    """The JIT launch sequence on buffers with ``data_ptr`` (int), ``shape`` and ``strides``
    (element strides), as ``trtp.Tensor`` has them: ``lib.append_kv`` then ``lib.paged_decode``
    (Sq == 1) or ``lib.paged_prefill`` (Sq > 1, causal bottom-right, every sequence with Sq new
    tokens). With ``k_scale``/``v_scale`` (float32 [Hkv]) the pools are fp8 (e4m3 bytes):
    ``lib.append_kv_fp8`` then ``lib.paged_decode_fp8``, decode only.

    The decode is split-K as ``launch_plan.plan_paged_decode`` plans it for ``device`` (a
    ``launch_plan.DeviceInfo``; default the current GPU, as :func:`impl` plans) and the block
    table's capacity, ``num_splits`` overriding; the partials go to ``workspace`` (a
    :class:`Workspace`; default the module's, which :func:`impl` uses); with ``workspace=None``,
    or where it cannot allocate, the decode runs in one split. ``dtype``: "float16" or
    "bfloat16" (the query's); ``lib``: a ``KernelLib``; ``window``: the node's sliding window
    (0 = none), and ``sinks`` (float32 [Hq] attention-sink logits or None), passed to every
    attention kernel. Returns the decode plan (None for Sq > 1).

    This runs on every enqueue. For a KernelLib the sequence is traced once per layout (the
    buffers' shapes and strides, the attributes, device and split count: :func:`_launch`) and
    each call only reads the eleven pointers and replays the traced ctypes calls with them
    (``_launch_trace``); any other ``lib`` object gets the KernelLib method calls themselves."""
    workspace = WORKSPACE if workspace is _MODULE_WORKSPACE else workspace
    bufs = (query, key, value, key_cache, value_cache, block_tables, seq_lens, output, k_scale,
            v_scale, sinks)
    if not isinstance(lib, KernelLib):
        return _sequence(lib, *bufs, num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale,
                         dtype=dtype, stream=stream, device=device, num_splits=num_splits, window=window,
                         get_workspace=lambda n: (None if workspace is None
                                                  else workspace.get(n, stream)))
    layout = tuple([None if t is None else (tuple(t.shape), tuple(t.strides)) for t in bufs])
    device = device or _device_info()
    launch = _launch(lib, layout, num_heads, kv_num_heads, scale, dtype, device, num_splits, window)
    plan = launch.result
    ws = None
    if plan is not None and plan.workspace_bytes:   # split-K partials (none for cluster-reduce plans)
        ws = workspace.get(plan.workspace_bytes, stream) if workspace is not None else None
        if ws is None:   # no workspace: one split, as planned for it
            launch = _launch(lib, layout, num_heads, kv_num_heads, scale, dtype, device, 1, window)
            plan = launch.result
    launch([None if t is None else int(t.data_ptr) for t in bufs] + [ws, int(stream)])
    return plan


_WORKSPACE_SLOT, _STREAM_SLOT = 11, 12   # after the eleven buffers of run_jit's order


@functools.lru_cache(maxsize=1024)
def _launch(lib, layout, num_heads, kv_num_heads, scale, dtype, device, num_splits, window=0):
    """run_jit's launch sequence for one layout, traced (``_launch_trace.trace``) with sentinel
    pointers; its ``result`` is the decode plan (None for a prefill). Errors (unsupported head
    size, fp8 prefill, bad strides) are raised here, before anything is launched, and are not
    cached."""
    bufs = [None if lay is None else TracedBuffer(i, *lay) for i, lay in enumerate(layout)]
    ws = slot(_WORKSPACE_SLOT)
    return trace(lib, lambda traced: _sequence(
        traced, *bufs, num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale, dtype=dtype,
        stream=slot(_STREAM_SLOT), device=device, num_splits=num_splits, window=window,
        get_workspace=lambda n: ws), _STREAM_SLOT + 1)


def _sequence(lib, query, key, value, key_cache, value_cache, block_tables, seq_lens, output,
              k_scale, v_scale, sinks, *, num_heads, kv_num_heads, scale, dtype, stream, device,
              num_splits, get_workspace, window=0):
    """run_jit's launch sequence as KernelLib method calls on buffer views;
    ``get_workspace(nbytes)`` gives the split-K partials' device pointer or None."""
    b, sq, hidden = (int(x) for x in query.shape)
    d = _dims(hidden, num_heads)
    kv_num_heads = kv_num_heads or num_heads
    bs = int(key_cache.shape[1])
    fp8 = k_scale is not None
    if fp8 and (v_scale is None or sq != 1 or d not in FP8_HEAD_DIMS):  # check_node's rules
        raise ValueError(f"PagedAttention over an fp8 pool is decode-only (1 query token, got "
                         f"{sq}) at head sizes {', '.join(map(str, FP8_HEAD_DIMS))} (got {d}), "
                         "with both k_scale and v_scale")
    if sq > 1 and (d not in PREFILL_HEAD_DIMS or bs & (bs - 1)):
        raise ValueError(f"PagedAttention with {sq} query tokens needs head size "
                         f"{' or '.join(map(str, PREFILL_HEAD_DIMS))} and a power-of-two "
                         f"block size (got {d} and {bs})")

    def view(t, dt=dtype):
        return _View(t.data_ptr, t.shape, t.strides, dt)

    def heads(t, h):
        v = heads_view(t, h, dtype)
        return _View(v.data_ptr(), v.shape, v.stride(), dtype)

    pool_dt = "uint8" if fp8 else dtype
    k_pool, v_pool = view(key_cache, pool_dt), view(value_cache, pool_dt)
    tables, lens = view(block_tables, "int32"), view(seq_lens, "int32")
    k_new, v_new = heads(key, kv_num_heads), heads(value, kv_num_heads)
    if fp8:
        ks, vs = view(k_scale, "float32"), view(v_scale, "float32")
        lib.append_kv_fp8(k_new, v_new, k_pool, v_pool, ks, vs, tables, lens, stream=stream)
    else:
        lib.append_kv(k_new, v_new, k_pool, v_pool, tables, lens, stream=stream)
    q, out = heads(query, num_heads), heads(output, num_heads)
    sk = view(sinks, "float32") if sinks is not None else None
    if sq > 1:
        lib.paged_prefill(q, k_pool, v_pool, tables, lens, out, causal=True, scale=scale,
                          window=window, sinks=sk, stream=stream)
        return None
    # Decode layout [B, Hq, D]: drop the single-token axis.
    q3 = _View(q.data_ptr(), (b, num_heads, d), (q.stride(0), d, 1), dtype)
    o3 = _View(out.data_ptr(), (b, num_heads, d), (out.stride(0), d, 1), dtype)

    def plan_for(splits):
        return _decode_plan(b, num_heads, kv_num_heads, d, bs, int(block_tables.shape[1]), dtype,
                            splits, device or _device_info(), fp8, window)

    plan = plan_for(num_splits)
    ws = None
    if plan.workspace_bytes:
        ptr = get_workspace(plan.workspace_bytes)
        if ptr is None:
            plan = plan_for(1)
        else:
            ws = _View(ptr, (plan.workspace_bytes // 4,), (1,), "float32")
    if fp8:
        lib.paged_decode_fp8(q3, k_pool, v_pool, ks, vs, tables, lens, o3, scale=scale,
                             plan=plan, workspace=ws, window=window, sinks=sk, stream=stream)
    else:
        lib.paged_decode(q3, k_pool, v_pool, tables, lens, o3, scale=scale, plan=plan,
                         workspace=ws, window=window, sinks=sk, stream=stream)
    return plan


@functools.lru_cache(maxsize=256)
def _decode_plan(b, num_heads, kv_num_heads, d, bs, max_blocks, dtype, splits, device, fp8, window=0):
    """plan_paged_decode, once per shape: run_jit runs on every enqueue, and a decode step can take
    less GPU time than planning it again in Python."""
    from onnx_fuse.plugins import launch_plan as lp

    return lp.plan_paged_decode(b, num_heads, kv_num_heads, d, bs, max_blocks, dtype,
                                num_splits=splits, device=device, kv_dtype="fp8" if fp8 else None,
                                window=window)


class Workspace:
    """Device scratch for the JIT decode's split-K partials (tensorrt.plugin gives a Python
    plugin no TensorRT workspace): one buffer per CUDA stream, grown to the largest request and
    then kept, so steady-state calls allocate nothing. Launches on one stream run in order, so
    one buffer per stream is never used by two decodes at once; growing drains the stream before
    the old buffer is freed. Memory comes from torch's allocator when the process has already
    imported torch with CUDA (the GPU tests, PyTorch-hosted serving), else from the CUDA runtime
    through polygraphy (cudaMalloc / cudaFree); where neither works ``get`` returns None and
    the caller decodes in one split. The buffers are on the current device. A call that must
    grow the buffer cannot be captured into a CUDA graph: run each shape once before capture."""

    def __init__(self):
        self._bufs: dict[int, tuple] = {}   # stream -> (nbytes, ptr, backend, handle)
        self._lock = threading.Lock()

    def get(self, nbytes: int, stream: int) -> int | None:
        """A device pointer to at least ``nbytes`` bytes for work on ``stream``, or None."""
        with self._lock:
            have = self._bufs.get(int(stream))
            if have is not None and have[0] >= nbytes:
                return have[1]
            backend = _memory_backend()
            if backend is None:
                return None
            if have is not None:
                have[2].free(have[1], have[3], int(stream))
                del self._bufs[int(stream)]
            ptr, handle = backend.alloc(nbytes)
            self._bufs[int(stream)] = (nbytes, ptr, backend, handle)
            return ptr

    def nbytes(self, stream: int) -> int:
        have = self._bufs.get(int(stream))
        return have[0] if have is not None else 0


class _TorchMemory:
    @staticmethod
    def alloc(nbytes: int):
        import torch

        t = torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device="cuda")
        return t.data_ptr(), t

    @staticmethod
    def free(ptr: int, handle, stream: int) -> None:
        import torch

        torch.cuda.synchronize()   # the old buffer may still be read on ``stream``
        del handle


class _CudartMemory:
    def __init__(self, cuda):
        self._cuda = cuda

    def alloc(self, nbytes: int):
        return self._cuda.malloc(max(int(nbytes), 1)), None

    def free(self, ptr: int, handle, stream: int) -> None:
        self._cuda.stream_synchronize(stream)
        self._cuda.free(ptr)


def _memory_backend():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return _TorchMemory
    cuda = _cudart()
    return _CudartMemory(cuda) if cuda is not None else None


def _cudart():
    """polygraphy's CUDA runtime wrapper, or None where it cannot load libcudart."""
    try:
        from polygraphy import cuda

        return cuda.wrapper()
    except Exception:  # noqa: BLE001 - no runtime library: the caller degrades (one split)
        return None


WORKSPACE = Workspace()
_DEVICE = None


def _device_info():
    """The current GPU as launch_plan.DeviceInfo (torch where imported, else the CUDA runtime's
    device attributes), once per process; the H200 defaults where neither answers."""
    global _DEVICE
    if _DEVICE is not None:
        return _DEVICE
    from onnx_fuse.plugins import launch_plan as lp

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            _DEVICE = lp.current_device(torch.cuda.current_device())
            return _DEVICE
        cuda = _cudart()
        if cuda is not None:
            _DEVICE = _device_from_cudart(cuda.handle, lp.DeviceInfo)
            return _DEVICE
    except Exception:  # noqa: BLE001 - planning falls back to the H200 defaults
        pass
    _DEVICE = lp.H200
    return _DEVICE


def _device_from_cudart(rt, device_info):
    import ctypes

    dev = ctypes.c_int()
    if rt.cudaGetDevice(ctypes.byref(dev)):
        raise RuntimeError("cudaGetDevice failed")

    def attr(code: int) -> int:
        v = ctypes.c_int()
        if rt.cudaDeviceGetAttribute(ctypes.byref(v), code, dev.value):
            raise RuntimeError(f"cudaDeviceGetAttribute({code}) failed")
        return v.value

    # cudaDevAttr: MultiProcessorCount 16, ComputeCapabilityMajor 75 / Minor 76,
    # MaxSharedMemoryPerMultiprocessor 81, MaxSharedMemoryPerBlockOptin 97, MemoryClockRate 36 (kHz),
    # GlobalMemoryBusWidth 37 (bits)
    from onnx_fuse.plugins.launch_plan import memory_bandwidth

    def optional(code: int) -> int | None:   # a driver without the attribute: the name's estimate
        try:
            return attr(code)
        except RuntimeError:
            return None

    name = f"cuda:{dev.value}"
    return device_info(name=name, num_sms=attr(16),
                       max_smem_per_block=attr(97), smem_per_sm=attr(81), compute_capability=(attr(75), attr(76)),
                       mem_bandwidth=memory_bandwidth(name, optional(36), optional(37)))


def aot_entry(dtype_tag: str, head_dim: int, warps: int, stages: int) -> str:
    return f"onnx_fuse_pa_trt_{dtype_tag}_d{head_dim}_w{warps}s{stages}"


def smem_bytes(head_dim: int, warps: int, stages: int) -> int:
    """Q tile (16 rows) + stages x (K + V tiles of 16*warps tokens), 16-bit (pa_smem_bytes)."""
    from onnx_fuse.plugins.launch_plan import pa_smem_bytes

    return pa_smem_bytes(head_dim, warps, stages, 0)


def _fits(head_dim: int, warps: int, stages: int) -> bool:
    """Whether a variant's shared memory fits a block (8 warps x 3 stages does not at D = 256;
    its adapter entry is compiled but never launched)."""
    from onnx_fuse.plugins.launch_plan import H200

    return smem_bytes(head_dim, warps, stages) <= H200.max_smem_per_block


def aot_impl(query: "trtp.TensorDesc", key: "trtp.TensorDesc", value: "trtp.TensorDesc",
             key_cache: "trtp.TensorDesc", value_cache: "trtp.TensorDesc",
             block_tables: "trtp.TensorDesc", seq_lens: "trtp.TensorDesc",
             k_scale: "trtp.TensorDesc", v_scale: "trtp.TensorDesc", sinks: "trtp.TensorDesc",
             num_heads: int, kv_num_heads: int, scale: float, window: int,
             outputs: "Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc]", tactic: int
             ) -> "Tuple[Union[str, bytes], Union[str, bytes], trtp.KernelLaunchParams, trtp.SymExprs]":
    """AOT path: one fused append + single-split decode kernel, grid (Hkv, 1, B); decode only
    (the query length must be the constant 1), 16-bit pools only (the scale inputs are passed
    to the kernel and not read; the sinks are read, -inf where the node has none)."""
    from onnx_fuse.plugins.aot_ptx import aot_kernel_ptx

    if _is_fp8(key_cache.dtype) or _is_fp8(value_cache.dtype):
        raise ValueError("PagedAttention's AOT kernel has no fp8 (e4m3) pool form: build this "
                         "node with aot=0 (JIT: append_kv_fp8 + split-K paged_decode_fp8)")

    hidden = query.shape_expr[2]
    if not hidden.is_constant:
        raise ValueError("PagedAttention needs a static hidden size (heads * head_dim)")
    tokens = query.shape_expr[1]
    if not (tokens.is_constant and int(tokens.constant_value) == 1):
        raise ValueError("PagedAttention's AOT kernel is decode-only (one query token per "
                         "sequence) and this node's query length is not fixed at 1: build it "
                         "with aot=0 (JIT: append_kv + paged prefill)")
    d = _dims(int(hidden.constant_value), num_heads)
    kv_num_heads = kv_num_heads or num_heads
    variants = decode_variants()
    warps, stages = variants[tactic - 1] if 1 <= tactic <= len(variants) else variants[0]
    if not _fits(d, warps, stages):
        warps, stages = variants[0]
    name = aot_entry(_dtype_tag(query.dtype), d, warps, stages)
    ptx = aot_kernel_ptx("paged_attention", name, adapter_source())
    block_size = key_cache.shape_expr[1]
    max_blocks = block_tables.shape_expr[1]
    # One split covers the block table's capacity, rounded up to whole token tiles.
    tile = 16 * warps
    part_tokens = trtp.cdiv(block_size * max_blocks, tile) * tile
    bits = struct.unpack("<i", struct.pack("<f", _scale(scale, d) * math.log2(math.e)))[0]

    params = trtp.KernelLaunchParams()
    params.grid_x = kv_num_heads
    params.grid_y = 1
    params.grid_z = trtp.SymInt32(query.shape_expr[0])
    params.block_x = 32 * warps
    params.shared_mem = smem_bytes(d, warps, stages)
    extra = trtp.SymIntExprs.from_tuple([
        trtp.SymInt32(num_heads), trtp.SymInt32(kv_num_heads), trtp.SymInt32(block_size),
        trtp.SymInt32(max_blocks), trtp.SymInt32(part_tokens), trtp.SymInt32(bits),
        trtp.SymInt32(int(window or 0)),   # sliding window (0 = none): the adapter's last int
    ])
    return name.encode(), ptx, params, extra


def register_plugin(backend) -> None:
    """Register the plugin with tensorrt.plugin (once per process). Needs full TensorRT."""
    register_plugin_module(sys.modules[__name__], backend)