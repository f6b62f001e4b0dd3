"""PagedAttention plugin, fp8 (e4m3) pools and split-K decode, without TensorRT or a GPU: the
check-trt contract (one-line refusals), prepare_node's scale inputs and ``aot``, the autotune
type string, the contract yaml, run_jit's launch plan and the per-stream workspace cache."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import yaml
from onnx import TensorProto as TP
from onnx import helper

from onnx_fuse.plugins import launch_plan as lp
from onnx_fuse.plugins import paged_attention_plugin as pa
from onnx_fuse.plugins.check_trt import check_model

from .conftest import HostBuffer as _Buf

FP8 = TP.FLOAT8E4M3FN


def _model(*, sq=1, hq=4, hkv=2, d=64, bs=16, cache=FP8, vcache=None, scales=True,
           scale_dtype=TP.FLOAT, scale_shape=None, dtype=TP.FLOAT16, **attrs):
    ins = [helper.make_tensor_value_info("q", dtype, ["b", sq, hq * d]),
           helper.make_tensor_value_info("k", dtype, ["b", sq, hkv * d]),
           helper.make_tensor_value_info("v", dtype, ["b", sq, hkv * d]),
           helper.make_tensor_value_info("kc", cache, ["nb", bs, hkv, d]),
           helper.make_tensor_value_info("vc", vcache or cache, ["nb", bs, hkv, d]),
           helper.make_tensor_value_info("bt", TP.INT32, ["b", "mb"]),
           helper.make_tensor_value_info("lens", TP.INT32, ["b"])]
    if scales:
        shape = scale_shape or [hkv]
        ins += [helper.make_tensor_value_info("ks", scale_dtype, shape),
                helper.make_tensor_value_info("vs", scale_dtype, shape)]
    a = {"num_heads": hq, "kv_num_heads": hkv, "scale": 0.0, "plugin_version": "1",
         "plugin_namespace": "onnx_fuse", **attrs}
    node = helper.make_node("PagedAttention", [i.name for i in ins], ["y", "kc_out", "vc_out"],
                            name="pa0", domain="onnx_fuse", **a)
    outs = [helper.make_tensor_value_info("y", dtype, ["b", sq, hq * d]),
            helper.make_tensor_value_info("kc_out", cache, ["nb", bs, hkv, d]),
            helper.make_tensor_value_info("vc_out", vcache or cache, ["nb", bs, hkv, d])]
    g = helper.make_graph([node], "pa", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21),
                                               helper.make_opsetid("onnx_fuse", 1)])


def _reasons(model):
    return [i.reason for i in check_model(model).issues]


def _pa(model):
    return next(n for n in model.graph.node if n.op_type == "PagedAttention")


@pytest.mark.parametrize("kw", [dict(d=64), dict(d=96, hq=8, hkv=1), dict(d=128, bs=24),
                                dict(d=256, dtype=TP.BFLOAT16), dict(aot=0),
                                dict(cache=TP.FLOAT16, scales=True)])
def test_fp8_decode_nodes_and_16bit_nodes_with_scales_are_supported(kw):
    r = check_model(_model(**kw))
    assert r.supported, r.issues


@pytest.mark.parametrize("kw, message", [
    (dict(sq=4), "fp8 (float8e4m3fn) caches with 4 query tokens per sequence: there is no fp8 "
                 "prefill kernel"),
    (dict(sq="s"), "fp8 (float8e4m3fn) caches with a query length not fixed at 1"),
    (dict(d=80), "head size 80 with fp8 (float8e4m3fn) caches: the fp8 decode kernel takes "
                 "head sizes 64, 96, 128, 256"),
    (dict(aot=1), "aot=1 with fp8 (float8e4m3fn) caches: the AOT kernel has no fp8 pool form"),
    (dict(scales=False), "fp8 (float8e4m3fn) caches need the k_scale and v_scale inputs"),
    (dict(scale_dtype=TP.FLOAT16), "k_scale must be float32 (got FLOAT16)"),
    (dict(scale_shape=[3]), "k_scale must be float32 [kv_num_heads] = [2] (got shape [3])"),
    (dict(scale_shape=[1, 2]), "v_scale must be float32 [kv_num_heads] = [2]"),
    (dict(vcache=TP.FLOAT16), "key_cache and value_cache must both be float8e4m3fn"),
    (dict(cache=TP.FLOAT16, vcache=FP8), "key_cache and value_cache must both be float8e4m3fn"),
    (dict(cache=TP.UINT8), "key_cache must be float16 or bfloat16 (like the query) or "
                           "float8e4m3fn (got UINT8)"),
    (dict(dtype=TP.FLOAT), "query must be float16 or bfloat16"),
])
def test_fp8_contract_violations_are_one_line_each(kw, message):
    reasons = _reasons(_model(**kw))
    assert any(message in r for r in reasons), reasons
    assert all("\n" not in r for r in reasons)


def test_eight_inputs_is_neither_form():
    m = _model()
    del _pa(m).input[8]
    assert any("needs 7 inputs" in r and "9 (with k_scale and v_scale) or 10 (with sinks" in r
               and r.endswith("got 8") for r in _reasons(m))


def test_prepare_feeds_unit_scales_to_the_seven_input_form():
    """tensorrt.plugin has no optional inputs: the builder wires a Constant ones [Hkv] to both
    scale inputs of a 16-bit 7-input node; the result passes check-trt and keeps aot = 1 for a
    static decode."""
    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    m = _model(cache=TP.FLOAT16, scales=False, hq=8, hkv=2)
    prepared, changed = prepare_for_tensorrt(m)
    node = _pa(prepared)
    assert changed == 1 and len(node.input) == 10 and node.input[7] == node.input[8]
    const = next(n for n in prepared.graph.node if n.output[0] == node.input[7])
    assert const.op_type == "Constant"
    t = helper.get_attribute_value(const.attribute[0])
    assert t.data_type == TP.FLOAT and list(t.dims) == [2] and list(t.float_data) == [1.0, 1.0]
    # and no sinks: -inf [Hq], a sink that adds nothing to any softmax
    sinks = next(n for n in prepared.graph.node if n.output[0] == node.input[9])
    t = helper.get_attribute_value(sinks.attribute[0])
    assert t.data_type == TP.FLOAT and list(t.dims) == [8] and all(x == -float("inf") for x in t.float_data)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["aot"] == 1
    assert check_model(prepared).supported, check_model(prepared).issues
    # a node that already has its scales is left with them, and no new nodes
    again, _ = prepare_for_tensorrt(prepared)
    assert len(again.graph.node) == len(prepared.graph.node)


def test_prepare_gives_fp8_nodes_the_jit_path():
    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    prepared, _ = prepare_for_tensorrt(_model())
    node = _pa(prepared)
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["aot"] == 0
    # the node and its -inf sinks Constant (the fp8 node has its scales)
    assert len(prepared.graph.node) == 2 and check_model(prepared).supported


def test_autotune_type_string_follows_the_io_order():
    n_io = len(pa.INPUTS) + len(pa.OUTPUTS)
    for fp8 in (False, True):
        cols = [c.strip() for c in pa._io_types(fp8).split(",")]
        assert len(cols) == n_io and all(len(c.split("|")) == 2 for c in cols)
        names = list(pa.INPUTS) + list(pa.OUTPUTS)
        cache = "FP8|FP8" if fp8 else "FP16|BF16"
        for name, col in zip(names, cols):
            want = ("INT32|INT32" if name in ("block_tables", "seq_lens") else
                    "FP32|FP32" if name.endswith("_scale") or name == "sinks" else
                    cache if "cache" in name else "FP16|BF16")
            assert col == want, (name, col)


def test_contract_yaml_lists_the_scales_sinks_and_fp8_head_sizes():
    doc = yaml.safe_load(Path(pa.__file__).with_name("paged_attention.yaml").read_text())
    assert [i["name"] for i in doc["inputs"]] == list(pa.INPUTS)
    assert [i.get("optional", False) for i in doc["inputs"]] == [False] * 7 + [True] * 3
    assert tuple(doc["kernel"]["fp8_pool"]["head_dims"]) == pa.FP8_HEAD_DIMS == lp.PA8_HEAD_DIMS


# ---------------------------------------------------------------------------- run_jit planning

class _Recorder:
    """Records the KernelLib calls run_jit makes (no GPU here: the launches themselves run in
    tests/plugins/test_paged_chunked_gpu.py)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kw):
            self.calls.append((name, args, kw))
        return call


