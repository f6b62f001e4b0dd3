"""NumPy reference for the onnx_fuse attention ops: the oracle for CPU and GPU tests.

Two levels, one semantics (docs/ops.md):

* ONNX-level ops, exactly as the nodes in domain ``onnx_fuse`` compute them:
  ``fused_attention_op`` (``FusedAttention``) and ``paged_attention_op``
  (``PagedAttention``), with packed-head inputs ``[B, S, H*D]``.
* Kernel-level functions with explicit head axes, matching plugins/kernels/*.cu:
  ``fused_attention`` (layouts ``bshd``, ``bhsd`` or packed ``bsh``), ``paged_attention``
  and ``append_kv``.

Everything is computed in float64 and returned in the query's dtype (or ``out_dtype``).
NumPy has no bfloat16: tests pass bf16 data upcast to float32.

Conventions shared with the kernels:
- GQA: query head ``h`` reads kv head ``h // (Hq // Hkv)``.
- ``seq_lens[b]`` (prefill): the valid tokens of sequence ``b``: ``L >= 0`` means positions
  ``[0, L)`` (right padding), ``-L < 0`` positions ``[S - L, S)`` (left padding); keys outside
  them are masked, output rows outside them are zeros.
- causal (prefill): key ``j`` is visible to query ``i`` iff ``j <= i``.
- paged: ``seq_lens[b]`` counts the tokens in the cache *including* the ``Sq`` new ones; new
  token ``i`` sits at position ``p = seq_lens[b] - Sq + i`` and sees cache positions ``0..p``.
- ``scale`` None or 0.0 means ``1/sqrt(D)``.
- ``softcap`` (prefill; Gemma 2's logit softcap): 0.0 means none; ``c`` > 0 turns the scaled
  scores ``x`` into ``c * tanh(x / c)`` before the mask and the softmax.
- ``window`` (sliding-window attention, HF's ``sliding_window``): 0 means none; ``W`` > 0 lets
  the query at position ``p`` see key ``j`` iff ``p - W < j <= p`` (at most W keys, itself
  included). Prefill needs ``causal``; paged attention is always causal (``p`` as above).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "append_kv",
    "dequantize_e4m3",
    "fused_attention",
    "fused_attention_op",
    "is_fp8_pool",
    "paged_attention",
    "paged_attention_op",
    "quantize_e4m3",
    "resolve_scale",
]


def resolve_scale(scale: float | None, head_dim: int) -> float:
    """Softmax scale; ``None`` or 0.0 (the ONNX attribute default) means 1/sqrt(head_dim)."""
    if scale is None or float(scale) == 0.0:
        return 1.0 / float(np.sqrt(head_dim))
    return float(scale)


def _split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    b, s, hd = x.shape
    if hd % num_heads:
        raise ValueError(f"last dim {hd} is not a multiple of num_heads={num_heads}")
    return x.reshape(b, s, num_heads, hd // num_heads)


def _to_bshd(x: np.ndarray, layout: str, num_heads: int | None, name: str) -> np.ndarray:
    if layout == "bshd":
        if x.ndim != 4:
            raise ValueError(f"{name}: layout bshd needs a rank-4 array, got shape {x.shape}")
        return x
    if layout == "bhsd":
        if x.ndim != 4:
            raise ValueError(f"{name}: layout bhsd needs a rank-4 array, got shape {x.shape}")
        return x.swapaxes(1, 2)  # (a method of torch tensors too: torch_attention shares this function)
    if layout == "bsh":
        if x.ndim != 3 or num_heads is None:
            raise ValueError(f"{name}: layout bsh needs a rank-3 array and its head count")
        return _split_heads(x, num_heads)
    raise ValueError(f"unknown layout {layout!r} (bshd, bhsd or bsh)")


def _softmax_rows(scores: np.ndarray, visible: np.ndarray, sink: np.ndarray | None = None) -> np.ndarray:
    """Row softmax of float64 scores where ``visible`` is False -> weight 0; empty rows -> 0.
    ``sink`` (broadcast to the rows' shape [..., 1]): one more logit per row that takes part of
    the mass and has no value (attention sinks); a row with no visible key stays zero."""
    s = np.where(visible, scores, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.where(visible, np.exp(s - m), 0.0)
    denom = p.sum(axis=-1, keepdims=True)
    empty = denom == 0
    if sink is not None:
        denom = denom + np.exp(sink - m)
    return np.divide(p, denom, out=np.zeros_like(p), where=(denom > 0) & ~empty)


def _fused_arguments(q_shape, k_shape, v_shape, seq_lens, scale, softcap, window, causal):
    """fused_attention's checks on [B,S,H,D] shapes and its arguments (shared with torch_attention):
    (scale, softcap, window, span lengths [B], span starts [B]); seq_lens -L = the last L rows."""
    B, S, Hq, D = tuple(q_shape)
    _, Skv, Hkv, Dk = tuple(k_shape)
    if Dk != D or tuple(v_shape) != tuple(k_shape) or k_shape[0] != B:
        raise ValueError(f"shape mismatch: q {tuple(q_shape)}, k {tuple(k_shape)}, v {tuple(v_shape)}")
    if Hq % Hkv:
        raise ValueError(f"num_heads {Hq} is not a multiple of num_kv_heads {Hkv}")
    if Skv != S:
        raise ValueError(f"FusedAttention needs equal query and key lengths, got {S} and {Skv}")
    sc = resolve_scale(scale, D)
    cap = float(softcap or 0.0)
    if not (cap >= 0.0 and np.isfinite(cap)):
        raise ValueError(f"softcap must be >= 0 and finite (0 = none), got {softcap}")
    W = _check_window(window, causal=bool(causal))
    raw = np.full(B, S, dtype=np.int64) if seq_lens is None else np.asarray(seq_lens, np.int64)
    if raw.shape != (B,):
        raise ValueError(f"seq_lens must have shape [{B}], got {raw.shape}")
    lens = np.minimum(np.abs(raw), S)
    first = np.where(raw < 0, S - lens, 0)  # left padding: the span ends at S
    return sc, cap, W, lens, first


def fused_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    seq_lens: np.ndarray | None = None,
    causal: bool = False,
    scale: float | None = None,
    softcap: float = 0.0,
    window: int = 0,
    layout: str = "bshd",
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    out_dtype=None,
) -> np.ndarray:
    """Prefill/encoder attention; returns the output in the input ``layout``.

    Layouts: ``bshd`` q [B,S,Hq,D], k/v [B,S,Hkv,D] (the kernel's); ``bhsd`` [B,H,S,D];
    ``bsh`` packed [B,S,H*D] (needs ``num_heads`` and ``num_kv_heads``). ``softcap`` > 0:
    scores ``softcap * tanh(scale * q k^T / softcap)``. ``window`` W > 0 (with ``causal``):
    query ``i`` sees keys ``i - W < j <= i``.
    """
    qh = _to_bshd(np.asarray(q), layout, num_heads, "q").astype(np.float64)
    kh = _to_bshd(np.asarray(k), layout, num_kv_heads, "k").astype(np.float64)
    vh = _to_bshd(np.asarray(v), layout, num_kv_heads, "v").astype(np.float64)
    B, S, Hq, D = qh.shape
    Hkv = kh.shape[2]
    sc, cap, W, lens, first = _fused_arguments(qh.shape, kh.shape, vh.shape, seq_lens, scale, softcap, window,
                                               causal)

    group = Hq // Hkv
    kx = np.repeat(kh, group, axis=2)  # [B,S,Hq,D]
    vx = np.repeat(vh, group, axis=2)
    qt = qh.transpose(0, 2, 1, 3)  # [B,Hq,S,D]
    scores = np.matmul(qt, kx.transpose(0, 2, 3, 1)) * sc  # [B,Hq,S,S]
    if cap:
        scores = cap * np.tanh(scores / cap)
    pos = np.arange(S)
    key_ok = (pos[None, :] >= first[:, None]) & (pos[None, :] < (first + lens)[:, None])  # [B,S]
    visible = np.broadcast_to(key_ok[:, None, None, :], scores.shape)
    if causal:
        visible = visible & (pos[None, None, None, :] <= pos[None, None, :, None])
    if W:
        visible = visible & (pos[None, None, None, :] > pos[None, None, :, None] - W)
    p = _softmax_rows(scores, visible)
    out = np.matmul(p, vx.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # [B,S,Hq,D]
    out = out * key_ok[:, :, None, None]
    dt = out_dtype or np.asarray(q).dtype
    if layout == "bhsd":
        out = out.transpose(0, 2, 1, 3)
    elif layout == "bsh":
        out = out.reshape(B, S, Hq * D)
    return out.astype(dt)


def _check_window(window, *, causal: bool) -> int:
    """The sliding window as an int >= 0; a window needs causal attention (the contract)."""
    w = int(window or 0)
    if w != window and window is not None:
        raise ValueError(f"window must be an integer, got {window!r}")
    if w < 0:
        raise ValueError(f"window must be >= 0 (0 = none), got {w}")
    if w and not causal:
        raise ValueError(f"window={w} needs causal attention")
    return w


def _gather_cache(pool: np.ndarray, table_row: np.ndarray, length: int) -> np.ndarray:
    """Logical tokens [0, length) of one sequence from a pool [NB, BS, Hkv, D]."""
    bs = pool.shape[1]
    pos = np.arange(length)
    return pool[table_row[pos // bs], pos % bs]  # [length, Hkv, D]


def _paged_arguments(q_shape, qh_shape, k_shape, v_shape, scale, sinks):
    """paged_attention's checks (query q_shape as given, qh_shape [B,Sq,Hq,D]; pools [NB,BS,Hkv,D]; sinks [Hq]),
    shared with torch_attention: (query heads per kv head, scale)."""
    Hq, D = qh_shape[2], qh_shape[3]
    Hkv, Dk = k_shape[2], k_shape[3]
    if Dk != D or tuple(v_shape) != tuple(k_shape):
        raise ValueError(f"pool shapes {tuple(k_shape)}/{tuple(v_shape)} do not fit q {tuple(q_shape)}")
    if Hq % Hkv:
        raise ValueError(f"num_heads {Hq} is not a multiple of num_kv_heads {Hkv}")
    if sinks is not None and int(np.prod(np.shape(sinks))) != Hq:
        raise ValueError(f"sinks must have shape [{Hq}] (one logit per query head), got {tuple(np.shape(sinks))}")
    return Hq // Hkv, resolve_scale(scale, D)


def paged_attention(
    q: np.ndarray,
    k_pool: np.ndarray,
    v_pool: np.ndarray,
    block_tables: np.ndarray,
    seq_lens: np.ndarray,
    *,
    scale: float | None = None,
    window: int = 0,
    sinks: np.ndarray | None = None,
    out_dtype=None,
) -> np.ndarray:
    """Attention of new query tokens over a block-paged cache (kernel layouts).

    q: [B, Hq, D] (decode, one token) or [B, Sq, Hq, D]; pools [NB, BS, Hkv, D];
    block_tables int32 [B, max_blocks]; seq_lens int32 [B] (cache length incl. new tokens).
    ``window`` W > 0: new token at position ``p`` sees cache positions ``p - W < j <= p``.
    ``sinks`` [Hq] (attention sinks, GPT-OSS): query head h's softmax rows get one more logit
    ``sinks[h]`` (not scaled) whose value row is zero, so it only adds ``exp(sinks[h])`` to the
    denominator. Returns q's shape.
    """
    W = _check_window(window, causal=True)
    q = np.asarray(q)
    decode = q.ndim == 3
    qh = (q[:, None] if decode else q).astype(np.float64)
    B, Sq, Hq, D = qh.shape
    NB, BS, Hkv, Dk = k_pool.shape
    group, sc = _paged_arguments(q.shape, qh.shape, k_pool.shape, v_pool.shape, scale, sinks)
    sink = None
    if sinks is not None:
        sink = np.asarray(sinks, np.float64).reshape(-1)[:, None, None]  # [Hq, 1, 1] against the scores [Hq, Sq, L]
    tables = np.asarray(block_tables)
    lens = np.asarray(seq_lens, np.int64)
    out = np.zeros((B, Sq, Hq, D), np.float64)
    for b in range(B):
        L = int(lens[b])
        if L <= 0:
            continue
        if L > tables.shape[1] * BS:
            raise ValueError(f"seq_lens[{b}]={L} exceeds the block table ({tables.shape[1]} x {BS})")
        kc = np.repeat(_gather_cache(k_pool, tables[b], L).astype(np.float64), group, axis=1)
        vc = np.repeat(_gather_cache(v_pool, tables[b], L).astype(np.float64), group, axis=1)
        scores = np.matmul(qh[b].transpose(1, 0, 2), kc.transpose(1, 2, 0)) * sc  # [Hq,Sq,L]
        qpos = L - Sq + np.arange(Sq)
        visible = np.arange(L)[None, None, :] <= qpos[None, :, None]
        if W:
            visible = visible & (np.arange(L)[None, None, :] > qpos[None, :, None] - W)
        p = _softmax_rows(scores, np.broadcast_to(visible, scores.shape), sink)
        out[b] = np.matmul(p, vc.transpose(1, 0, 2)).transpose(1, 0, 2)
    out = out[:, 0] if decode else out
    return out.astype(out_dtype or q.dtype)


def append_kv(
    k_pool: np.ndarray,
    v_pool: np.ndarray,
    k_new: np.ndarray,
    v_new: np.ndarray,
    block_tables: np.ndarray,
    seq_lens: np.ndarray,
    *,
    inplace: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Write new tokens k_new/v_new [B, Sq, Hkv, D] ([B, Hkv, D] for one) into the pools.

    Token ``i`` of sequence ``b`` goes to position ``seq_lens[b] - Sq + i``; positions < 0 or
    past the block table are skipped (as the kernel does). Returns the (new) pools.
    """
    kn = np.asarray(k_new)
    vn = np.asarray(v_new)
    if kn.ndim == 3:
        kn, vn = kn[:, None], vn[:, None]
    kp = k_pool if inplace else np.array(k_pool, copy=True)
    vp = v_pool if inplace else np.array(v_pool, copy=True)
    B, Sq = kn.shape[:2]
    BS = kp.shape[1]
    tables = np.asarray(block_tables)
    for b in range(B):
        for i in range(Sq):
            p = int(seq_lens[b]) - Sq + i
            if p < 0 or p >= tables.shape[1] * BS:
                continue
            blk = tables[b, p // BS]
            kp[blk, p % BS] = kn[b, i]
            vp[blk, p % BS] = vn[b, i]
    return kp, vp


# --------------------------------------------------------------------------------------
# ONNX-level ops (domain onnx_fuse), exactly as docs/ops.md defines them.


def fused_attention_op(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    seq_lens: np.ndarray | None = None,
    *,
    num_heads: int,
    kv_num_heads: int | None = None,
    scale: float = 0.0,
    causal: int = 0,
    softcap: float = 0.0,
    window: int = 0,
) -> np.ndarray:
    """``onnx_fuse::FusedAttention``: query [B,S,Hq*D], key/value [B,S,Hkv*D] -> [B,S,Hq*D]."""
    kvh = kv_num_heads or num_heads
    return fused_attention(
        query, key, value, seq_lens=seq_lens, causal=bool(causal), scale=scale, softcap=softcap,
        window=window, layout="bsh", num_heads=num_heads, num_kv_heads=kvh,
    )


def paged_attention_op(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    key_cache: np.ndarray,
    value_cache: np.ndarray,
    block_tables: np.ndarray,
    seq_lens: np.ndarray,
    k_scale: np.ndarray | None = None,
    v_scale: np.ndarray | None = None,
    sinks: np.ndarray | None = None,
    *,
    num_heads: int,
    kv_num_heads: int | None = None,
    scale: float = 0.0,
    window: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``onnx_fuse::PagedAttention``: append then attend (``window`` W > 0: sliding window,
    the new token at position p sees cache positions p - W < j <= p).

    query [B,Sq,Hq*D], key/value [B,Sq,Hkv*D] (the new tokens), caches [NB,BS,Hkv,D],
    block_tables int32 [B,max_blocks], seq_lens int32 [B] (incl. the new tokens).
    Returns (output [B,Sq,Hq*D], key_cache_out, value_cache_out); TensorRT updates the caches
    in place, ONNX Runtime returns the new caches.

    fp8 (e4m3) pools: caches of e4m3 values (``ml_dtypes.float8_e4m3fn``, or their bytes as
    uint8; returned in the same form) with ``k_scale``/``v_scale`` float32 [Hkv]. The new tokens
    are stored as :func:`quantize_e4m3` of ``x / scale[h]`` and every token is read back as
    ``e4m3 * scale[h]`` (the dequantized pool is what the query attends to). With 16-bit pools
    the scales are optional and unused (the TensorRT builder feeds ones to its fixed inputs).

    ``sinks`` float32 [Hq] (optional): attention-sink logits, one more score per softmax row of
    query head h with a zero value (:func:`paged_attention`).
    """
    if (k_scale is None) != (v_scale is None):
        raise ValueError("k_scale and v_scale go together (fp8 pools) or not at all")
    kvh = kv_num_heads or num_heads
    qh = _split_heads(np.asarray(query), num_heads)
    kn = _split_heads(np.asarray(key), kvh)
    vn = _split_heads(np.asarray(value), kvh)
    B, Sq = qh.shape[:2]
    if k_scale is not None:
        ks, vs = (_kv_scale(s, kvh, n) for s, n in ((k_scale, "k_scale"), (v_scale, "v_scale")))
    if not is_fp8_pool(key_cache):   # 16-bit pools: the scales (if any) are not used
        kc, vc = append_kv(key_cache, value_cache, kn, vn, block_tables, seq_lens)
        out = paged_attention(qh, kc, vc, block_tables, seq_lens, scale=scale, window=window, sinks=sinks)
        return out.reshape(B, Sq, -1), kc, vc
    if k_scale is None:
        raise ValueError("fp8 (e4m3) pools need k_scale and v_scale")
    k8, v8 = _as_e4m3(key_cache), _as_e4m3(value_cache)
    kc, vc = append_kv(k8, v8, quantize_e4m3(kn, ks), quantize_e4m3(vn, vs), block_tables,
                       seq_lens)
    out = paged_attention(qh, dequantize_e4m3(kc, ks), dequantize_e4m3(vc, vs), block_tables,
                          seq_lens, scale=scale, window=window, sinks=sinks, out_dtype=qh.dtype)
    like = np.asarray(key_cache).dtype
    return out.reshape(B, Sq, -1), kc.view(like), vc.view(like)


def _e4m3():
    import ml_dtypes  # an onnx dependency; only the fp8 pool needs it

    return ml_dtypes.float8_e4m3fn


def is_fp8_pool(pool) -> bool:
    """Whether a cache holds e4m3 values (float8_e4m3fn, or uint8 bytes)."""
    dt = np.asarray(pool).dtype
    return dt == np.uint8 or dt.name == "float8_e4m3fn"


def _as_e4m3(pool: np.ndarray) -> np.ndarray:
    """An fp8 pool as float8_e4m3fn values (uint8 arrays are read as their e4m3 bytes)."""
    pool = np.asarray(pool)
    if pool.dtype == np.uint8:
        return pool.view(_e4m3())
    if pool.dtype != _e4m3():
        raise ValueError(f"fp8 pools hold float8_e4m3fn values or their uint8 bytes, not "
                         f"{pool.dtype}")
    return pool


def _kv_scale(s, kvh: int, name: str) -> np.ndarray:
    s = np.asarray(s, np.float32).reshape(-1)
    if s.shape != (kvh,) or not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"{name} must be {kvh} positive finite float32 values (one per kv head)")
    return s


def quantize_e4m3(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """e4m3 of ``x / scale[h]`` for x [..., Hkv, D]: float32 division (x in float32, as the fp16
    or bf16 value it holds), round to nearest even, saturated to +-448 (append_kv_fp8's rule)."""
    y = np.asarray(x, np.float32) / np.asarray(scale, np.float32)[:, None]
    return np.clip(y, -448.0, 448.0).astype(_e4m3())


def dequantize_e4m3(pool: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float64 ``e4m3 * scale[h]`` of a pool [..., Hkv, D]."""
    return _as_e4m3(pool).astype(np.float64) * np.asarray(scale, np.float64)[:, None]
