"""fp8 (e4m3) KV pools for the paged-KV rewrite: ``kv_cache_dtype="fp8"`` (target trt, O4).

Opt-in, after the ``trt-paged-kv`` lowering made every KV-cache attention an
``onnx_fuse::PagedAttention`` over the pools ``kv_pool_{k,v}.N`` (graph inputs) and after any
precision conversion: each pool, graph input and ``kv_pool_{k,v}_out.N`` output alike, becomes
float8e4m3fn, and each layer gets its dequantization scales as new graph inputs
``kv_scale_{k,v}.N``, float32 ``[Hkv]``, the op's inputs 7 and 8 (docs/ops.md: a pool byte stands
for ``e4m3 * scale[h]``; the serving side picks the scales, e.g. ``amax / 448`` of calibration
K/V). Half the pool bytes of fp16; the plugin's JIT path quantizes on append and decodes with
``paged_decode_fp8``.

Refused with a UserError naming the layer, never half converted: a query length not fixed at 1
(the fp8 form is decode-only), a head size the fp8 decode kernel lacks, pools that are not graph
inputs and outputs of their own (a Cast between, as ``precision`` leaves at the float32 graph
I/O, is removed: fp8 pool bytes are never converted), a node that already has scale inputs; and a model with no
PagedAttention at all (the paged rewrite did not apply, see the report's warnings).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.errors import UserError
from onnx_fuse.passes._infra import FusePass
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN

__all__ = ["KvCacheFp8Pass", "FP8_HEAD_DIMS", "KV_CACHE_DTYPES"]

#: plugins/paged_attention.yaml kernel.fp8_pool.head_dims (tests/passes/test_kv_cache_fp8.py
#: checks that they agree)
FP8_HEAD_DIMS = (64, 96, 128, 256)
#: values of optimize(kv_cache_dtype=...) / --kv-cache-dtype besides None (the pools' own type)
KV_CACHE_DTYPES = ("fp8",)
_OPTION = "--kv-cache-dtype fp8"


def _scale_name(pool: ir.Value, tag: str) -> str:
    prefix = f"kv_pool_{tag}."
    name = pool.name or ""
    return f"kv_scale_{tag}.{name[len(prefix):]}" if name.startswith(prefix) else f"{name}.scale"


def _graph_input(v: ir.Value):
    """(graph input, the Cast between it and v or None) where v is a graph input read once, or
    the Cast of one (precision keeps graph I/O types: a float32 pool Cast to fp16)."""
    if v.is_graph_input():
        return (v, None) if len(v.uses()) == 1 else None
    p = v.producer()
    if (p is not None and p.op_type == "Cast" and p.domain == "" and p.inputs[0] is not None
            and p.inputs[0].is_graph_input() and len(p.inputs[0].uses()) == 1
            and len(v.uses()) == 1 and not v.is_graph_output()):
        return p.inputs[0], p
    return None


def _graph_output(v: ir.Value):
    """(graph output, the Cast between v and it or None), as _graph_input."""
    if v.is_graph_output():
        return v, None
    uses = v.uses()
    if len(uses) == 1:
        user = uses[0][0]
        if user.op_type == "Cast" and user.domain == "" and user.outputs[0].is_graph_output():
            return user.outputs[0], user
    return None


class KvCacheFp8Pass(FusePass):
    """Every PagedAttention pool float8e4m3fn, with per-layer scale graph inputs."""

    name = "kv-cache-fp8"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        nodes = [n for n in graph if n.domain == PLUGIN_DOMAIN and n.op_type == "PagedAttention"]
        if not nodes:
            raise UserError(f"{_OPTION}: the model has no paged KV cache to convert (the paged-KV "
                            "rewrite did not apply; the report's warnings say why without "
                            f"{_OPTION})")
        plans = [self._check(n) for n in nodes]
        for node, (hkv, pools) in zip(nodes, plans):
            scales = []
            for tag, (pool, cast_in), (out, cast_out) in pools:
                i = 3 if tag == "k" else 4
                if cast_in is not None:   # the pool's bytes are the state: no Cast on them
                    node.replace_input_with(i, pool)
                    graph.remove(cast_in, safe=True)
                if cast_out is not None:
                    name, value = out.name, node.outputs[i - 2]
                    graph.outputs[graph.outputs.index(out)] = value
                    graph.remove(cast_out, safe=True)
                    value.name, out = name, value
                for v in (pool, out):
                    v.type = ir.TensorType(ir.DataType.FLOAT8E4M3FN)
                self.stats["casts-removed"] += (cast_in is not None) + (cast_out is not None)
                scale = ir.Value(name=_scale_name(pool, tag), type=ir.TensorType(ir.DataType.FLOAT),
                                 shape=ir.Shape([hkv]))
                graph.inputs.append(scale)
                scales.append(scale)
            node.resize_inputs(9)
            node.replace_input_with(7, scales[0])
            node.replace_input_with(8, scales[1])
            self.stats["pools-fp8"] += 2
        return ir.passes.PassResult(model, modified=True)

    @staticmethod
    def _check(node: ir.Node):
        """(Hkv, [(tag, pool input, pool output)]) of a node that can take fp8 pools."""
        def refuse(why: str):
            raise UserError(f"{_OPTION}: PagedAttention {node.name!r}: {why}")

        ins = list(node.inputs)
        if len(ins) != 7:
            refuse("already has scale inputs (k_scale, v_scale)")
        sq = ins[0].shape[1] if ins[0].shape is not None and len(ins[0].shape) == 3 else None
        if sq != 1:
            refuse("fp8 pools are decode-only, and this query's length is not fixed at 1 "
                   "(export the decode graph with a sequence length of 1)")
        pools = []
        for tag, i in (("k", 3), ("v", 4)):
            pool, out = _graph_input(ins[i]), _graph_output(node.outputs[i - 2])
            if (pool is None or out is None or pool[0].shape is None
                    or len(pool[0].shape) != 4):
                refuse(f"its {tag} pool is not a graph input [blocks, block_size, Hkv, D] read "
                       "by this node only (directly or through one Cast), with its update a "
                       "graph output")
            pools.append((tag, pool, out))
        hkv, d = pools[0][1][0].shape[2], pools[0][1][0].shape[3]
        if not isinstance(hkv, int) or d not in FP8_HEAD_DIMS:
            refuse(f"head size {d} (the fp8 decode kernel takes "
                   f"{', '.join(map(str, FP8_HEAD_DIMS))}) or a kv head count that is not static")
        return hkv, pools
