"""Sliding-window prefill rows for tools/bench_kernels.py (Gemma / Mistral-style layers).

One shape, Gemma-like B4 H32/16 D128 S4096, fp16 and bf16: the planned causal kernel without a
window, with window 1024 (key tiles below the band are skipped: about 2.3x fewer visible pairs, 2.1x
fewer 128 x 128 tiles: each query tile also computes the one straddling the band's edge) and
with window 4096 = S (the same tiles as plain causal: what the window argument costs when it
excludes nothing), beside torch cuDNN and FA2 causal (no window: torch's SDPA has none) as anchors.
Each of ours is checked first against a float32 SDPA reference with the banded mask on the same
inputs. Units: ms, and TFLOP/s of the visible (query, key) pairs (4 * D per pair per head).
"""

from __future__ import annotations


def window_pairs(S: int, W: int) -> int:
    """(query, key) pairs a causal window W (0 = none) leaves visible in one sequence of S."""
    if W <= 0 or W >= S:
        return S * (S + 1) // 2
    return W * (W + 1) // 2 + (S - W) * W


def window_tiles(S: int, W: int, bm: int = 128, bn: int = 128) -> int:
    """Key tiles the kernel computes for one sequence of S (bm-row query tiles, bn-key tiles; the
    first tile as fused_attention.cu's fa_first_tile, the last the diagonal one): the speed-up the
    tiles allow is window_tiles(S, 0) / window_tiles(S, W), below the pairs' ratio because every
    windowed query tile also computes the straddling tile at the band's lower edge."""
    total = 0
    for m0 in range(0, S, bm):
        last = min(S, m0 + bm) - 1  # the query tile's last row sees keys up to it
        j0 = max(m0 - W + 1, 0) // bn if 0 < W < S else 0
        total += last // bn + 1 - j0
    return total


def bench_prefill_window(lib, dts, bench, rel, B=4, S=4096, Hq=32, Hkv=16, D=128,
                         windows=(1024, 4096)) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for dt in dts:
        g = torch.Generator(device="cuda").manual_seed(5)
        q = torch.randn(B, S, Hq, D, device="cuda", dtype=dt, generator=g)
        k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, generator=g)
        v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, generator=g)
        out = torch.empty_like(q)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        pos = torch.arange(S, device="cuda")
        tag = f"prefill-window {str(dt)[6:]} B{B} S{S} H{Hq}/{Hkv} D{D} causal"
        cands = {}  # name -> (fn, window of ours or None for an anchor)
        for W in (0,) + tuple(windows):
            cands[f"ours planned W{W}" if W else "ours planned (no window)"] = (
                lambda W=W: lib.fused_attention(q, k, v, out, causal=True, window=W), W)
        for name, be in (("torch FA2 (no window)", SDPBackend.FLASH_ATTENTION),
                         ("torch cuDNN (no window)", SDPBackend.CUDNN_ATTENTION)):
            def f(be=be):
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
            cands[name] = (f, None)
        errs, ms = {}, {n: [] for n in cands}
        refs = {}
        for n, (fn, W) in cands.items():
            key = W or 0
            try:
                if key not in refs:
                    band = pos[None, :] <= pos[:, None]
                    if key:
                        band = band & (pos[None, :] > pos[:, None] - key)
                    with sdpa_kernel([SDPBackend.MATH]):
                        refs[key] = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), attn_mask=band,
                                                                   enable_gqa=True).transpose(1, 2)
                if W is not None:
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    errs[n] = rel(out, refs[key])
                else:
                    errs[n] = rel(fn().transpose(1, 2), refs[0])
            except Exception as e:  # a backend may not take this shape
                errs[n] = f"unavailable: {type(e).__name__}: {str(e)[:80]}"
        del refs
        torch.cuda.empty_cache()
        for _ in range(2):
            for n, (fn, _) in cands.items():
                if not isinstance(errs[n], str):
                    ms[n].append(bench(fn))
        for n, (fn, W) in cands.items():
            flops = 4 * B * Hq * D * window_pairs(S, W or 0)
            tf = [flops / (m * 1e-3) / 1e12 for m in ms[n]]
            rows.append({"kind": "prefill-window", "name": f"{tag} | {n}", "unit": "TFLOP/s", "values": tf,
                         "ms": ms[n], "rel_err": errs[n]})
            print(f"{tag} | {n}: {[f'{m:.3f}' for m in ms[n]]} ms, {[f'{x:.0f}' for x in tf]} TFLOP/s "
                  f"(visible pairs) err {errs[n]}", flush=True)
        base = ms["ours planned (no window)"]
        for W in windows:
            got = ms[f"ours planned W{W}"]
            if base and got:
                sp = [b / w for b, w in zip(base, got)]
                ideal = window_pairs(S, 0) / window_pairs(S, W)
                tiles = window_tiles(S, 0) / window_tiles(S, W)  # 128 x 128 tiles (the planned bodies)
                rows.append({"kind": "prefill-window", "name": f"{tag} | speed-up W{W} / no window (planned)",
                             "unit": "x", "values": sp, "ideal": ideal, "ideal_tiles": tiles})
                print(f"{tag} | W{W} / no window: {' / '.join(f'{x:.2f}' for x in sp)}x (ideal {ideal:.2f}x, "
                      f"tiles {tiles:.2f}x)", flush=True)
        del q, k, v, out, qt, kt, vt
        torch.cuda.empty_cache()
    return rows
