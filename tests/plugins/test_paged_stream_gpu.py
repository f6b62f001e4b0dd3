"""GPU tests of the stream-K head-group decode (variant (8, 2, 5), kernel suffix "hs", sm_90).

Grid (Hkv / 8, C): CTA c of a head group takes an equal share of the batch's B * ceil(ctx / 16)
16-token tiles, sequence-major, so one CTA may end one sequence and begin the next, and a sequence
may be cut into several pieces whose partials the last CTA to finish one combines (arrival counters
the launcher keeps per stream, zero between launches). Checked against the float64 reference on
ragged lengths (an empty sequence, lengths ending mid-tile and mid-block), CTA counts that give one
to four sequences per CTA and one to many pieces per sequence, two head groups, sinks, and repeated
launches of different cuts on one stream (the counters must be left at zero).

    python -m onnx_fuse.plugins.build_kernels --what lib && pytest -m gpu tests/plugins/test_paged_stream_gpu.py
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from onnx_fuse import reference as ref
from onnx_fuse.plugins import launch_plan as lp

from .conftest import make_paged_pool  # the `lib` fixture is there too

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)

TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}   # as tests/plugins/test_kernels_gpu.py
VARIANT = (8, 2, 5)


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _err(out, expect: np.ndarray) -> float:
    o = out.detach().float().cpu().numpy().astype(np.float64)
    assert np.isfinite(o).all(), f"non-finite output: {np.count_nonzero(~np.isfinite(o))} elements"
    return float(np.linalg.norm(o - expect) / max(np.linalg.norm(expect), 1e-30))


def _check(lib, B, Hq, Hkv, D, bs, lens, ctas, dtype, key, sinks=False, repeat=1, variant=VARIANT):
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("stream", key)).encode()))
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    s = None
    if sinks:
        s = torch.randn((Hq,), generator=gen, device="cuda", dtype=torch.float32) * 3
        s[0] = 30.0
    plan = None
    for _ in range(repeat):  # fresh queries each launch: the counters must be back at zero
        q = torch.randn((B, Hq, D), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
        out = torch.full_like(q, float("nan"))
        plan = lib.paged_decode(q, k_pool, v_pool, tables, seq, out, variant=variant, num_splits=ctas, sinks=s)
        torch.cuda.synchronize()
        expect = ref.paged_attention(_np(q), np.nan_to_num(_np(k_pool)), np.nan_to_num(_np(v_pool)),
                                     tables.cpu().numpy(), np.array(lens), out_dtype=np.float64,
                                     sinks=None if s is None else _np(s))
        err = _err(out, expect)
        assert err < TOL[dtype], f"relative error {err:.3e} ({plan.kernel}, {plan.grid[1]} CTAs per group)"
        for b, L in enumerate(lens):
            if L == 0:
                assert torch.count_nonzero(out[b]).item() == 0
    assert plan.stream_k and plan.kernel.endswith(f"w8s{variant[1]}hs") and plan.reduce_kernel is None
    return plan


@pytest.mark.parametrize("variant", lp.PA_STREAM_VARIANTS, ids=lambda v: f"w{v[0]}s{v[1]}hs")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("ctas", [1, 2, 5, 13, None])
@pytest.mark.parametrize("D", [64, 128])
def test_stream_decode_ragged(lib, D, ctas, dtype, variant):
    """Three sequences (one empty, one ending mid-tile) cut by 1 to 132 CTAs: one CTA over all of them
    (three sequences in one range), pieces of one to many tiles, the planned count (None)."""
    _check(lib, 3, 32, 8, D, 16, [1500, 47, 0], ctas, dtype, (D, ctas), variant=variant)


@pytest.mark.parametrize("bs", [16, 32, 128])
@pytest.mark.parametrize("ctas", [7, 64, 200])
def test_stream_decode_block_sizes(lib, bs, ctas):
    """Blocks of 16 to 128 tokens (several tiles per block: a piece may start mid-block), eight
    sequences of mixed lengths, more CTAs than sequences and fewer."""
    lens = [1000, 1, 64, 777, 16, 17, 300, 513]
    _check(lib, 8, 32, 8, 128, bs, lens, ctas, torch.float16, (bs, ctas))


def test_stream_decode_two_groups_and_gqa(lib):
    """Hkv 16 = two head groups (blockIdx.x, counters per group), GQA 2; and MQA-like G = 1 rows."""
    _check(lib, 5, 32, 16, 128, 16, [900, 0, 300, 31, 4096], 37, torch.bfloat16, ("groups",))
    _check(lib, 4, 8, 8, 64, 32, [200, 1, 64, 65], 9, torch.float16, ("g1",))


def test_stream_decode_sinks(lib):
    """Sinks join once per row: where a sequence is one CTA's alone (written directly) and where the
    last arrival combines its pieces."""
    _check(lib, 3, 32, 8, 128, 16, [1500, 47, 0], 5, torch.float16, ("sinks", 5), sinks=True)
    _check(lib, 3, 32, 8, 128, 16, [1500, 47, 0], 1, torch.float16, ("sinks", 1), sinks=True)


def test_stream_decode_counters_reset(lib):
    """Launches of different cuts on one stream, each several times: a counter left non-zero by one
    would make a later launch combine too early (wrong rows) or never (NaN rows)."""
    lens = [700, 5, 64, 1023]
    for ctas in (3, 11, 4, 11):
        _check(lib, 4, 16, 8, 128, 16, lens, ctas, torch.float16, ("reset", ctas), repeat=3)


def test_stream_decode_refusals(lib):
    """Too many sequences per CTA range, a window, and block size 8 are refused by the plan."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    k_pool, v_pool, tables = make_paged_pool(40, 8, 128, 16, [20] * 40, torch.float16, gen)
    q = torch.randn((40, 32, 128), generator=gen, device="cuda").half()
    seq = torch.full((40,), 20, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="sequences per CTA"):  # 40 sequences of 3 tiles on 2 CTAs
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), variant=VARIANT, num_splits=2)
    with pytest.raises(ValueError, match="window"):
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), variant=VARIANT, window=8)
    with pytest.raises(ValueError):
        lp.plan_paged_decode(2, 32, 8, 128, 8, 10, variant=VARIANT)
    torch.cuda.synchronize()
