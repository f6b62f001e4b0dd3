"""_band_starts reads every row of a probed mask at once (trust31: a window-4096 proof over a cache spent
a third of its time in its per-row loop and a float64 copy). Each mask here is compared with a per-row
reading written out: the starts, or the same refusal for the first row that is not a band."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._mask_probe import _MASKED, _band_starts


def _per_row(kept: np.ndarray, p: int, s: int) -> list[int] | str:
    t = p + s
    starts = []
    for i in range(s):
        pos = p + i
        keys = [j for j in range(t) if kept[i, j]]
        if not keys or max(keys) != pos:
            what = f"sees the later key {max(keys)}" if keys and max(keys) > pos else "does not see its own key"
            return f"the query at position {pos} {what} (not causal; probed at {t} tokens)"
        if keys != list(range(min(keys), pos + 1)):
            return f"the query at position {pos} sees keys with gaps, not a band (probed at {t} tokens)"
        starts.append(min(keys))
    return starts


def _read(arr: np.ndarray, p: int, s: int) -> list[int] | str:
    try:
        return _band_starts(arr, p, s)
    except EvalFailure as exc:
        return str(exc)


def _band(p: int, s: int, w: int) -> np.ndarray:
    i = p + np.arange(s)[:, None]
    j = np.arange(p + s)[None, :]
    return (j <= i) & ((j > i - w) if w else True)


@pytest.mark.parametrize("dtype", [np.bool_, np.float16, np.float32, np.float64])
def test_every_row_at_once_reads_as_one_row_at_a_time(dtype):
    rng = np.random.default_rng(31)
    cases = 0
    for _ in range(400):
        p, s = int(rng.integers(0, 6)), int(rng.integers(1, 7))
        kept = _band(p, s, int(rng.integers(0, 5)))
        for _ in range(int(rng.integers(0, 3))):   # flip a few entries: gaps, later keys, empty rows
            kept[rng.integers(0, s), rng.integers(0, p + s)] ^= True
        if rng.random() < 0.1:
            kept[rng.integers(0, s)] = False
        want = _per_row(kept, p, s)
        arr = kept if dtype is np.bool_ else np.where(kept, 0, _MASKED if rng.random() < 0.5 else -np.inf).astype(dtype)
        assert _read(arr[None, None], p, s) == want, (p, s, kept.astype(int))
        cases += isinstance(want, str)
    assert 50 < cases < 350   # both outcomes exercised


def test_float_bias_and_batch_checks_unchanged():
    ok = np.where(_band(2, 3, 2), 0, _MASKED).astype(np.float32)
    assert _band_starts(ok[None, None], 2, 3) == [1, 2, 3]
    biased = ok.copy()
    biased[0, 0] = np.float32(_MASKED) + 1   # above the masked threshold: a bias, not a mask
    with pytest.raises(EvalFailure, match="bias to kept keys"):
        _band_starts(biased[None, None], 2, 3)
    two = np.stack([ok, np.where(_band(2, 3, 0), 0, _MASKED).astype(np.float32)])[:, None]
    with pytest.raises(EvalFailure, match="differs between batch rows"):
        _band_starts(two, 2, 3)
    half = np.where(_band(2, 3, 2), 0, -9984).astype(np.float16)   # the threshold itself is masked
    assert _band_starts(half[None, None], 2, 3) == [1, 2, 3]
