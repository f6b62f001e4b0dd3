"""The differential fuzzer's check of the paged-KV rewrite (trt O4, docs/paged_kv.md).

The feeds, the run and the pairing are verify's (optimizer/targets/paged_kv_feeds.py): the
original's past written into shuffled blocks of a pool (NaN in every unused slot: a stray read
shows), the paged model run on that, the other outputs compared as they are and each present
output with its sequences read back out of the returned pool. The contract has no padding
(seq_lens says each sequence's length), so the reference runs with every input the rewrite
retired that is an int padding mask set to ones. fp8 pools (``kv_cache_dtype="fp8"``): the past
is first rounded to e4m3 at a per-head scale, the original runs on the rounded past and the fp8
model on its bytes; the new tokens' K/V are rounded by the op, so outputs are compared at e4m3's
tolerance (``FP8_TOL``).
"""

from __future__ import annotations

import numpy as np
import onnx

from onnx_fuse.targets import paged_kv_feeds as _pk
from onnx_fuse.targets.paged_kv_feeds import FP8_TOL, paired_outputs, pools, run_paged  # noqa: F401

BLOCK = 4   # not a divisor of most P + S: a sequence ends inside a partial block


def is_paged(model: onnx.ModelProto) -> bool:
    inputs = {i.name for i in model.graph.input}
    return {"block_tables", "seq_lens"} <= inputs and any(
        n.op_type == "PagedAttention" and n.domain == "onnx_fuse" for n in model.graph.node)


def _past_name(pool: str, original_inputs: set[str]) -> str:
    """kv_pool_k.X -> the original's past input (paged_kv_feeds.past_input)."""
    return _pk.past_input(pool, original_inputs)


def paged_feeds(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict, new_tokens: int,
                seed: int, fp8: bool = False) -> tuple[dict, dict]:
    """(the original's feeds, the paged model's) for ``new_tokens`` new tokens after the past."""
    past = feeds[_past_name(pools(optimized)[0][0], {i.name for i in original.graph.input})]
    return _pk.paged_feeds(original, optimized, feeds, total=past.shape[2] + new_tokens,
                           block_size=BLOCK, seed=seed, fp8=fp8)


def compare_fp8(names, ref, got) -> tuple[str, str]:
    """The fuzzer's class of a run on fp8 pools, at FP8_TOL."""
    for name, r, g in zip(names, ref, got):
        r64, g64 = np.asarray(r, np.float64), np.asarray(g, np.float64)
        if r64.shape != g64.shape:
            return "signature", f"output {name!r}: run-time {list(g64.shape)}, original {list(r64.shape)}"
        if not np.all(np.isfinite(g64) == np.isfinite(r64)):
            return "wrong", f"output {name!r}: non-finite positions differ (fp8 pools)"
        ok = np.isfinite(r64)
        scale = max(1.0, float(np.max(np.abs(r64[ok]), initial=0.0)))
        err = np.abs(g64[ok] - r64[ok])
        rtol, atol = FP8_TOL
        if err.size and not np.all(err <= atol * scale + rtol * np.abs(r64[ok])):
            return "wrong", f"output {name!r}: max abs diff {float(err.max()):.3g} (scale {scale:.3g}, fp8 pools)"
    return "ok", ""
