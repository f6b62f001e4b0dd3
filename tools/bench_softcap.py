"""What the logit softcap (Gemma 2) costs the fused-attention kernels: the planned kernel with and
without a softcap, interleaved in one process, on Gemma-2 prefill shapes (and the issue's D = 128
anchor shape). Each softcapped output is first checked against a torch float32 reference on two
query heads. Prints one row per shape: TFLOP/s (4*B*Hq*S^2*D, halved when causal) and the ratio.

    python tools/bench_softcap.py [--json out.json]     # on a CUDA machine with the built library
"""

from __future__ import annotations

import argparse
import json
import sys

SHAPES = [  # label, B, S, Hq, Hkv, D, causal
    ("gemma2-9b", 2, 4096, 16, 8, 256, True),
    ("gemma2-27b", 2, 4096, 32, 16, 128, True),
    ("anchor-d128", 4, 4096, 32, 32, 128, False),
    ("anchor-d128-causal", 4, 4096, 32, 32, 128, True),
    ("d64", 4, 4096, 32, 32, 64, True),
]
CAP = 50.0


def _reference_err(q, k, v, out, causal, scale, cap) -> float:
    """||out - ref|| / ||ref|| on batch 0, query heads 0 and 1 (torch float32)."""
    import torch

    g = q.shape[2] // k.shape[2]
    qh = q[0, :, :2].float().transpose(0, 1)
    kh = k[0, :, [0, 1 // g]].float().transpose(0, 1)
    vh = v[0, :, [0, 1 // g]].float().transpose(0, 1)
    s = cap * torch.tanh((qh @ kh.transpose(-1, -2)) * scale / cap)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ vh
    got = out[0, :, :2].float().transpose(0, 1)
    return float((got - ref).norm() / ref.norm())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    import torch
    from bench_timing import KernelTimer

    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins.kernel_lib import KernelLib

    lib = KernelLib.load()
    bench = KernelTimer()  # median ms after a read-only L2 flush
    rows = []
    print(f"{'shape':20s} {'dtype':5s} {'kernel (softcap)':52s} {'no cap':>8s} {'cap':>8s} {'ratio':>6s} {'rel err':>8s}")
    for label, B, S, Hq, Hkv, D, causal in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            gen = torch.Generator(device="cuda").manual_seed(0)
            q = (torch.randn((B, S, Hq, D), generator=gen, device="cuda") * 4).to(dtype)
            k = torch.randn((B, S, Hkv, D), generator=gen, device="cuda").to(dtype)
            v = torch.randn((B, S, Hkv, D), generator=gen, device="cuda").to(dtype)
            out = torch.empty_like(q)
            scale = D ** -0.5
            lib.fused_attention(q, k, v, out, causal=causal, scale=scale, softcap=CAP)
            torch.cuda.synchronize()
            err = _reference_err(q, k, v, out, causal, scale, CAP)
            plan = lp.plan_fused_attention(B, S, Hq, Hkv, D, str(dtype), causal=causal, softcap=CAP)
            flops = lp.fused_attention_flops(B, S, Hq, D, causal)
            t = {"plain": [], "cap": []}
            for _ in range(3):  # interleaved
                t["plain"].append(bench(lambda: lib.fused_attention(q, k, v, out, causal=causal, scale=scale)))
                t["cap"].append(bench(lambda: lib.fused_attention(q, k, v, out, causal=causal, scale=scale,
                                                                  softcap=CAP)))
            tf = {key: flops / (min(ms) * 1e-3) / 1e12 for key, ms in t.items()}
            dt = str(dtype).replace("torch.", "")
            row = {"shape": label, "dtype": dt, "kernel": plan.kernel, "tflops_plain": tf["plain"],
                   "tflops_softcap": tf["cap"], "ratio": tf["cap"] / tf["plain"], "rel_err": err}
            rows.append(row)
            ok = "" if err < (4e-3 if dtype == torch.float16 else 2.5e-2) else "  ERROR > tolerance"
            print(f"{label:20s} {dt[:5]:5s} {plan.kernel[17:]:52s} {tf['plain']:8.1f} {tf['cap']:8.1f} "
                  f"{row['ratio']:6.3f} {err:8.1e}{ok}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
