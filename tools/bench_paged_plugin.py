"""Time the PagedAttention plugin's JIT launch sequence beside the bare kernels; print a table.

    python tools/bench_paged_plugin.py [--json OUT.json]

``paged_attention_plugin.run_jit`` is what the plugin's ``impl`` runs on TensorRT's buffers:
append_kv, then paged_decode (Sq = 1, split-K with the plugin's per-stream workspace) or paged_prefill
(Sq > 1). TensorRT cannot run on the lent GPU, so the buffers are torch CUDA tensors behind the
interface TensorRT hands the plugin (pointer, shape, element strides). Rows:

* prefix: 4096 cached + 512 new tokens per sequence (B8, 32 q / 8 kv heads, block 16, shuffled
  block table): the plugin sequence (append + prefill) beside the prefill kernel alone on the
  already-appended pool, TFLOP/s (4 * Hq * D * visible keys, causal bottom-right);
* decode: ctx 4096, block 16: the plugin sequence (append + split-K decode, launches replayed
  from a trace) beside KernelLib's own planned decode (split-K as launch_plan picks it, no append;
  its Python side plans and allocates a workspace per call) and the one-split decode
  alone, GB/s of K/V read (sum(seq_lens) * Hkv * D * 2 * 2 bytes).

Each plugin output is first checked against a float32 torch reference on the same K/V
(||out-ref||/||ref||). Candidates of a row are timed interleaved, in two passes; both medians
(of 7 rounds of 10 launches) are printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _Buffer:
    def __init__(self, t):
        self.data_ptr, self.shape, self.strides = t.data_ptr(), tuple(t.shape), tuple(t.stride())


def _setup(torch, B, Hq, Hkv, D, bs, prefix, sq, dtype, gen):
    L = prefix + sq
    nblk = -(-L // bs)
    k = torch.randn((B, L, Hkv, D), generator=gen, device="cuda").to(dtype)
    v = torch.randn((B, L, Hkv, D), generator=gen, device="cuda").to(dtype)
    perm = torch.randperm(B * nblk, generator=gen, device="cuda").to(torch.int32)
    tables = perm.view(B, nblk).contiguous()
    k_pool = torch.zeros((B * nblk, bs, Hkv, D), dtype=dtype, device="cuda")
    v_pool = torch.zeros_like(k_pool)
    pos = torch.arange(prefix, device="cuda")
    for b in range(B):   # the cached prefix; the new tokens come from key/value
        blk = tables[b, pos // bs].long()
        k_pool[blk, pos % bs] = k[b, :prefix]
        v_pool[blk, pos % bs] = v[b, :prefix]
    q = torch.randn((B, sq, Hq * D), generator=gen, device="cuda").to(dtype)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    key = k[:, prefix:].reshape(B, sq, Hkv * D).contiguous()
    value = v[:, prefix:].reshape(B, sq, Hkv * D).contiguous()
    return dict(q=q, key=key, value=value, k_pool=k_pool, v_pool=v_pool, tables=tables, lens=lens,
                k=k, v=v)


def _reference(torch, s, Hq, Hkv, D, prefix, sq):
    B, L = s["k"].shape[:2]
    q = s["q"].float().view(B, sq, Hq, D).transpose(1, 2)
    k = s["k"].float().repeat_interleave(Hq // Hkv, dim=2).transpose(1, 2)
    v = s["v"].float().repeat_interleave(Hq // Hkv, dim=2).transpose(1, 2)
    mask = torch.arange(L, device="cuda")[None, :] <= (prefix + torch.arange(sq, device="cuda"))[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(B, sq, Hq * D)


def _time(torch, fn, rounds=7, inner=10):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner * 1e-3)
    return sorted(times)[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch

    from onnx_fuse.plugins import paged_attention_plugin as pa
    from onnx_fuse.plugins.kernel_lib import KernelLib

    lib = KernelLib.load()
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    cases = [("prefix", torch.float16, 8, 32, 8, 128, 16, 4096, 512),
             ("prefix", torch.bfloat16, 8, 32, 8, 128, 16, 4096, 512),
             ("prefix", torch.float16, 8, 32, 8, 64, 16, 4096, 512),
             ("decode", torch.float16, 64, 32, 8, 128, 16, 4095, 1),
             ("decode", torch.float16, 4, 32, 8, 128, 16, 4095, 1)]
    for kind, dtype, B, Hq, Hkv, D, bs, prefix, sq in cases:
        s = _setup(torch, B, Hq, Hkv, D, bs, prefix, sq, dtype, gen)
        out = torch.empty_like(s["q"])
        dt = str(dtype).replace("torch.", "")
        bufs = [_Buffer(s[n]) for n in ("q", "key", "value", "k_pool", "v_pool", "tables", "lens")]

        def plugin():
            pa.run_jit(lib, *bufs, _Buffer(out), num_heads=Hq, kv_num_heads=Hkv, scale=0.0,
                       dtype=dt, stream=stream)

        plugin()
        torch.cuda.synchronize()
        ref = _reference(torch, s, Hq, Hkv, D, prefix, sq)
        err = float((out.float() - ref).norm() / ref.norm())
        q4 = s["q"].view(B, sq, Hq, D)
        o4 = torch.empty_like(q4)
        if kind == "prefix":
            cands = {"plugin (append + prefill)": plugin,
                     "prefill kernel alone": lambda: lib.paged_prefill(
                         q4, s["k_pool"], s["v_pool"], s["tables"], s["lens"], o4, stream=stream)}
            work = 4.0 * B * Hq * D * sum(prefix + i + 1 for i in range(sq)) / 1e12   # TFLOP
            unit = "TFLOP/s"
        else:
            q3, o3 = q4[:, 0], o4[:, 0]
            cands = {"plugin (append + split-K decode)": plugin,
                     "decode planned (split-K)": lambda: lib.paged_decode(
                         q3, s["k_pool"], s["v_pool"], s["tables"], s["lens"], o3, stream=stream),
                     "decode 1 split": lambda: lib.paged_decode(
                         q3, s["k_pool"], s["v_pool"], s["tables"], s["lens"], o3, num_splits=1,
                         stream=stream)}
            work = B * (prefix + 1) * Hkv * D * 2 * 2 / 1e9   # GB of K/V read
            unit = "GB/s"
        rates = {n: [] for n in cands}
        for _ in range(2):
            for n, fn in cands.items():
                rates[n].append(work / _time(torch, fn))
        label = f"{kind} {dt} B{B} H{Hq}/{Hkv} D{D} bs{bs} ctx {prefix}+{sq}"
        print(f"{label}  (plugin rel err {err:.1e})")
        for n, r in rates.items():
            print(f"    {n:34s} {r[0]:8.1f} / {r[1]:8.1f} {unit}")
        rows.append({"case": label, "rel_err": err, "unit": unit, "rates": rates})
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
