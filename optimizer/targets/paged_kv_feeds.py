"""Verification harness of the paged-KV lowering (rule trt-paged-kv, docs/paged_kv.md): the original
model's contiguous ``past_key_values`` feeds -> block-paged pool feeds (shuffled, non-contiguous
blocks), and reading a sequence back out of a pool in the ``present.*`` layout.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["paged_inputs_from_contiguous", "gather_pool"]



def paged_inputs_from_contiguous(feeds: dict, block_size: int, *, past_lens=None, new_tokens: int = 1,
                                 spare_blocks: int = 3, seed: int = 0, fill=np.nan,
                                 layers: list[str] | None = None) -> dict:
    """Feeds for the rewritten model from the original model's feeds.

    ``feeds`` holds ``past_key_values.{i}.key/.value`` [B, Hkv, P, D] (and the other inputs,
    passed through except ``attention_mask``); sequence ``b`` uses its first ``past_lens[b]``
    past positions (default: all P). Each sequence gets ``ceil((past_lens[b] + new_tokens) /
    block_size)`` blocks, drawn shuffled from a pool with ``spare_blocks`` extra blocks, so the
    tables are non-contiguous and out of order; unused slots hold ``fill`` (NaN: a read of them
    shows). ``seq_lens = past_lens + new_tokens`` (the contract counts the new tokens).
    """
    rng = np.random.default_rng(seed)
    layers = layers or sorted({k.split(".")[1] for k in feeds if k.startswith("past_key_values.")}, key=int)
    k0 = np.asarray(feeds[f"past_key_values.{layers[0]}.key"])
    B, Hkv, P, D = k0.shape
    lens = np.full(B, P, np.int64) if past_lens is None else np.asarray(past_lens, np.int64)
    if np.any(lens > P) or np.any(lens < 0):
        raise ValueError(f"past_lens {lens} outside [0, {P}]")
    need = [max(1, math.ceil((int(n) + new_tokens) / block_size)) for n in lens]
    max_blocks = max(need)
    num_blocks = sum(need) + spare_blocks
    perm = rng.permutation(num_blocks)
    tables = np.full((B, max_blocks), -1, np.int32)
    at = 0
    for b in range(B):
        tables[b, :need[b]] = perm[at:at + need[b]]
        at += need[b]
    out = {k: v for k, v in feeds.items() if not k.startswith("past_key_values.") and k != "attention_mask"}
    for layer in layers:
        for kv, tag in (("key", "k"), ("value", "v")):
            past = np.asarray(feeds[f"past_key_values.{layer}.{kv}"])
            pool = np.full((num_blocks, block_size, Hkv, D), fill, past.dtype)
            for b in range(B):
                for pos in range(int(lens[b])):
                    pool[tables[b, pos // block_size], pos % block_size] = past[b, :, pos]
            out[f"kv_pool_{tag}.{layer}"] = pool
    out["block_tables"] = tables
    out["seq_lens"] = (lens + new_tokens).astype(np.int32)
    return out


def gather_pool(pool: np.ndarray, table_row: np.ndarray, length: int) -> np.ndarray:
    """Logical positions [0, length) of one sequence as [Hkv, length, D] (present.* layout)."""
    bs = pool.shape[1]
    pos = np.arange(length)
    return pool[np.asarray(table_row)[pos // bs], pos % bs].transpose(1, 0, 2)


def is_paged_rewrite(original_inputs: set[str], optimized_inputs: set[str]) -> bool:
    """True when ``optimized`` is the paged-KV rewrite of ``original`` (docs/paged_kv.md):
    contiguous ``past_key_values.*`` in, block tables, sequence lengths and pools out."""
    return ({"block_tables", "seq_lens"} <= optimized_inputs
            and any(n.startswith("kv_pool_k.") for n in optimized_inputs)
            and any(n.startswith("past_key_values.") for n in original_inputs))


def paged_pairs(ref_out: dict, opt_out: dict, paged_feeds: dict, total_len: int) -> list[tuple]:
    """(name, original, paged) output pairs to compare: outputs of the same name as they are, and
    each ``present.{i}.key/value`` with the sequences read back out of ``kv_pool_{k,v}_out.{i}``."""
    pairs = []
    for name, ref in ref_out.items():
        if name in opt_out:
            pairs.append((name, ref, opt_out[name]))
            continue
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "present" and parts[2] in ("key", "value"):
            pool = opt_out.get(f"kv_pool_{parts[2][0]}_out.{parts[1]}")
            if pool is not None:
                got = np.stack([gather_pool(pool, row, total_len) for row in paged_feeds["block_tables"]])
                pairs.append((name, ref, got.astype(ref.dtype)))
    return pairs
