"""Attention written by people, not by transformers: small PyTorch modules in the idioms of research code,
training repos and small production models (hold-out 14, tools/holdout_specs.py HOLDOUT8A).

Each idiom is written here from its description (no code taken from the projects that made it common):
  gpt_tril       fused qkv Linear, split(C, dim=2), view/transpose; a registered tril buffer sliced
                 [:, :, S-T:S, :S] and masked_fill(-inf) (nanoGPT / minGPT style); learned positions
  gpt_sdpa       the same block with F.scaled_dot_product_attention(is_causal=True)
  vit_cls        timm-style ViT: qkv -> reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0), the scale
  vit_nocls      folded into q before q @ k^T; with a class token / without one
  mha_bf         nn.MultiheadAttention(batch_first=True), key_padding_mask (encoder)
  mha_sf         nn.MultiheadAttention(batch_first=False), a float causal attn_mask (decoder)
  tel_post       nn.TransformerEncoderLayer norm_first=False / True in nn.TransformerEncoder
  tel_pre
  tdl            nn.TransformerDecoderLayer (norm_first) in nn.TransformerDecoder over a memory (seq2seq decoder)
  einsum         einsum("bhid,bhjd->bhij") attention, "b n (h d)" rearranges written as reshape/permute
  llama_ref      Llama-reference RoPE on interleaved pairs (x[..., ::2], x[..., 1::2] -> stack -> flatten)
                 from cos/sin buffers, RMSNorm as x * rsqrt(mean(x^2) + eps) * w, GQA by repeat_interleave,
                 the triu(-inf) mask hstacked after zeros for the cache, SwiGLU
  neox_parallel  partial rotary (rotate-half on the first 25% of the head), parallel residual (attention
                 and MLP from the same norm), F.rms_norm, GQA by expand + reshape, F.sdpa with a bool mask
  mqa            one kv head broadcast by matmul, an additive triu(finfo.min) mask, learned positions
  alibi          ALiBi slopes * (key position - query position) built by hand, a tril bool mask
  sliding        a sliding-window mask from torch.ones(T, S).tril(S - T).triu(S - T - W + 1), rotate-half RoPE
  t5_relbias     a T5-style relative position bucket table (Embedding(buckets, heads)), no scale, RMSNorm
  qknorm         LayerNorm on q and k per head before RoPE, F.sdpa with a bool mask
Decoders take (input_ids, attention_mask[, past (key, value) per layer as [B, Hkv, P, D]]) and return logits
(and the presents); encoders (input_ids, attention_mask) -> hidden states; vision pixel_values -> hidden
states; the seq2seq decoder (input_ids, encoder_hidden_states, encoder_attention_mask) -> logits.
`wrapper(spec, model, kv)` gives export_corpus the module it exports.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MAX_POS = 128  # buffers (tril, cos / sin) cover this many positions


def _past_len(past) -> int:
    return past[0].shape[2] if past is not None else 0


def _cat_past(k, v, past):
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    return k, v


class ManualRMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * w, as reference implementations write it."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class FuncRMSNorm(nn.Module):
    """F.rms_norm (torch 2.4+)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


NORMS = {"ln": nn.LayerNorm, "rms": ManualRMSNorm, "frms": FuncRMSNorm}


