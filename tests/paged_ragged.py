"""The original model run one sequence of a ragged paged batch at a time, for the paged-KV tests that
compare a paged batch with it (tests/targets/test_trt_paged_window.py, test_trt_paged_cropped.py)."""

from __future__ import annotations

import numpy as np


def outputs(sess, feeds) -> dict:
    """``sess.run`` as a dict of output name -> array."""
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def per_sequence(sess, feeds: dict, past_lens, sq: int):
    """Yields (b, L, feeds_b, outputs_b): the original on sequence b alone, its first L cached tokens
    of the padded ``past_key_values.*`` feeds, its ``sq`` new token ids and an all-ones
    attention_mask of L + sq."""
    for b, L in enumerate(past_lens):
        f = {"input_ids": feeds["input_ids"][b:b + 1], "attention_mask": np.ones((1, L + sq), np.int64)}
        f.update({k: v[b:b + 1, :, :L] for k, v in feeds.items() if k.startswith("past_key_values.")})
        yield b, L, f, outputs(sess, f)
