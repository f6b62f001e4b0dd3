"""Shared helpers of the paged-KV precision tests (test_precision_kv_pools.py and
test_precision_plugin_ops.py): decode feeds for the tiny KV exports under tests/data/models
(2 layers, head size 64, vocabulary 128), the float32 original run one sequence at a time, and
the relative error both compare with.
"""

from __future__ import annotations

import numpy as np

LAYERS, D, VOCAB = 2, 64, 128


def decode_feeds(batch: int, past: int, *, seed: int, hkv: int) -> dict[str, np.ndarray]:
    """One new token per sequence and a float32 past of ``past`` positions for every layer."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, VOCAB, (batch, 1)).astype(np.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal(
                (batch, hkv, past, D)).astype(np.float32)
    return feeds


def run_original(sess, feeds: dict, b: int, past_len: int) -> dict[str, np.ndarray]:
    """The contiguous original on sequence ``b`` alone with its first ``past_len`` positions."""
    f = {"input_ids": feeds["input_ids"][b:b + 1],
         "attention_mask": np.ones((1, past_len + 1), np.int64)}
    f.update({k: v[b:b + 1, :, :past_len] for k, v in feeds.items()
              if k.startswith("past_key_values.")})
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))


def rel_err(ref, got, where=None) -> float:
    """max |got - ref| over max |ref| (of the entries ``where`` selects)."""
    ref64, got64 = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if where is not None:
        ref64, got64 = ref64[where], got64[where]
    return float(np.abs(got64 - ref64).max() / max(np.abs(ref64).max(), 1e-12))
