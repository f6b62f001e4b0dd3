"""run_jit's traced launch sequence (plugins/_launch_trace.py) against the KernelLib calls it
replaces.

No GPU here: the kernel library is a stand-in whose launch functions record their arguments
(KernelLib binds it as it binds the real shared object, argtypes included). Each case runs the
sequence twice through KernelLib's own methods (``pa._sequence``, what run_jit did on every call
before the trace) and through ``pa.run_jit`` (traced once, then replayed) with different
pointers and streams, and compares the foreign calls argument by argument, as ctypes converts
them. The launches themselves run in tests/plugins/test_paged_chunked_gpu.py.
"""

from __future__ import annotations

import ctypes

import pytest

from onnx_fuse.plugins import _launch_trace as lt
from onnx_fuse.plugins import launch_plan as lp
from onnx_fuse.plugins import paged_attention_plugin as pa
from onnx_fuse.plugins.kernel_lib import ARGTYPES, KernelError, KernelLib

from .conftest import HostBuffer as _Buf


class _RecordingCDLL:
    """The launch functions of libonnx_fuse_kernels.so as recorders returning ``rc``."""

    def __init__(self, rc=0):
        self.calls, self.rc = [], rc
        for name in ARGTYPES:
            setattr(self, name, self._fn(name))

    def _fn(self, name):
        def fn(*args):
            self.calls.append((name, fn.argtypes, args))
            return self.rc
        fn.__name__ = name
        return fn

    def converted(self):
        """(name, args as ctypes passes them: each through its argtype, as values)."""
        out = []
        for name, types, args in self.calls:
            vals = []
            for t, a in zip(types, args):
                c = a if isinstance(a, ctypes._SimpleCData) else t(a)
                vals.append(c.value)
            out.append((name, tuple(vals)))
        return out


class _Workspace:
    def __init__(self, ptr=0x5000_0000):
        self.ptr, self.requests = ptr, []

    def get(self, nbytes, stream):
        self.requests.append((nbytes, stream))
        return self.ptr


SINKS_AT = 0xB40000   # the sinks buffer's offset from base (not a multiple the other buffers or the workspace use)