class _HostWorkspace(pa.Workspace):
    def __init__(self):
        super().__init__()
        self.requests = []

    def get(self, nbytes, stream):
        self.requests.append((nbytes, stream))
        return 1 << 20


def _run(fp8, *, b=4, ctx=4096, bs=16, d=128, hq=32, hkv=8, workspace=None, sq=1,
         device=lp.H200, **kw):
    bufs = [_Buf((b, sq, hq * d)), _Buf((b, sq, hkv * d)), _Buf((b, sq, hkv * d)),
            _Buf((ctx // bs * b, bs, hkv, d)), _Buf((ctx // bs * b, bs, hkv, d)),
            _Buf((b, ctx // bs)), _Buf((b,)), _Buf((b, sq, hq * d))]
    scales = dict(k_scale=_Buf((hkv,)), v_scale=_Buf((hkv,))) if fp8 else {}
    lib = _Recorder()
    plan = pa.run_jit(lib, *bufs, num_heads=hq, kv_num_heads=hkv, scale=0.0, dtype="float16",
                      stream=7, workspace=workspace, device=device, **scales, **kw)
    return lib.calls, plan


@pytest.mark.parametrize("fp8", [False, True])
def test_run_jit_decodes_split_k_with_the_planners_plan(fp8):
    """B4 ctx 4096 (the 519 GB/s one-split case): the plan is plan_paged_decode's, with several
    splits, and its workspace comes from the Workspace for TensorRT's stream."""
    ws = _HostWorkspace()
    calls, plan = _run(fp8, workspace=ws)
    want = lp.plan_paged_decode(4, 32, 8, 128, 16, 256, "float16",
                                kv_dtype="fp8" if fp8 else None)
    assert plan == want and plan.num_splits > 1 and plan.kv_fp8 == fp8
    assert ws.requests == [(plan.workspace_bytes, 7)]
    names = [c[0] for c in calls]
    assert names == (["append_kv_fp8", "paged_decode_fp8"] if fp8 else
                     ["append_kv", "paged_decode"])
    kw = calls[1][2]
    assert kw["plan"] is plan and kw["workspace"].data_ptr() == 1 << 20 and kw["stream"] == 7
    if fp8:
        k_pool = calls[0][1][2]
        assert k_pool.dtype == "uint8" and calls[0][1][4].dtype == "float32"


def test_run_jit_without_a_workspace_decodes_in_one_split():
    calls, plan = _run(True, workspace=None)
    assert plan.num_splits == 1 and calls[1][2]["workspace"] is None


def test_run_jit_plans_for_the_device_it_is_given():
    """A pre-Hopper device: no bulk-copy variant for the 16-bit pool (those need sm_90)."""
    a100 = lp.DeviceInfo(name="A100", num_sms=108, max_smem_per_block=163 * 1024,
                         smem_per_sm=164 * 1024, compute_capability=(8, 0))
    _, plan = _run(False, workspace=_HostWorkspace(), device=a100)
    assert plan.bulk == 0 and plan == lp.plan_paged_decode(4, 32, 8, 128, 16, 256, "float16",
                                                           device=a100)


@pytest.mark.parametrize("kw, match", [(dict(sq=4), "decode-only"), (dict(d=80, hq=4, hkv=2),
                                                                      "head sizes 64, 96")])
def test_run_jit_refuses_fp8_prefill_and_head_size_80_before_launching(kw, match):
    with pytest.raises(ValueError, match=match):
        _run(True, workspace=_HostWorkspace(), **kw)


# ---------------------------------------------------------------------------- Workspace cache

class _HostMemory:
    """Host buffers standing in for device memory: the cache logic is what is tested."""

    def __init__(self):
        self.live, self.freed = {}, []

    def alloc(self, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.live[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf), buf

    def free(self, ptr, handle, stream):
        self.freed.append((ptr, stream))
        del self.live[ptr]


def test_workspace_grows_per_stream_and_reuses(monkeypatch):
    mem = _HostMemory()
    monkeypatch.setattr(pa, "_memory_backend", lambda: mem)
    ws = pa.Workspace()
    a = ws.get(1000, stream=1)
    assert ws.get(800, stream=1) == a and ws.nbytes(1) == 1000       # smaller: the same buffer
    b = ws.get(500, stream=2)
    assert b != a and ws.nbytes(2) == 500                             # one buffer per stream
    c = ws.get(4000, stream=1)
    assert mem.freed == [(a, 1)] and ws.nbytes(1) == 4000 and c in mem.live
    assert ws.get(4000, stream=1) == c and len(mem.live) == 2


def test_workspace_without_an_allocator_returns_none(monkeypatch):
    monkeypatch.setattr(pa, "_memory_backend", lambda: None)
    assert pa.Workspace().get(1024, stream=0) is None


def test_fp8_pool_check_takes_plugin_views_and_torch_tensors():
    """KernelLib's fp8 argument check reads dtype names and strides, so the plugin's buffer
    views (no torch at run time) pass where torch tensors do, and the same mistakes fail."""
    from onnx_fuse.plugins.fused_attention_plugin import _View
    from onnx_fuse.plugins.kernel_lib import KernelLib

    check = KernelLib._check_fp8_pool
    pool = _View(1, (4, 16, 2, 64), (2048, 128, 64, 1), "uint8")
    sc = _View(2, (2,), (1,), "float32")
    check(pool, pool, sc, sc)
    for bad in ([_View(1, (4, 16, 2, 64), (2048, 128, 64, 1), "float16"), pool, sc, sc],
                [pool, pool, _View(2, (3,), (1,), "float32"), sc],
                [pool, pool, sc, _View(2, (2,), (1,), "float16")],
                [pool, _View(1, (4, 16, 2, 64), (4096, 128, 64, 1), "uint8"), sc, sc]):
        with pytest.raises(ValueError):
            check(*bad)
    torch = pytest.importorskip("torch")
    t = torch.zeros((4, 16, 2, 64), dtype=torch.uint8)
    s = torch.ones(2)
    check(t, t.view(getattr(torch, "float8_e4m3fn", torch.uint8)), s, s)
    with pytest.raises(ValueError):
        check(t, t, s[:1], s)
    with pytest.raises(ValueError):
        check(t, t, s, torch.ones(4)[::2])       # a strided scale


def test_run_jit_plans_each_shape_once():
    """The decode plan is cached per shape (run_jit runs on every enqueue); a cached plan is the
    planner's own, and another shape gets its own plan."""
    pa._decode_plan.cache_clear()
    _, p1 = _run(False, workspace=_HostWorkspace())
    _, p2 = _run(False, workspace=_HostWorkspace())
    info = pa._decode_plan.cache_info()
    assert p1 is p2 and info.hits >= 1 and info.misses == 1
    assert p1 == lp.plan_paged_decode(4, 32, 8, 128, 16, 256, "float16")
    _, p3 = _run(False, b=8, workspace=_HostWorkspace())
    assert p3 != p1 and p3.grid[2] == 8 and pa._decode_plan.cache_info().misses == 2
