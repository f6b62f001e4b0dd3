"""Launch planning for the attention kernels (no GPU needed)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from onnx_fuse.plugins import launch_plan as lp

KERNELS = Path(lp.__file__).resolve().parent / "kernels"


def _kernel_names() -> set[str]:
    """Every extern "C" __global__ name the sources define, with the variant macros expanded."""
    fa = (KERNELS / "fused_attention.cu").read_text()
    pa = (KERNELS / "paged_attention.cu").read_text()
    names = set()
    fa_vars = re.findall(r"^\s*OF_FA_VARIANT\(DTN, T, D, (\d+), (\d+), (\d+), \d\)", fa, re.M)
    pa_vars = re.findall(r"^\s*X\(DTN, T, D, (\d+), (\d+), (\d), (b?)\)", pa, re.M)
    fa_d = re.findall(r"^OF_FA_KERNELS_D\((\w+), [\w ]+, (\d+)\)", fa, re.M)
    pa_d = re.findall(r"^OF_PA_KERNELS\((\w+), [\w ]+, (\d+)\)", pa, re.M)
    assert fa_vars and pa_vars and fa_d and pa_d
    wg_d = re.findall(r"^OF_FA_WG_KERNELS_D\((\w+), [\w ]+, (\d+)\)", fa, re.M)
    wg_names = re.findall(r"OF_FA_WGP?_KERNEL\(onnx_fuse_fa_fwd_##DTN##_d##D##_(m\d+n\d+w\d+)_full", fa)
    for dt, d in fa_d:
        for bm, bn, w in fa_vars:
            for mask in ("full", "causal"):
                names.add(f"onnx_fuse_fa_fwd_{dt}_d{d}_m{bm}n{bn}w{w}_{mask}")
    for dt, d in wg_d:
        for wg_name in wg_names:
            for mask in ("full", "causal"):
                names.add(f"onnx_fuse_fa_fwd_{dt}_d{d}_{wg_name}_{mask}")
    for dt, d in pa_d:
        for w, s, _, suf in pa_vars:
            names.add(f"onnx_fuse_pa_decode_{dt}_d{d}_w{w}s{s}{suf}")
        names.add(f"onnx_fuse_pa_reduce_{dt}_d{d}")
        names.add(f"onnx_fuse_append_kv_{dt}_d{d}")
    return names


def test_variant_tables_match_the_sources():
    fa = (KERNELS / "fused_attention.cu").read_text()
    pa = (KERNELS / "paged_attention.cu").read_text()
    fa_vars = {tuple(map(int, v)) for v in re.findall(r"^\s*OF_FA_VARIANT\(DTN, T, D, (\d+), (\d+), (\d+), \d\)", fa, re.M)}
    pa_vars = {tuple(map(int, v)) for v in re.findall(r"^\s*X\(DTN, T, D, (\d+), (\d+), (\d), b?\)", pa, re.M)}
    wg = {tuple(map(int, m)) for m in re.findall(r"OF_FA_WGP?_KERNEL\(onnx_fuse_fa_fwd_##DTN##_d##D##_m(\d+)n(\d+)w(\d+)_full", fa)}
    assert fa_vars | wg == set(lp.FA_VARIANTS)
    assert wg == set(lp.FA_WGMMA_VARIANTS)
    assert pa_vars == set(lp.PA_VARIANTS)
    assert lp.FA_DEFAULT in fa_vars and lp.PA_DEFAULT in pa_vars


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "torch.float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(4, 4096, 32, 32, 128), (1, 1, 2, 1, 64), (2, 77, 8, 2, 128), (1, 300, 4, 4, 64)])
def test_fused_plan_grid_covers_sequence(shape, causal, dtype):
    B, S, Hq, Hkv, D = shape
    p = lp.plan_fused_attention(B, S, Hq, Hkv, D, dtype, causal=causal)
    assert p.kernel in _kernel_names()
    assert p.grid == (math.ceil(S / p.block_m), Hq, B)
    assert p.grid[0] * p.block_m >= S > (p.grid[0] - 1) * p.block_m
    assert p.block == (32 * p.warps, 1, 1)
    assert p.smem_bytes == lp.fa_smem_bytes(D, p.block_m, p.block_n, p.warps) <= lp.H200.max_smem_per_block
    assert p.kernel.endswith("causal" if causal else "full")


def test_fused_plan_small_problem_uses_small_tiles():
    assert lp.plan_fused_attention(1, 128, 2, 2, 128).block_m == 64  # 2 CTAs of 128 rows would idle the chip
    big = lp.plan_fused_attention(4, 4096, 32, 32, 128)
    assert (big.block_m, big.block_n, big.warps) == lp.FA_WGMMA  # H200 default
    ampere = lp.DeviceInfo(name="A100", num_sms=108, compute_capability=(8, 0))
    a100 = lp.plan_fused_attention(4, 4096, 32, 32, 128, device=ampere)
    assert (a100.block_m, a100.block_n, a100.warps) == (128, 32, 4)
    assert lp.plan_fused_attention(4, 4096, 32, 32, 128, causal=True, device=ampere).block_n == 64
    assert lp.plan_fused_attention(4, 4096, 32, 32, 64).block_n == 64


@pytest.mark.parametrize("variant", lp.FA_VARIANTS)
def test_fused_plan_every_variant(variant):
    p = lp.plan_fused_attention(2, 1000, 8, 2, 64, "bfloat16", variant=variant)
    assert (p.block_m, p.block_n, p.warps) == variant
    assert p.kernel in _kernel_names()
    assert p.dtype_code == 1


@pytest.mark.parametrize("bad", [
    dict(head_dim=96), dict(num_heads=6, num_kv_heads=4), dict(dtype="float32"), dict(seq_len=0),
    dict(variant=(256, 64, 4)),
])
def test_fused_plan_rejects(bad):
    args = dict(batch=2, seq_len=128, num_heads=8, num_kv_heads=2, head_dim=64, dtype="float16")
    args.update(bad)
    with pytest.raises(ValueError):
        lp.plan_fused_attention(**args)


@pytest.mark.parametrize("block_size", [16, 32, 64])
@pytest.mark.parametrize("group", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("max_blocks", [1, 7, 256, 1024])
def test_decode_plan_splits_cover_context(block_size, group, max_blocks):
    Hkv = 4
    p = lp.plan_paged_decode(8, Hkv * group, Hkv, 128, block_size, max_blocks)
    ctx = max_blocks * block_size
    assert p.kernel in _kernel_names()
    assert p.part_tokens % lp.PA_SPLIT_ALIGN == 0
    assert p.num_splits * p.part_tokens >= ctx > (p.num_splits - 1) * p.part_tokens
    assert p.grid == (Hkv, p.num_splits, 8)
    assert p.smem_bytes <= lp.H200.max_smem_per_block
    if p.num_splits > 1:
        assert p.reduce_kernel in _kernel_names()
        assert p.workspace_bytes == 8 * Hkv * group * p.num_splits * 129 * 4
        assert p.reduce_grid == (Hkv * group, 8, 1)
    else:
        assert p.reduce_kernel is None and p.workspace_bytes == 0


def test_decode_plan_split_heuristic():
    # Many sequences x kv heads already fill the chip: few splits.
    many = lp.plan_paged_decode(64, 32, 8, 128, 16, 256)
    # One long sequence: split the context to fill the SMs, each split >= 256 tokens.
    one = lp.plan_paged_decode(1, 32, 8, 128, 16, 2048)
    assert many.num_splits <= 4
    assert one.num_splits * 8 >= lp.H200.num_sms
    assert one.part_tokens >= 256
    # A short table never splits below min_split_tokens.
    assert lp.plan_paged_decode(1, 8, 8, 64, 16, 4).num_splits == 1
    # max_seq_len narrows the planned context.
    assert lp.plan_paged_decode(1, 32, 8, 128, 16, 2048, max_seq_len=100).num_splits == 1


def test_decode_plan_forced_splits_and_variants():
    for v in lp.PA_VARIANTS:
        p = lp.plan_paged_decode(4, 32, 8, 64, 32, 100, "bfloat16", num_splits=7, variant=v)
        assert (p.warps, p.stages, p.bulk) == v
        assert p.block == (32 * v[0], 1, 1)
        assert p.num_splits <= 7 and p.num_splits * p.part_tokens >= 3200
        assert p.kernel in _kernel_names()
    assert lp.plan_paged_decode(1, 8, 8, 64, 16, 2, num_splits=50).num_splits == 1  # 32 tokens
    ampere = lp.DeviceInfo(name="A100", num_sms=108, compute_capability=(8, 0))
    with pytest.raises(ValueError, match="9.0"):
        lp.plan_paged_decode(1, 8, 8, 64, 16, 2, variant=(4, 3, 1), device=ampere)


@pytest.mark.parametrize("bad", [dict(num_heads=40, num_kv_heads=2), dict(head_dim=80), dict(variant=(3, 3, 0)),
                                 dict(dtype="int8"), dict(batch=0)])
def test_decode_plan_rejects(bad):
    args = dict(batch=2, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16, max_blocks=4)
    args.update(bad)
    with pytest.raises(ValueError):
        lp.plan_paged_decode(**args)


def test_append_plan_and_byte_counts():
    p = lp.plan_append_kv(64, 1, 8, 128)
    assert p.kernel in _kernel_names() and p.grid[0] == 64 * 8 * 16 // 256
    assert lp.plan_append_kv(1, 1, 1, 64).grid == (1, 1, 1)
    assert lp.paged_decode_kv_bytes([4096] * 64, 8, 128) == 64 * 4096 * 8 * 128 * 2 * 2
    assert lp.fused_attention_flops(4, 4096, 32, 128, False) == 4 * 4 * 32 * 4096**2 * 128
    assert lp.fused_attention_flops(1, 10, 1, 64, True) == lp.fused_attention_flops(1, 10, 1, 64, False) / 2


def test_yaml_contracts_match_the_planner():
    import yaml

    root = KERNELS.parent
    fa = yaml.safe_load((root / "fused_attention.yaml").read_text())
    pa = yaml.safe_load((root / "paged_attention.yaml").read_text())
    assert {tuple(v) for v in fa["kernel"]["variants"]} == set(lp.FA_VARIANTS)
    assert {tuple(v) for v in pa["kernel"]["variants"]} == set(lp.PA_VARIANTS)
    assert [i["name"] for i in fa["inputs"]] == ["query", "key", "value", "seq_lens"]
    assert [i["name"] for i in pa["inputs"]] == ["query", "key", "value", "key_cache", "value_cache",
                                                 "block_tables", "seq_lens"]
    for c in (fa, pa):
        assert c["domain"] == "onnx_fuse" and c["plugin"]["version"] == "1"
        assert set(c["dtype_combinations"]["kernel"]) == set(lp.SUPPORTED_DTYPES)
