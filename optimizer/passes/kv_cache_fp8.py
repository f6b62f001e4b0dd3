"""fp8 (e4m3) KV pools for the paged-KV rewrite: ``kv_cache_dtype="fp8"`` (target trt, O4).

Opt-in, after the ``trt-paged-kv`` lowering made every KV-cache attention an
``onnx_fuse::PagedAttention`` over the pools ``kv_pool_{k,v}.N`` (graph inputs) and after any
precision conversion: each pool, graph input and ``kv_pool_{k,v}_out.N`` output alike, becomes
float8e4m3fn, and each layer gets its dequantization scales as new graph inputs
``kv_scale_{k,v}.N``, float32 ``[Hkv]``, the op's inputs 7 and 8 (docs/ops.md: a pool byte stands
for ``e4m3 * scale[h]``; the serving side picks the scales, e.g. ``amax / 448`` of calibration
K/V). Half the pool bytes of fp16; the plugin's JIT path quantizes on append and decodes with
``paged_decode_fp8``.

Shapes are inferred again first (the rewrites left the ops' outputs as their rules shaped them;
shape inference now carries a decode step's ``S = 1`` through every PagedAttention).
Refused with a UserError naming the layer, never half converted: a query length not fixed at 1
(the fp8 form is decode-only; DecodeOnlyError, on which optimize() binds a symbol ``shapes``
sets to 1 in the original's inputs and runs again), a head size the fp8 decode kernel lacks,
pools that are not graph inputs and outputs of their own wired straight to the node (passes/_kv_pools.py: fp8 pool bytes
are never converted, so a Cast between is refused; ``precision`` never puts one there), a node
that already has scale inputs; and a model with no PagedAttention at all (the paged rewrite did not apply, see the
report's warnings).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.errors import UserError
from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._kv_pools import pool_io, retype_pools
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN

__all__ = ["KvCacheFp8Pass", "FP8_HEAD_DIMS", "KV_CACHE_DTYPES", "DecodeOnlyError",
           "query_length_candidates", "bind_input_dim"]

#: plugins/paged_attention.yaml kernel.fp8_pool.head_dims (tests/passes/test_kv_cache_fp8.py
#: checks that they agree)
FP8_HEAD_DIMS = (64, 96, 128, 256)
#: values of optimize(kv_cache_dtype=...) / --kv-cache-dtype besides None (the pools' own type)
KV_CACHE_DTYPES = ("fp8",)
_OPTION = "--kv-cache-dtype fp8"


class DecodeOnlyError(UserError):
    """A PagedAttention's query length is not fixed at 1; optimize() may bind it from ``shapes``
    (``--shape sequence=1``) and run again."""


def _input_symbols(model: ir.Model) -> list[tuple[str, int]]:
    """(symbol, axis) of the graph inputs' named symbolic dims, in input order, each once."""
    seen: dict[str, int] = {}
    for v in model.graph.inputs:
        for axis, d in enumerate(v.shape or ()):
            if isinstance(d, ir.SymbolicDim) and d.value and d.value not in seen:
                seen[d.value] = axis
    return list(seen.items())


def query_length_candidates(model: ir.Model, shapes) -> tuple[list[str], list[str], dict[str, int]]:
    """(symbols ``shapes`` binds to 1, the graph inputs' other symbols, every binding), each list
    with the symbols that are never an input's axis 0 (a batch) first: the query length is one of
    them. ``shapes`` as verify's: a symbol name -> (n,), or an input name -> its full shape."""
    bound: dict[str, int] = {}
    inputs = {v.name: v for v in model.graph.inputs}
    for name, dims in (shapes or {}).items():
        if name in inputs and inputs[name].shape is not None and len(dims) == len(inputs[name].shape):
            for d, n in zip(inputs[name].shape, dims):
                if isinstance(d, ir.SymbolicDim) and d.value:
                    bound.setdefault(d.value, n)
        elif len(dims) == 1:
            bound[name] = dims[0]
    symbols = _input_symbols(model)
    batch = {v.shape[0].value for v in model.graph.inputs
             if v.shape and isinstance(v.shape[0], ir.SymbolicDim)}
    order = sorted(symbols, key=lambda sa: sa[0] in batch)   # stable: input order otherwise
    ones = [s for s, _ in order if bound.get(s) == 1]
    rest = [s for s, _ in order if bound.get(s) != 1]
    return ones, rest, bound


