"""torch float64 twins of ``fused_attention`` and ``paged_attention`` (onnx_fuse.reference.attention).

The same contract, the same arguments and the same float64 arithmetic as the NumPy reference, computed with
torch on a chosen device: the GPU kernel tests (tests/plugins/*_gpu.py) check every case against these on the
GPU, where the NumPy reference spent most of their time (its [B, H, S, S] float64 scores on the host: seconds
per case at S ~ 1000-2000). tests/reference/test_torch_attention.py checks them against the NumPy reference
on the CPU (torch float64 runs there too) over every option: ragged / left padding, causal, GQA / MQA,
softcap, windows, sinks, decode and multi-token paged queries.

Inputs are NumPy arrays or torch tensors. The device is ``device`` if given, else the device of ``q`` when it
is a tensor, else the CPU. A NumPy ``q`` returns a NumPy array (``out_dtype``, default q's dtype, as the NumPy
reference does); a torch ``q`` returns a float64 tensor on the device.
"""

from __future__ import annotations

import numpy as np
import torch

from onnx_fuse.reference.attention import _check_window, _fused_arguments, _paged_arguments, _to_bshd

__all__ = ["fused_attention", "paged_attention"]

# scores held at once per batch row: heads are taken in chunks of at most this many float64 elements
_SCORE_ELEMS = 1 << 28


def _device(q, device) -> torch.device:
    if device is not None:
        return torch.device(device)
    return q.device if isinstance(q, torch.Tensor) else torch.device("cpu")


def _f64(x, dev: torch.device) -> torch.Tensor:
    """x (tensor or array) as float64 on dev; the narrow dtype crosses to the device first."""
    if isinstance(x, torch.Tensor):
        return x.detach().to(dev).to(torch.float64)
    a = np.asarray(x)
    if a.dtype not in (np.float16, np.float32, np.float64):
        a = a.astype(np.float32 if a.dtype.itemsize <= 4 else np.float64)  # bfloat16 / fp8 (ml_dtypes): exact
    return torch.from_numpy(np.ascontiguousarray(a)).to(dev).to(torch.float64)


def _ints(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, np.int64)


