"""The GPU kernel tests' reference: onnx_fuse.reference's functions, with ``fused_attention`` /
``fused_attention_op`` / ``paged_attention`` computed in float64 by onnx_fuse.reference.torch_attention on the
GPU (the same contract and arithmetic; tests/reference/test_torch_attention.py checks it against the NumPy
reference). NumPy in, NumPy out, so the tests read it as they read onnx_fuse.reference; their [B, H, S, S]
float64 scores no longer run on the host, where they took most of the GPU tests' time (docs/PERF.md, "Forty-third
round"). ``append_kv`` / ``paged_attention_op`` stay NumPy (cheap at the tests' sizes). Imported by the GPU test
modules after they have skipped without torch / CUDA.
"""

from __future__ import annotations

from functools import partial

from onnx_fuse.reference import append_kv, paged_attention_op, resolve_scale
from onnx_fuse.reference import torch_attention as _t

__all__ = ["append_kv", "fused_attention", "fused_attention_op", "paged_attention", "paged_attention_op",
           "resolve_scale"]

fused_attention = partial(_t.fused_attention, device="cuda")
paged_attention = partial(_t.paged_attention, device="cuda")


def fused_attention_op(query, key, value, seq_lens=None, *, num_heads: int, kv_num_heads: int | None = None,
                       scale: float = 0.0, causal: int = 0, softcap: float = 0.0, window: int = 0):
    """reference.fused_attention_op ([B, S, H*D] in and out) on the GPU."""
    return fused_attention(query, key, value, seq_lens=seq_lens, causal=bool(causal), scale=scale, softcap=softcap,
                           window=window, layout="bsh", num_heads=num_heads, num_kv_heads=kv_num_heads or num_heads)
