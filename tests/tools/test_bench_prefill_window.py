"""The window rows' tile count (tools/bench_prefill_window.window_tiles) is the number of key tiles
holding at least one visible (query, key) pair: what the kernels compute, as fa_first_tile skips
only tiles wholly below the band and the causal end only tiles wholly above the diagonal."""

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import bench_prefill_window as bpw  # noqa: E402


def _tiles_with_a_visible_pair(S, W, bm, bn):
    n = 0
    for m0 in range(0, S, bm):
        for n0 in range(0, S, bn):
            rows = range(m0, min(S, m0 + bm))
            # row i sees keys max(0, i - W + 1) .. i (all of 0 .. i without a window)
            if any(max(n0, i - W + 1 if 0 < W < S else 0) <= min(i, n0 + bn - 1) for i in rows):
                n += 1
    return n


def test_window_tiles_counts_the_tiles_with_visible_pairs():
    rng = random.Random(3)
    cases = [(4096, 1024, 128, 128), (4096, 4096, 128, 128), (4096, 0, 128, 128), (300, 7, 128, 128)]
    cases += [(rng.randint(1, 700), rng.randint(0, 800), rng.choice((64, 128)), rng.choice((64, 128)))
              for _ in range(60)]
    for S, W, bm, bn in cases:
        assert bpw.window_tiles(S, W, bm, bn) == _tiles_with_a_visible_pair(S, W, bm, bn), (S, W, bm, bn)
    assert bpw.window_tiles(4096, 0) == 528 and bpw.window_tiles(4096, 1024) == 252  # 2.10x, pairs 2.29x