def _softmax_rows(scores: torch.Tensor, visible: torch.Tensor, sink: torch.Tensor | None = None) -> torch.Tensor:
    """reference.attention._softmax_rows in torch: invisible -> weight 0, empty rows -> 0, ``sink`` one more
    logit per row (no value) that takes part of the mass."""
    s = scores.masked_fill(~visible, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    if sink is not None:
        m = torch.maximum(m, sink)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.where(visible, torch.exp(s - m), torch.zeros_like(s))
    denom = p.sum(dim=-1, keepdim=True)
    empty = denom == 0
    if sink is not None:
        denom = denom + torch.exp(sink - m)
    ok = (denom > 0) & ~empty
    return torch.where(ok, p / torch.where(ok, denom, torch.ones_like(denom)), torch.zeros_like(p))


def _finish(out: torch.Tensor, q, out_dtype):
    if isinstance(q, torch.Tensor):
        return out
    return out.cpu().numpy().astype(out_dtype or np.asarray(q).dtype)


def fused_attention(q, k, v, *, seq_lens=None, causal: bool = False, scale: float | None = None,
                    softcap: float = 0.0, window: int = 0, layout: str = "bshd", num_heads: int | None = None,
                    num_kv_heads: int | None = None, out_dtype=None, device=None):
    """reference.fused_attention (same arguments and result) in torch float64 on ``device``."""
    dev = _device(q, device)
    qh = _to_bshd(_f64(q, dev), layout, num_heads, "q")
    kh = _to_bshd(_f64(k, dev), layout, num_kv_heads, "k")
    vh = _to_bshd(_f64(v, dev), layout, num_kv_heads, "v")
    B, S, Hq, D = qh.shape
    Hkv = kh.shape[2]
    sl = None if seq_lens is None else _ints(seq_lens)
    sc, cap, W, lens, first = _fused_arguments(qh.shape, kh.shape, vh.shape, sl, scale, softcap, window, causal)

    group = Hq // Hkv
    pos = torch.arange(S, device=dev)
    band = torch.ones((S, S), dtype=torch.bool, device=dev)  # [query, key]
    if causal:
        band &= pos[None, :] <= pos[:, None]
    if W:
        band &= pos[None, :] > pos[:, None] - W
    out = torch.zeros((B, S, Hq, D), dtype=torch.float64, device=dev)
    hc = max(1, min(Hq, _SCORE_ELEMS // max(1, S * S)))
    for b in range(B):
        key_ok = (pos >= int(first[b])) & (pos < int(first[b] + lens[b]))  # [S]
        visible = band & key_ok[None, :]
        for h0 in range(0, Hq, hc):
            h1 = min(Hq, h0 + hc)
            kv_heads = torch.arange(h0, h1, device=dev) // group
            qt = qh[b, :, h0:h1].transpose(0, 1)  # [h, S, D]
            kt = kh[b][:, kv_heads].permute(1, 2, 0)  # [h, D, S]
            vt = vh[b][:, kv_heads].transpose(0, 1)  # [h, S, D]
            scores = torch.matmul(qt, kt) * sc
            if cap:
                scores = cap * torch.tanh(scores / cap)
            p = _softmax_rows(scores, visible[None].expand_as(scores))
            out[b, :, h0:h1] = torch.matmul(p, vt).transpose(0, 1)
        out[b] *= key_ok[:, None, None]
    if layout == "bhsd":
        out = out.transpose(1, 2)
    elif layout == "bsh":
        out = out.reshape(B, S, Hq * D)
    return _finish(out, q, out_dtype)


def paged_attention(q, k_pool, v_pool, block_tables, seq_lens, *, scale: float | None = None, window: int = 0,
                    sinks=None, out_dtype=None, device=None):
    """reference.paged_attention (same arguments and result) in torch float64 on ``device``."""
    W = _check_window(window, causal=True)
    dev = _device(q, device)
    qf = _f64(q, dev)
    decode = qf.ndim == 3
    qh = qf[:, None] if decode else qf
    B, Sq, Hq, D = qh.shape
    kp, vp = _f64(k_pool, dev), _f64(v_pool, dev)
    NB, BS, Hkv, Dk = kp.shape
    group, sc = _paged_arguments(qf.shape, qh.shape, kp.shape, vp.shape, scale, sinks)
    sink = None
    if sinks is not None:
        sink = _f64(sinks, dev).reshape(-1)[:, None, None]  # [Hq, 1, 1] against the scores [Hq, Sq, L]
    tables = _ints(block_tables)
    lens = _ints(seq_lens)
    out = torch.zeros((B, Sq, Hq, D), dtype=torch.float64, device=dev)
    for b in range(B):
        L = int(lens[b])
        if L <= 0:
            continue
        if L > tables.shape[1] * BS:
            raise ValueError(f"seq_lens[{b}]={L} exceeds the block table ({tables.shape[1]} x {BS})")
        p_idx = np.arange(L)
        blk = torch.from_numpy(tables[b][p_idx // BS]).to(dev)
        slot = torch.from_numpy(p_idx % BS).to(dev)
        kc = kp[blk, slot].repeat_interleave(group, dim=1)  # [L, Hq, D]
        vc = vp[blk, slot].repeat_interleave(group, dim=1)
        scores = torch.matmul(qh[b].transpose(0, 1), kc.permute(1, 2, 0)) * sc  # [Hq, Sq, L]
        qpos = L - Sq + torch.arange(Sq, device=dev)
        kpos = torch.arange(L, device=dev)
        visible = kpos[None, :] <= qpos[:, None]
        if W:
            visible = visible & (kpos[None, :] > qpos[:, None] - W)
        p = _softmax_rows(scores, visible[None].expand_as(scores), sink)
        out[b] = torch.matmul(p, vc.transpose(0, 1)).transpose(0, 1)
    out = out[:, 0] if decode else out
    return _finish(out, q, out_dtype)