def _buffers(base, *, b=4, ctx=4096, bs=16, d=128, hq=32, hkv=8, sq=1, fp8=False, packed=False, sinks=False):
    """run_jit's eleven buffers at pointers base + i * 0x100000 (the query a strided view of a
    packed QKV row when ``packed``; the scales with ``fp8``, the sinks with ``sinks``)."""
    p = [base + i * 0x100000 for i in range(10)] + [base + SINKS_AT]
    qkv = (hq + 2 * hkv) * d
    q = (_Buf((b, sq, hq * d), p[0], (sq * qkv, qkv, 1)) if packed
         else _Buf((b, sq, hq * d), p[0]))
    nb = ctx // bs * b
    bufs = [q, _Buf((b, sq, hkv * d), p[1]), _Buf((b, sq, hkv * d), p[2]),
            _Buf((nb, bs, hkv, d), p[3]), _Buf((nb, bs, hkv, d), p[4]), _Buf((b, ctx // bs), p[5]),
            _Buf((b,), p[6]), _Buf((b, sq, hq * d), p[7])]
    scales = [_Buf((hkv,), p[8]), _Buf((hkv,), p[9])] if fp8 else [None, None]
    return bufs + scales + [_Buf((hq,), p[10]) if sinks else None]


CASES = {
    "decode-fp16-split-k": dict(),
    "decode-bf16-b64": dict(b=64, dtype="bfloat16"),
    "decode-fp8-pool": dict(fp8=True),
    "decode-fp8-mqa-d64": dict(fp8=True, hq=16, hkv=1, d=64, bs=64),
    "decode-d80-packed-query": dict(hq=4, hkv=2, d=80, packed=True),
    "decode-forced-splits": dict(num_splits=5),
    "decode-one-split": dict(num_splits=1),
    "prefill-512": dict(b=2, ctx=4608, sq=512),
    "prefill-d64-block64": dict(b=3, ctx=1024, sq=7, hq=8, hkv=2, d=64, bs=64),
    "decode-sinks-split-k": dict(sinks=True),
    "decode-fp8-sinks": dict(fp8=True, sinks=True),
    "prefill-sinks": dict(b=2, ctx=4608, sq=512, sinks=True),
    "decode-a100": dict(device=lp.DeviceInfo(name="A100", num_sms=108,
                                             max_smem_per_block=163 * 1024,
                                             smem_per_sm=164 * 1024, compute_capability=(8, 0))),
}


# One library per side for the whole module, as the plugin keeps one (the traces are per lib).
DIRECT, TRACED = _RecordingCDLL(), _RecordingCDLL()
DIRECT_LIB, TRACED_LIB = KernelLib(DIRECT), KernelLib(TRACED)


def _both(case, base, stream, workspace):
    """The calls of KernelLib's methods (pa._sequence) and of run_jit, for one set of pointers."""
    kw = dict(case)
    dtype, splits = kw.pop("dtype", "float16"), kw.pop("num_splits", None)
    device = kw.pop("device", lp.H200)
    hq, hkv = kw.get("hq", 32), kw.get("hkv", 8)
    bufs = _buffers(base, **kw)
    direct, traced = DIRECT, TRACED
    direct.calls.clear()
    traced.calls.clear()
    attrs = dict(num_heads=hq, kv_num_heads=hkv, scale=0.0, dtype=dtype, stream=stream,
                 device=device, num_splits=splits)
    want = pa._sequence(DIRECT_LIB, *bufs, **attrs, get_workspace=lambda n: (
        None if workspace is None else workspace.get(n, stream)))
    got = pa.run_jit(TRACED_LIB, *bufs[:8], k_scale=bufs[8], v_scale=bufs[9], sinks=bufs[10], **attrs,
                     workspace=workspace)
    return want, got, direct.converted(), traced.converted()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_replayed_calls_are_the_kernel_lib_calls(case):
    """Same foreign calls, same arguments, for two sets of pointers and streams (the second
    call replays the trace of the first)."""
    pa._launch.cache_clear()
    for base, stream in ((0x7000_0000, 3), (0x9100_0000, 11)):
        want, got, direct, traced = _both(case, base, stream, _Workspace(base + 0xA00000))
        assert got == want
        assert traced == direct and len(traced) == 2
        assert any(base in args for _, args in traced)      # this call's pointers
        # the sinks pointer reaches the attention launch (decode or prefill), else a null
        sinks_ptr = base + SINKS_AT
        assert any(sinks_ptr in args for _, args in traced) == bool(case.get("sinks"))
    assert pa._launch.cache_info().misses == 1 and pa._launch.cache_info().hits == 1


def test_replay_without_workspace_runs_the_one_split_plan():
    """No Workspace, or one that cannot allocate: one split, as KernelLib's path decides."""
    class _NoMemory(_Workspace):
        def get(self, nbytes, stream):
            super().get(nbytes, stream)
            return None

    for ws in (None, _NoMemory()):
        want, got, direct, traced = _both({}, 0x7000_0000, 5, ws)
        assert got.num_splits == 1 and got == want and traced == direct
        if ws is not None:   # the planned split-K asked first
            assert ws.requests and ws.requests[0][0] > 0


def test_replay_asks_the_workspace_for_the_stream_of_the_call():
    ws = _Workspace()
    _, plan, _, traced = _both({}, 0x7000_0000, 9, ws)
    _both({}, 0x8000_0000, 12, ws)
    assert plan.num_splits > 1
    n = plan.workspace_bytes   # each _both asks twice: KernelLib's path, then run_jit
    assert ws.requests == [(n, 9), (n, 9), (n, 12), (n, 12)]
    decode = [args for name, args in traced if "decode" in name][0]
    assert ws.ptr in decode


def test_each_layout_is_traced_once():
    pa._launch.cache_clear()
    for base in (0x7000_0000, 0x7100_0000, 0x7200_0000):
        _both({}, base, 1, _Workspace())
    _both(dict(b=8), 0x7000_0000, 1, _Workspace())                 # another batch: new trace
    _both(dict(packed=True), 0x7000_0000, 1, _Workspace())         # other strides: new trace
    assert pa._launch.cache_info().misses == 3 and pa._launch.cache_info().hits == 2


@pytest.mark.parametrize("kw, match", [
    (dict(sq=4, fp8=True), "decode-only"),
    (dict(d=80, hq=4, hkv=2, sq=3), "head size 64 or 128"),
    (dict(d=80, hq=4, hkv=2, fp8=True), "head sizes 64, 96"),
])
def test_refusals_come_before_any_launch_on_every_call(kw, match):
    """The trace raises (nothing recorded, nothing cached), and so does the next call."""
    cdll = _RecordingCDLL()
    lib = KernelLib(cdll)
    bufs = _buffers(0x7000_0000, **kw)
    for _ in range(2):
        with pytest.raises(ValueError, match=match):
            pa.run_jit(lib, *bufs[:8], k_scale=bufs[8], v_scale=bufs[9],
                       num_heads=kw.get("hq", 32), kv_num_heads=kw.get("hkv", 8), scale=0.0,
                       dtype="float16", stream=1, workspace=_Workspace(), device=lp.H200)
    assert cdll.calls == []


def test_a_failing_launch_raises_kernel_error_and_stops_the_sequence():
    cdll = _RecordingCDLL(rc=700)
    bufs = _buffers(0x7000_0000)
    pa._launch.cache_clear()
    for _ in range(2):   # traced call, then replayed call
        cdll.calls.clear()
        with pytest.raises(KernelError, match="append_kv failed with CUDA error code 700"):
            pa.run_jit(KernelLib(cdll), *bufs[:8], num_heads=32, kv_num_heads=8, scale=0.0,
                       dtype="float16", stream=1, workspace=_Workspace(), device=lp.H200)
        assert [c[0] for c in cdll.calls] == ["onnx_fuse_append_kv"]


def test_trace_refuses_an_argument_derived_from_a_pointer():
    """A launch argument computed from a pointer (here pointer + 16) cannot be replayed by
    substitution: the trace says so instead of replaying a stale value."""
    cdll = _RecordingCDLL()

    def sequence(lib):
        lib._lib.onnx_fuse_append_kv(*([0] * 5 + [lt.slot(0) + 16] + [0] * 10))

    with pytest.raises(AssertionError, match="derived from traced slot 0"):
        lt.trace(KernelLib(cdll), sequence, 1)
    launch = lt.trace(KernelLib(cdll), lambda lib: lib._lib.onnx_fuse_append_kv(
        *([0] * 5 + [lt.slot(0)] + [0] * 10)), 1)
    cdll.calls.clear()
    launch([0xABC000])
    assert cdll.converted()[0][1][5] == 0xABC000