class GeluMLP(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.fc, self.proj = nn.Linear(c, f), nn.Linear(f, c)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class SwiGLU(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(c, f, bias=False), nn.Linear(f, c, bias=False), nn.Linear(c, f, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def _rope_tables(dim, base=10000.0):
    """cos / sin [MAX_POS, dim / 2] of the usual inverse-frequency ladder."""
    inv = 1.0 / base ** (torch.arange(0, dim, 2).float() / dim)
    ang = torch.outer(torch.arange(MAX_POS).float(), inv)
    return ang.cos(), ang.sin()


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class _Attn(nn.Module):
    """Shared sizes; subclasses write their own forward(x, pad, past) -> (y, (k, v))."""

    def __init__(self, cfg):
        super().__init__()
        self.c, self.h = cfg["hidden_size"], cfg["num_attention_heads"]
        self.hkv = cfg.get("num_key_value_heads", self.h)
        self.d = cfg.get("head_dim", self.c // self.h)


# ---- decoder attention idioms ---------------------------------------------------------------------------

class GPTTrilAttn(_Attn):
    def __init__(self, cfg, sdpa=False):
        super().__init__(cfg)
        self.sdpa = sdpa
        self.c_attn, self.c_proj = nn.Linear(self.c, 3 * self.c), nn.Linear(self.c, self.c)
        self.register_buffer("bias", torch.tril(torch.ones(MAX_POS, MAX_POS)).view(1, 1, MAX_POS, MAX_POS),
                             persistent=False)

    def forward(self, x, pad, past):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.c, dim=2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        k, v = _cat_past(k, v, past)
        S = k.size(2)
        if self.sdpa:  # is_causal aligns top-left: right only without a cache (the idiom has none)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, S - T:S, :S] == 0, float("-inf"))
            if pad is not None:
                att = att.masked_fill(~pad[:, None, None, :], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), (k, v)


class LlamaRefAttn(_Attn):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.wq = nn.Linear(self.c, self.h * self.d, bias=False)
        self.wk = nn.Linear(self.c, self.hkv * self.d, bias=False)
        self.wv = nn.Linear(self.c, self.hkv * self.d, bias=False)
        self.wo = nn.Linear(self.h * self.d, self.c, bias=False)
        cos, sin = _rope_tables(self.d)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @staticmethod
    def rope(x, cos, sin):
        """Rotate interleaved pairs (x0, x1) of x [B, T, H, D] with real arithmetic."""
        x0, x1 = x[..., ::2], x[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)

    def forward(self, x, pad, past):
        B, T, _ = x.shape
        P = _past_len(past)
        xq = self.wq(x).view(B, T, self.h, self.d)
        xk = self.wk(x).view(B, T, self.hkv, self.d)
        xv = self.wv(x).view(B, T, self.hkv, self.d)
        cos, sin = self.cos[P:P + T], self.sin[P:P + T]
        xq, xk = self.rope(xq, cos, sin), self.rope(xk, cos, sin)
        q, k, v = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        k, v = _cat_past(k, v, past)
        keys = torch.repeat_interleave(k, self.h // self.hkv, dim=1)
        values = torch.repeat_interleave(v, self.h // self.hkv, dim=1)
        scores = q @ keys.transpose(2, 3) / math.sqrt(self.d)
        mask = torch.full((T, T), float("-inf"), device=x.device).triu(1)
        mask = torch.hstack([torch.zeros((T, P), device=x.device), mask])
        scores = scores + mask
        if pad is not None:
            scores = scores.masked_fill(~pad[:, None, None, :], float("-inf"))
        scores = F.softmax(scores.float(), dim=-1).type_as(q)
        out = (scores @ values).transpose(1, 2).contiguous().view(B, T, -1)
        return self.wo(out), (k, v)


def _bool_causal(T, S, pad, device):
    """[B|1, 1, T, S] True = attend: the last T of S positions attend to themselves and before."""
    m = torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)[None, None]
    return m if pad is None else m & pad[:, None, None, :]


class NeoXParallelAttn(_Attn):
    """Partial rotary (the first 25% of the head, rotate-half), GQA by expand + reshape, F.sdpa."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.rot = self.d // 4
        self.qkv = nn.Linear(self.c, (self.h + 2 * self.hkv) * self.d)
        self.dense = nn.Linear(self.h * self.d, self.c)
        cos, sin = _rope_tables(self.rot)
        self.register_buffer("cos", torch.cat([cos, cos], -1), persistent=False)
        self.register_buffer("sin", torch.cat([sin, sin], -1), persistent=False)

    def _rotary(self, x, cos, sin):
        x_rot, x_pass = x[..., :self.rot], x[..., self.rot:]
        return torch.cat([x_rot * cos + _rotate_half(x_rot) * sin, x_pass], dim=-1)

    def forward(self, x, pad, past):
        B, T, _ = x.shape
        P = _past_len(past)
        q, k, v = self.qkv(x).split([self.h * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        q = q.view(B, T, self.h, self.d).transpose(1, 2)
        k = k.view(B, T, self.hkv, self.d).transpose(1, 2)
        v = v.view(B, T, self.hkv, self.d).transpose(1, 2)
        cos, sin = self.cos[P:P + T], self.sin[P:P + T]
        q, k = self._rotary(q, cos, sin), self._rotary(k, cos, sin)
        k, v = _cat_past(k, v, past)
        S, rep = k.shape[2], self.h // self.hkv
        kk = k[:, :, None].expand(B, self.hkv, rep, S, self.d).reshape(B, self.h, S, self.d)
        vv = v[:, :, None].expand(B, self.hkv, rep, S, self.d).reshape(B, self.h, S, self.d)
        y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=_bool_causal(T, S, pad, x.device))
        return self.dense(y.transpose(1, 2).reshape(B, T, self.h * self.d)), (k, v)


class MQAAttn(_Attn):
    """One kv head: [B, 1, S, D] keys broadcast against [B, H, T, D] queries by the matmul itself."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.q = nn.Linear(self.c, self.h * self.d)
        self.kv = nn.Linear(self.c, 2 * self.d)
        self.o = nn.Linear(self.h * self.d, self.c)

    def forward(self, x, pad, past):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.h, self.d).permute(0, 2, 1, 3)
        k, v = self.kv(x).unsqueeze(1).chunk(2, dim=-1)  # [B, 1, T, D]
        k, v = _cat_past(k, v, past)
        S = k.shape[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / self.d ** 0.5
        neg = torch.finfo(scores.dtype).min
        scores = scores + torch.triu(torch.full((T, S), neg, device=x.device), diagonal=S - T + 1)
        if pad is not None:
            scores = scores + (1.0 - pad[:, None, None, :].to(scores.dtype)) * neg
        y = torch.matmul(scores.softmax(-1), v)
        return self.o(y.permute(0, 2, 1, 3).reshape(B, T, -1)), (k, v)


class AlibiAttn(_Attn):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.qkv, self.out = nn.Linear(self.c, 3 * self.c), nn.Linear(self.c, self.c)
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / self.h) for i in range(self.h)])
        self.register_buffer("slopes", slopes, persistent=False)

    def forward(self, x, pad, past):
        B, T, _ = x.shape
        P = _past_len(past)
        q, k, v = self.qkv(x).reshape(B, T, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        k, v = _cat_past(k, v, past)
        S = k.shape[2]
        qpos = torch.arange(P, P + T, device=x.device)
        kpos = torch.arange(S, device=x.device)
        bias = self.slopes[:, None, None] * (kpos[None, None, :] - qpos[None, :, None]).float()
        scores = (q @ k.transpose(-2, -1)) * self.d ** -0.5 + bias
        scores = scores.masked_fill(~_bool_causal(T, S, pad, x.device), float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(B, T, self.c)), (k, v)


class SlidingAttn(_Attn):
    """Rotate-half RoPE, a window of `sliding_window` keys built with tril / triu offsets."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.window = cfg["sliding_window"]
        self.q, self.k = nn.Linear(self.c, self.c, bias=False), nn.Linear(self.c, self.c, bias=False)
        self.v, self.o = nn.Linear(self.c, self.c, bias=False), nn.Linear(self.c, self.c, bias=False)
        cos, sin = _rope_tables(self.d)
        self.register_buffer("cos", torch.cat([cos, cos], -1), persistent=False)
        self.register_buffer("sin", torch.cat([sin, sin], -1), persistent=False)

    def forward(self, x, pad, past):
        B, T, _ = x.shape
        P = _past_len(past)
        q, k, v = (lin(x).view(B, T, self.h, self.d).transpose(1, 2) for lin in (self.q, self.k, self.v))
        cos, sin = self.cos[P:P + T], self.sin[P:P + T]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = _cat_past(k, v, past)
        S = k.shape[2]
        keep = torch.ones(T, S, dtype=torch.bool, device=x.device)
        keep = keep.tril(diagonal=S - T).triu(diagonal=S - T - self.window + 1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d)
        scores = scores.masked_fill(~keep, float("-inf"))
        if pad is not None:
            scores = scores.masked_fill(~pad[:, None, None, :], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, self.c)), (k, v)


class QKNormAttn(_Attn):
    """LayerNorm over the head dim on q and k (per head), then rotate-half RoPE, F.sdpa."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.wqkv, self.wo = nn.Linear(self.c, 3 * self.c, bias=False), nn.Linear(self.c, self.c, bias=False)
        self.q_norm, self.k_norm = nn.LayerNorm(self.d), nn.LayerNorm(self.d)
        cos, sin = _rope_tables(self.d)
        self.register_buffer("cos", torch.cat([cos, cos], -1), persistent=False)
        self.register_buffer("sin", torch.cat([sin, sin], -1), persistent=False)

    def forward(self, x, pad, past):
        B, T, _ = x.shape
        P = _past_len(past)
        q, k, v = self.wqkv(x).chunk(3, dim=-1)
        q = self.q_norm(q.view(B, T, self.h, self.d)).transpose(1, 2)
        k = self.k_norm(k.view(B, T, self.h, self.d)).transpose(1, 2)
        v = v.view(B, T, self.h, self.d).transpose(1, 2)
        cos, sin = self.cos[P:P + T], self.sin[P:P + T]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = _cat_past(k, v, past)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=_bool_causal(T, k.shape[2], pad, x.device))
        return self.wo(y.transpose(1, 2).reshape(B, T, self.c)), (k, v)


class TorchMHA(_Attn):
    """nn.MultiheadAttention, batch_first True or False (seq-first: [T, B, C] in and out)."""

    def __init__(self, cfg, batch_first, causal):
        super().__init__(cfg)
        self.batch_first, self.causal = batch_first, causal
        self.mha = nn.MultiheadAttention(self.c, self.h, batch_first=batch_first)

    def forward(self, x, pad, past):
        T = x.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf"), device=x.device), diagonal=1) if self.causal else None
        kpm = None if pad is None else ~pad
        if kpm is not None and mask is not None:  # one mask dtype (a float attn_mask wants a float padding mask)
            kpm = torch.zeros(kpm.shape, device=x.device).masked_fill(kpm, float("-inf"))
        h = x if self.batch_first else x.transpose(0, 1)
        y, _ = self.mha(h, h, h, key_padding_mask=kpm, attn_mask=mask, need_weights=False)
        return (y if self.batch_first else y.transpose(0, 1)), None


# ---- encoder attention idioms ---------------------------------------------------------------------------

class EinsumAttn(_Attn):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.scale = self.d ** -0.5
        self.to_qkv = nn.Linear(self.c, 3 * self.h * self.d, bias=False)
        self.to_out = nn.Linear(self.h * self.d, self.c)

    def forward(self, x, pad, past):
        B, N, _ = x.shape
        # "b n (h d) -> b h n d"
        q, k, v = (t.reshape(B, N, self.h, self.d).permute(0, 2, 1, 3) for t in self.to_qkv(x).chunk(3, dim=-1))
        sim = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if pad is not None:
            sim = sim.masked_fill(~pad[:, None, None, :], -torch.finfo(sim.dtype).max)
        out = torch.einsum("bhij,bhjd->bhid", sim.softmax(dim=-1), v)
        return self.to_out(out.permute(0, 2, 1, 3).reshape(B, N, self.h * self.d)), None  # "b h n d -> b n (h d)"


class T5RelAttn(_Attn):
    """No scale; the position bias (shared by the layers) and the additive padding mask come in as `bias`."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.q, self.k = nn.Linear(self.c, self.h * self.d, bias=False), nn.Linear(self.c, self.h * self.d, bias=False)
        self.v, self.o = nn.Linear(self.c, self.h * self.d, bias=False), nn.Linear(self.h * self.d, self.c, bias=False)

    def forward(self, x, bias, past):
        B, T, _ = x.shape
        q, k, v = (lin(x).view(B, -1, self.h, self.d).transpose(1, 2) for lin in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(3, 2)) + bias
        w = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o(torch.matmul(w, v).transpose(1, 2).contiguous().view(B, -1, self.h * self.d)), None


def relative_bucket(rel, num_buckets, max_distance):
    """Bidirectional buckets: half per sign; exact below num_buckets / 4, logarithmic up to max_distance."""
    half = num_buckets // 2
    out = (rel > 0).long() * half
    n = rel.abs()
    exact = half // 2
    log = exact + (torch.log(n.float() / exact + 1e-6) / math.log(max_distance / exact) * (half - exact)).long()
    log = torch.clamp(log, max=half - 1)
    return out + torch.where(n < exact, n, log)


# ---- models -----------------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, cfg, attn, parallel=False):
        super().__init__()
        c, f = cfg["hidden_size"], cfg["intermediate_size"]
        norm = NORMS[cfg.get("norm", "ln")]
        self.attn, self.parallel = attn, parallel
        self.n1 = norm(c)
        self.n2 = None if parallel else norm(c)
        self.mlp = SwiGLU(c, f) if cfg.get("mlp") == "swiglu" else GeluMLP(c, f)

    def forward(self, x, pad, past):
        if self.parallel:  # attention and MLP read the same normed input
            h = self.n1(x)
            a, present = self.attn(h, pad, past)
            return x + a + self.mlp(h), present
        a, present = self.attn(self.n1(x), pad, past)
        x = x + a
        return x + self.mlp(self.n2(x)), present


ATTN = {"gpt_tril": GPTTrilAttn, "gpt_sdpa": lambda cfg: GPTTrilAttn(cfg, sdpa=True), "llama_ref": LlamaRefAttn,
        "neox_parallel": NeoXParallelAttn, "mqa": MQAAttn, "alibi": AlibiAttn, "sliding": SlidingAttn,
        "qknorm": QKNormAttn, "mha_sf": lambda cfg: TorchMHA(cfg, batch_first=False, causal=True),
        "mha_bf": lambda cfg: TorchMHA(cfg, batch_first=True, causal=False), "einsum": EinsumAttn}


class _TokenModel(nn.Module):
    """The language models' start: a token embedding ``wte`` and, with ``positions``, MAX_POS
    learned positions ``wpe`` (made in this order, before the rest: the seeded weights stay)."""

    def __init__(self, cfg, positions: bool):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.wpe = nn.Embedding(MAX_POS, cfg["hidden_size"]) if positions else None

    def embed(self, input_ids, start=None):
        """wte(ids) + wpe(positions start .. start + T) (``start`` None: arange(T), as written)."""
        x = self.wte(input_ids)
        if self.wpe is None:
            return x
        T, dev = input_ids.shape[1], input_ids.device
        return x + self.wpe(torch.arange(T, device=dev) if start is None else torch.arange(start, start + T, device=dev))


class DecoderLM(_TokenModel):
    """Token embedding (+ learned positions), blocks, final norm, LM head; `past` per layer (k, v)."""

    def __init__(self, cfg):
        super().__init__(cfg, bool(cfg.get("learned_positions")))
        c = cfg["hidden_size"]
        self.blocks = nn.ModuleList(Block(cfg, ATTN[cfg["idiom"]](cfg), cfg.get("parallel", False))
                                    for _ in range(cfg["num_hidden_layers"]))
        self.norm = NORMS[cfg.get("norm", "ln")](c)
        self.head = nn.Linear(c, cfg["vocab_size"], bias=False)

    def forward(self, input_ids, attention_mask=None, past=None):
        x = self.embed(input_ids, _past_len(past[0]) if past else 0)
        pad = attention_mask.bool() if attention_mask is not None and self.cfg.get("padding", True) else None
        presents = []
        for i, blk in enumerate(self.blocks):
            x, present = blk(x, pad, past[i] if past else None)
            presents.append(present)
        return self.head(self.norm(x)), presents

    def past_shapes(self, ids):
        hkv = self.cfg.get("num_key_value_heads", self.cfg["num_attention_heads"])
        d = self.cfg.get("head_dim", self.cfg["hidden_size"] // self.cfg["num_attention_heads"])
        shape = (ids.shape[0], hkv, ids.shape[1], d)
        return [(shape, shape)] * self.cfg["num_hidden_layers"]


class EncoderModel(_TokenModel):
    """Bidirectional blocks with a key padding mask; t5_relbias adds its bucketed position bias."""

    def __init__(self, cfg):
        super().__init__(cfg, bool(cfg.get("learned_positions")))
        c = cfg["hidden_size"]
        t5 = cfg["idiom"] == "t5_relbias"
        self.rel = nn.Embedding(cfg["relative_attention_num_buckets"], cfg["num_attention_heads"]) if t5 else None
        make = T5RelAttn if t5 else ATTN[cfg["idiom"]]
        self.blocks = nn.ModuleList(Block(cfg, make(cfg)) for _ in range(cfg["num_hidden_layers"]))
        self.norm = NORMS[cfg.get("norm", "ln")](c)

    def forward(self, input_ids, attention_mask=None):
        T = input_ids.shape[1]
        x = self.embed(input_ids)
        pad = attention_mask.bool() if attention_mask is not None else None
        if self.rel is not None:
            pos = torch.arange(T, device=x.device)
            buckets = relative_bucket(pos[None, :] - pos[:, None], self.rel.num_embeddings, 32)
            pad = self.rel(buckets).permute(2, 0, 1)[None]  # [1, H, T, T]
            if attention_mask is not None:
                pad = pad + (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for blk in self.blocks:
            x, _ = blk(x, pad, None)
        return self.norm(x)


class ViTAttn(_Attn):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.scale = self.d ** -0.5
        self.qkv, self.proj = nn.Linear(self.c, 3 * self.c), nn.Linear(self.c, self.c)

    def forward(self, x, pad, past):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x), None


class ViT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, p = cfg["hidden_size"], cfg["patch_size"]
        n = (cfg["image_size"] // p) ** 2
        self.patch = nn.Conv2d(cfg["num_channels"], c, p, p)
        self.cls = nn.Parameter(torch.zeros(1, 1, c)) if cfg.get("class_token", True) else None
        self.pos = nn.Parameter(torch.randn(1, n + (self.cls is not None), c) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg, ViTAttn(cfg)) for _ in range(cfg["num_hidden_layers"]))
        self.norm = nn.LayerNorm(c, eps=1e-6)

    def forward(self, pixel_values):
        x = self.patch(pixel_values).flatten(2).transpose(1, 2)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos
        for blk in self.blocks:
            x, _ = blk(x, None, None)
        return self.norm(x)


class TorchEncoder(_TokenModel):
    """nn.TransformerEncoder of nn.TransformerEncoderLayer (batch_first), src_key_padding_mask."""

    def __init__(self, cfg):
        super().__init__(cfg, True)
        c = cfg["hidden_size"]
        layer = nn.TransformerEncoderLayer(c, cfg["num_attention_heads"], cfg["intermediate_size"], dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=cfg["norm_first"])
        self.enc = nn.TransformerEncoder(layer, cfg["num_hidden_layers"], enable_nested_tensor=False,
                                         norm=nn.LayerNorm(c) if cfg["norm_first"] else None)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids)
        kpm = None if attention_mask is None else attention_mask == 0
        return self.enc(x, src_key_padding_mask=kpm)


class TorchDecoder(_TokenModel):
    """nn.TransformerDecoder of nn.TransformerDecoderLayer over a memory (an encoder's output)."""

    def __init__(self, cfg):
        super().__init__(cfg, True)
        c = cfg["hidden_size"]
        layer = nn.TransformerDecoderLayer(c, cfg["num_attention_heads"], cfg["intermediate_size"], dropout=0.0,
                                           batch_first=True, norm_first=cfg["norm_first"])
        self.dec = nn.TransformerDecoder(layer, cfg["num_hidden_layers"], norm=nn.LayerNorm(c))
        self.head = nn.Linear(c, cfg["vocab_size"], bias=False)

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask=None):
        T = input_ids.shape[1]
        x = self.embed(input_ids)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=x.device)
        mkpm = None if encoder_attention_mask is None else encoder_attention_mask == 0
        y = self.dec(x, encoder_hidden_states, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=mkpm)
        return self.head(y)


def build(spec) -> nn.Module:
    cfg = spec["config"]
    model = {"decoder": DecoderLM, "encoder": EncoderModel, "vision": ViT}[spec["kind"]] \
        if cfg["idiom"] not in ("tel", "tdl") else {"tel": TorchEncoder, "tdl": TorchDecoder}[cfg["idiom"]]
    return model(cfg).eval()


def wrapper(spec, model, kv: bool):
    """The module export_corpus exports: named tensors in (its input order), plain tensors out."""
    kind = spec["kind"]

    class Plain(nn.Module):
        def __init__(self, names):
            super().__init__()
            self.m, self.names = model, names

        def forward(self, *args):
            kw = dict(zip(self.names, args))
            if kind == "vision":
                return self.m(kw["pixel_values"])
            if kind == "seq2seq_decoder":
                return self.m(kw["input_ids"], kw["encoder_hidden_states"], kw.get("encoder_attention_mask"))
            out = self.m(kw["input_ids"], kw.get("attention_mask"))
            return out[0] if kind == "decoder" else out

    class WithCache(nn.Module):
        def __init__(self, names):
            super().__init__()
            self.m, self.names = model, names

        def forward(self, input_ids, attention_mask, *past):
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)]
            logits, presents = self.m(input_ids, attention_mask, pairs)
            return (logits, *(t for kv_ in presents for t in kv_))

    return WithCache if kv else Plain