def bind_input_dim(model: ir.Model, symbol: str, value: int) -> None:
    """Every graph input dim named ``symbol`` becomes ``value`` (as editing the export would)."""
    for v in model.graph.inputs:
        if v.shape is not None and any(isinstance(d, ir.SymbolicDim) and d.value == symbol
                                       for d in v.shape):
            v.shape = ir.Shape([value if isinstance(d, ir.SymbolicDim) and d.value == symbol else d
                                for d in v.shape])


def _scale_name(pool: ir.Value, tag: str) -> str:
    prefix = f"kv_pool_{tag}."
    name = pool.name or ""
    return f"kv_scale_{tag}.{name[len(prefix):]}" if name.startswith(prefix) else f"{name}.scale"


class KvCacheFp8Pass(FusePass):
    """Every PagedAttention pool float8e4m3fn, with per-layer scale graph inputs."""

    name = "kv-cache-fp8"

    def __init__(self, *, float32_kept: bool = False) -> None:
        super().__init__()
        # no --precision and no float32_plugins: float32 attention kept TensorRT's own ops
        self.float32_kept = float32_kept

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        nodes = [n for n in graph if n.domain == PLUGIN_DOMAIN and n.op_type == "PagedAttention"]
        if not nodes:
            float32 = self.float32_kept and any(
                n.op_type == "Attention" and n.inputs and n.inputs[0] is not None
                and n.inputs[0].dtype == ir.DataType.FLOAT for n in graph)
            why = ("its attention is float32, which the PagedAttention plugin does not take: add "
                   "--precision fp16 or bf16" if float32 else
                   f"the report's warnings say why without {_OPTION}")
            raise UserError(f"{_OPTION}: the model has no paged KV cache to convert (the paged-KV "
                            f"rewrite did not apply; {why})")
        # the rewrites gave the ops' outputs shapes before the positions were re-derived; infer
        # again (through the plugin ops, passes/_op_shapes.py) so a decode step's S = 1 reaches
        # every layer's query, not only the first
        from onnx_fuse.passes.shape_inference import ShapeInferencePass

        ShapeInferencePass()(model)
        plans = [self._check(n) for n in nodes]
        for node, (hkv, pools) in zip(nodes, plans):
            retype_pools(pools, ir.DataType.FLOAT8E4M3FN)
            scales = []
            for tag, pool, _ in pools:
                scale = ir.Value(name=_scale_name(pool, tag), type=ir.TensorType(ir.DataType.FLOAT),
                                 shape=ir.Shape([hkv]))
                graph.inputs.append(scale)
                scales.append(scale)
            node.resize_inputs(max(len(node.inputs), 9))   # 10 with attention sinks (kept)
            node.replace_input_with(7, scales[0])
            node.replace_input_with(8, scales[1])
            self.stats["pools-fp8"] += 2
        return ir.passes.PassResult(model, modified=True)

    @staticmethod
    def _check(node: ir.Node):
        """(Hkv, [(tag, pool input, pool output)]) of a node that can take fp8 pools."""
        def refuse(why: str, error=UserError):
            raise error(f"{_OPTION}: PagedAttention {node.name!r}: {why}")

        ins = list(node.inputs)
        if len(ins) not in (7, 10) or any(v is not None for v in ins[7:9]):
            refuse("already has scale inputs (k_scale, v_scale)")
        # q, k and v share S (the op's contract): one fixed at 1 fixes all (RoPE's broadcast
        # against positions of unknown length can leave q's and k's unnamed, v keeps the input's)
        lens = {v.shape[1] for v in ins[:3] if v is not None and v.shape is not None and len(v.shape) == 3}
        if 1 not in lens:
            refuse("fp8 pools are decode-only, and this query's length is not fixed at 1 "
                   "(export the decode graph with a sequence length of 1)", DecodeOnlyError)
        pools = pool_io(node)
        if pools is None or any(p.shape is None or len(p.shape) != 4 for _, p, _ in pools):
            refuse("its k or v pool is not a graph input [blocks, block_size, Hkv, D] read "
                   "by this node only, with its update a graph output (no Cast between)")
        hkv, d = pools[0][1].shape[2], pools[0][1].shape[3]
        if not isinstance(hkv, int) or d not in FP8_HEAD_DIMS:
            refuse(f"head size {d} (the fp8 decode kernel takes "
                   f"{', '.join(map(str, FP8_HEAD_DIMS))}) or a kv head count that is not static")
        return hkv, pools
