"""The differential fuzzer's check of the paged-KV rewrite (trt O4, docs/paged_kv.md).

The feeds, the run, the pairing and the fp8 tolerance are verify's
(optimizer/targets/paged_kv_feeds.py): the original's past written into shuffled blocks of a pool
(NaN in every unused slot: a stray read shows), the paged model run on that, the other outputs
compared as they are and each present output with its sequences read back out of the returned
pool. fp8 pools (``kv_cache_dtype="fp8"``): the original runs on its past rounded to e4m3 and the
fp8 model on its bytes; the new tokens' K/V are rounded by the op, so outputs are compared at
e4m3's bound added to the run's own (verify's fp8_pool_tolerance / fp8_tolerance). Here: which
models are paged, the block size, and the fuzzer's class of an fp8 run.
"""

from __future__ import annotations

import numpy as np
import onnx

from onnx_fuse.targets.paged_kv_feeds import fp8_pool_tolerance, fp8_tolerance

BLOCK = 4   # not a divisor of most P + S: a sequence ends inside a partial block


def is_paged(model: onnx.ModelProto) -> bool:
    inputs = {i.name for i in model.graph.input}
    return {"block_tables", "seq_lens"} <= inputs and any(
        n.op_type == "PagedAttention" and n.domain == "onnx_fuse" for n in model.graph.node)


def compare_fp8(names, ref, got, bases: dict | None = None, scales: dict | None = None) -> tuple[str, str]:
    """The fuzzer's class of a run on fp8 pools: signature, wrong or ok. ``bases`` {output:
    (atol, rtol)}: the bound the run has without fp8 pools (the output's type, or --precision's),
    which e4m3's adds to as verify does: fp8_pool_tolerance for the presents of ``scales``
    {output: kv scales} (the first layer's pools, pk.pool_scales), fp8_tolerance elsewhere."""
    for name, r, g in zip(names, ref, got):
        r64, g64 = np.asarray(r, np.float64), np.asarray(g, np.float64)
        if r64.shape != g64.shape:
            return "signature", f"output {name!r}: run-time {list(g64.shape)}, original {list(r64.shape)}"
        if not np.all(np.isfinite(g64) == np.isfinite(r64)):
            return "wrong", f"output {name!r}: non-finite positions differ (fp8 pools)"
        ok = np.isfinite(r64)
        base = (bases or {}).get(name, (0.0, 0.0))
        if name in (scales or {}):
            atol, rtol = fp8_pool_tolerance(scales[name], base)
        else:
            atol, rtol = fp8_tolerance(r64, base)
        err = np.abs(g64[ok] - r64[ok])
        if err.size and not np.all(err <= atol + rtol * np.abs(r64[ok])):
            return "wrong", f"output {name!r}: max abs diff {float(err.max()):.3g} (atol {atol:.3g}, fp8 pools)"
    return "ok", ""


def check_fp8_attention(optimized: onnx.ModelProto, run_feeds: dict, bf16: bool = False) -> tuple[str, str]:
    """verify's fp8 attention check (onnx_fuse.targets.fp8_attention_check): each PagedAttention
    on fp8 pools within what e4m3's rounding of its new tokens allows; ``wrong`` past it. ``bf16``:
    the model runs through emulate_bf16 (float32 math on bf16-rounded values)."""
    from onnx_fuse.passes.precision import emulate_bf16
    from onnx_fuse.targets import fp8_attention_check as fc

    got, entries, probe = fc.run_probe(emulate_bf16(optimized) if bf16 else optimized, run_feeds, threads=1)
    for e in entries:
        r = fc.check_attention(e, got, run_feeds, probe)
        if not r.passed:
            return "wrong", f"{r.name}: max abs diff {r.max_abs:.3g}, {r.ratio:.3g} x e4m3's bound (fp8 pools)"
    return "ok", ""
