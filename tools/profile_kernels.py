"""Run one planned kernel (or its torch anchor) once inside a profiler range, for Nsight Compute.

    ncu --clock-control none --profile-from-start off --set full -o prefill \
        python tools/profile_kernels.py prefill

Cases: prefill / prefill-causal (ours, planned, fp16 B4 S4096 H32 D128), cudnn / cudnn-causal
(torch's cuDNN backend on the same tensors), decode (ours, planned, fp16 B64 H32/8 D128 ctx 4096
block 16), mqa (B128 H16/1 D64), sdpa-decode / sdpa-mqa (torch SDPA on a contiguous copy).
Each case runs three times first (warm caches, loaded modules), then once between
cudaProfilerStart and cudaProfilerStop, so with --profile-from-start off the report holds exactly
the launches of one call.  The planned paths are the same as tools/bench_kernels.py's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = ("prefill", "prefill-causal", "cudnn", "cudnn-causal", "decode", "mqa", "sdpa-decode", "sdpa-mqa")


def _prefill(case: str):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from onnx_fuse.plugins.kernel_lib import KernelLib

    B, S, H, D = 4, 4096, 32, 128
    causal = case.endswith("causal")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    if case.startswith("cudnn"):
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def fn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        return fn
    lib = KernelLib.load()
    out = torch.empty_like(q)
    return lambda: lib.fused_attention(q, k, v, out, causal=causal)


def _decode(case: str):
    import torch
    import torch.nn.functional as F

    from onnx_fuse.plugins.kernel_lib import KernelLib

    B, Hq, Hkv, D = (128, 16, 1, 64) if case.endswith("mqa") else (64, 32, 8, 128)
    ctx, bs = 4096, 16
    g = torch.Generator(device="cuda").manual_seed(1)
    nb_per = ctx // bs
    k_pool, v_pool = (torch.randn(B * nb_per, bs, Hkv, D, device="cuda", dtype=torch.float16, generator=g)
                      for _ in range(2))
    tables = torch.randperm(B * nb_per, device="cuda", generator=g).to(torch.int32).view(B, nb_per).contiguous()
    seq = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.float16, generator=g)
    if case.startswith("sdpa"):
        kc = k_pool[tables.long()].reshape(B, ctx, Hkv, D).transpose(1, 2).contiguous()
        vc = v_pool[tables.long()].reshape(B, ctx, Hkv, D).transpose(1, 2).contiguous()
        qs = q.view(B, Hq, 1, D)
        return lambda: F.scaled_dot_product_attention(qs, kc, vc, enable_gqa=True)
    lib = KernelLib.load()
    out = torch.empty_like(q)
    return lambda: lib.paged_decode(q, k_pool, v_pool, tables, seq, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=CASES)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to profile", file=sys.stderr)
        return 2
    fn = (_prefill if "prefill" in a.case or "cudnn" in a.case else _decode)(a.case)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"{a.case}: profiled one call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
