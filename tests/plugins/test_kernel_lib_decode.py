"""KernelLib's decode entries refuse a KV pool that is not 16-byte aligned before any launch.

Every decode load path reads the pools in 16-byte pieces (docs/ops.md), and the C launchers refuse a
misaligned pool too (the GPU tests check those); this side needs no GPU and no built library: the
check runs on CPU tensors, and a KernelLib without a library shows nothing past it was reached.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from onnx_fuse.plugins.kernel_lib import KernelLib, check_pool_alignment  # noqa: E402


def _views(shape, dtype, offset_bytes):
    """A contiguous tensor of ``shape`` starting ``offset_bytes`` past a CPU allocation's (aligned) base."""
    n = 1
    for x in shape:
        n *= x
    item = torch.empty((), dtype=dtype).element_size()
    buf = torch.zeros(n + 64 // item, dtype=dtype)
    assert buf.data_ptr() % 16 == 0
    return buf[offset_bytes // item:offset_bytes // item + n].view(shape)


@pytest.mark.parametrize("offset", [0, 16, 48])
def test_aligned_pools_pass(offset):
    k = _views((4, 16, 2, 64), torch.float16, offset)
    check_pool_alignment(k, k)


@pytest.mark.parametrize("offset", [2, 8, 18])
def test_misaligned_pool_is_refused(offset):
    good = _views((4, 16, 2, 64), torch.float16, 0)
    bad = _views((4, 16, 2, 64), torch.float16, offset)
    with pytest.raises(ValueError, match="16-byte"):
        check_pool_alignment(good, bad)
    with pytest.raises(ValueError, match="16-byte"):
        check_pool_alignment(bad, good)


def _no_library() -> KernelLib:
    lib = KernelLib.__new__(KernelLib)
    lib._lib = None  # any call into the library would fail with AttributeError, not ValueError
    return lib


def test_paged_decode_refuses_before_launching():
    q = torch.zeros((2, 8, 64), dtype=torch.float16)
    tables = torch.zeros((2, 2), dtype=torch.int32)
    lens = torch.tensor([20, 5], dtype=torch.int32)
    good = _views((4, 16, 2, 64), torch.float16, 0)
    bad = _views((4, 16, 2, 64), torch.float16, 4)
    for k, v in ((bad, good), (good, bad)):
        with pytest.raises(ValueError, match="16-byte"):
            _no_library().paged_decode(q, k, v, tables, lens, torch.empty_like(q), num_splits=1)


def test_paged_decode_fp8_refuses_before_launching():
    q = torch.zeros((2, 8, 64), dtype=torch.float16)
    tables = torch.zeros((2, 2), dtype=torch.int32)
    lens = torch.tensor([20, 5], dtype=torch.int32)
    scales = torch.ones(2, dtype=torch.float32)
    good = _views((4, 16, 2, 64), torch.uint8, 0)
    bad = _views((4, 16, 2, 64), torch.uint8, 8)
    with pytest.raises(ValueError, match="16-byte"):
        _no_library().paged_decode_fp8(q, good, bad, scales, scales, tables, lens, torch.empty_like(q), num_splits=1)


def test_paged_decode_refuses_an_fp8_plan():
    """A plan made for an fp8 pool (the cluster-reduce one included) is refused by the 16-bit entry
    before any launch: its kernels read e4m3 bytes."""
    from onnx_fuse.plugins import launch_plan as lp

    q = torch.zeros((2, 8, 64), dtype=torch.float16)
    tables = torch.zeros((2, 2), dtype=torch.int32)
    lens = torch.tensor([20, 5], dtype=torch.int32)
    pool = _views((4, 16, 2, 64), torch.float16, 0)
    plans = (lp.plan_paged_decode(2, 8, 2, 64, 16, 2, kv_dtype="fp8", variant=(4, 3)),
             lp.plan_paged_decode(2, 8, 4, 64, 16, 2, kv_dtype="fp8", variant=(4, 4, "cluster")))
    assert plans[1].cluster
    for plan in plans:
        with pytest.raises(ValueError, match="fp8"):
            _no_library().paged_decode(q, pool, pool, tables, lens, torch.empty_like(q), plan=plan)
