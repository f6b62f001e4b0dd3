"""FusedAttention / PagedAttention TensorRT plugins: static contracts (check-trt), the
tensorrt.plugin function signatures, the AOT kernel adapters (nvcc), and real-TensorRT tests
that skip where `import tensorrt` fails."""

from __future__ import annotations

import inspect
import shutil

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from onnx_fuse.plugins import fused_attention_plugin as fa
from onnx_fuse.plugins import paged_attention_plugin as pa
from onnx_fuse.plugins.check_trt import check_model

try:
    import tensorrt  # noqa: F401

    HAVE_TRT = True
except Exception:  # noqa: BLE001
    HAVE_TRT = False

needs_trt = pytest.mark.skipif(not HAVE_TRT, reason="needs full TensorRT (`import tensorrt` "
                                                    "fails: only TensorRT-RTX is installable here)")


def _reasons(model):
    return [i.reason for i in check_model(model).issues]


# ---------------------------------------------------------------------------- FusedAttention

def test_valid_fused_attention_node_is_supported(models):
    r = check_model(models.fused_attention())
    assert r.supported, r.issues
    assert r.plugin_nodes == 1


@pytest.mark.parametrize("change, message", [
    (dict(version=None), "plugin_version must be '1'"),
    (dict(version="2"), "plugin_version must be '1'"),
    (dict(namespace="other"), "plugin_namespace must be 'onnx_fuse'"),
    (dict(num_heads=3), "not a multiple of 3 heads"),
    (dict(kv_num_heads=3), "kv_num_heads=3 must be positive and divide num_heads=2"),
    (dict(causal=2), "causal must be 0 or 1"),
    (dict(scale=-1.0), "scale must be >= 0"),
    (dict(softcap=-30.0), "softcap must be >= 0"),
    (dict(softcap=float("inf")), "softcap must be >= 0 and finite"),
    (dict(softcap=30), "attribute 'softcap' must be FLOAT"),
    (dict(window=-1), "window must be >= 0"),
    (dict(window=4, causal=0), "window=4 needs causal=1"),
    (dict(window=4.0), "attribute 'window' must be INT"),
    (dict(bogus=1), "unknown attribute"),
])
def test_fused_attention_contract_violations(models, change, message):
    node = models.fused_attention_node(inputs=["q", "k", "v", "lens"], **change)
    reasons = _reasons(models.fused_attention(node))
    assert any(message in r for r in reasons), reasons


def test_fused_attention_missing_attributes(models):
    node = models.fused_attention_node(inputs=["q", "k", "v", "lens"])
    del node.attribute[[a.name for a in node.attribute].index("scale")]
    assert check_model(models.fused_attention(node)).supported   # has a contract default
    del node.attribute[[a.name for a in node.attribute].index("num_heads")]
    assert any("'num_heads' is missing" in r for r in _reasons(models.fused_attention(node)))


def test_prepare_for_tensorrt_fills_defaults_and_seq_lens(models):
    import numpy as np

    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt
    from onnx_fuse.verify import make_session

    node = helper.make_node("FusedAttention", ["q", "k", "v"], ["y"], name="fa",
                            domain="onnx_fuse", num_heads=2, causal=1, plugin_version="1",
                            plugin_namespace="onnx_fuse")
    m = models.fused_attention(node, dtype=TP.FLOAT, with_lens=False)
    prepared, changed = prepare_for_tensorrt(m)
    assert changed == 1 and len(m.graph.node) == 1        # the input model is untouched
    fa_node = prepared.graph.node[-1]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in fa_node.attribute}
    assert attrs["aot"] == 1 and attrs["kv_num_heads"] == 0 and attrs["scale"] == 0.0
    assert attrs["softcap"] == 0.0  # TensorRT's Python plugins have no attribute defaults
    assert len(fa_node.input) == 4
    onnx.checker.check_model(prepared)
    # Only the fp32 dtype rule is left (the kernels are fp16/bf16); structure is complete.
    assert all("float16 or bfloat16" in r for r in _reasons(prepared))
    # The computed seq_lens (all S) gives the same result as no seq_lens, in the ORT reference.
    del fa_node.attribute[[a.name for a in fa_node.attribute].index("aot")]  # TRT-only
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((2, 5, 128)).astype(np.float32) for n in "qkv"}
    want = make_session(m).run(None, feeds)[0]
    got = make_session(prepared).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_fused_attention_dtype_head_size_and_inputs(models):
    assert any("float16 or bfloat16" in r for r in _reasons(models.fused_attention(dtype=TP.FLOAT)))
    assert any("head size 48" in r for r in _reasons(models.fused_attention(hidden=96)))
    assert any("seq_lens must be int32" in r
               for r in _reasons(models.fused_attention(lens_dtype=TP.INT64)))
    no_lens = models.fused_attention(models.fused_attention_node(inputs=["q", "k", "v"]),
                                     with_lens=False)
    assert check_model(no_lens).supported          # the builder computes seq_lens = S
    two = models.fused_attention(models.fused_attention_node(inputs=["q", "k"]),
                                 with_lens=False)
    assert any("needs inputs query, key, value" in r for r in _reasons(two))


def test_softcap_fused_attention_is_supported_and_serialized(models):
    """A softcap (Gemma 2) is a plugin field: check-trt takes it, prepare_node keeps it, and the
    AOT scalars are what onnx_fuse_fused_attention_fwd_ex passes to the _sc kernels."""
    import math
    import struct

    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    node = models.fused_attention_node(inputs=["q", "k", "v", "lens"], softcap=50.0)
    m = models.fused_attention(node)
    assert check_model(m).supported, _reasons(m)
    prepared, _ = prepare_for_tensorrt(m)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in prepared.graph.node[-1].attribute}
    assert attrs["softcap"] == 50.0 and attrs["aot"] == 1
    back = onnx.load_from_string(prepared.SerializeToString())
    assert [a.f for a in back.graph.node[-1].attribute if a.name == "softcap"] == [50.0]
    assert list(fa.ATTRIBUTES)[-2:] == ["softcap", "window"] and fa.ATTRIBUTE_DEFAULTS["softcap"] == 0.0
    log2e = math.log2(math.e)
    assert fa.softcap_scalars(0.125, 0.0) == (0.125 * log2e,)
    post, k = fa.softcap_scalars(0.125, 50.0)
    assert post == pytest.approx(50.0 * log2e) and k == pytest.approx(2 * log2e * 0.125 / 50.0)
    # the kernel turns s into 1 - 2 / (2^(s k) + 1) = tanh(0.125 s / 50) and exponentiates post * it
    s = 300.0
    assert post * (1 - 2 / (2 ** (s * k) + 1)) == pytest.approx(50 * math.tanh(0.125 * s / 50) * log2e)
    assert struct.unpack("<f", struct.pack("<i", fa._float_bits(post)))[0] == pytest.approx(post)
    assert fa.aot_entry("bf16", 256, "m64n64w4", 1, True) == "onnx_fuse_fa_fwd_bf16_d256_m64n64w4_sc_causal_trt"
    assert fa.aot_entry("f16", 64, "m64n64w4", 0) == "onnx_fuse_fa_fwd_f16_d64_m64n64w4_full_trt"


def test_gqa_fused_attention_is_supported(models):
    node = models.fused_attention_node(inputs=["q", "k", "v", "lens"], num_heads=4,
                                       kv_num_heads=2)
    m = models.fused_attention(node, hidden=256, kv_hidden=128)
    assert check_model(m).supported


def test_unknown_op_in_our_domain(models):
    m = models.fused_attention()
    m.graph.node[0].op_type = "FusedMLP"
    assert any("no onnx-fuse plugin named 'FusedMLP'" in r for r in _reasons(m))


# ---------------------------------------------------------------------------- PagedAttention

def _paged_model(*, sq=1, hq=4, hkv=2, d=64, bs=16, table_dtype=TP.INT32, dtype=TP.FLOAT16,
                 **attrs):
    ins = [helper.make_tensor_value_info("q", dtype, ["b", sq, hq * d]),
           helper.make_tensor_value_info("k", dtype, ["b", sq, hkv * d]),
           helper.make_tensor_value_info("v", dtype, ["b", sq, hkv * d]),
           helper.make_tensor_value_info("kc", dtype, ["nb", bs, hkv, d]),
           helper.make_tensor_value_info("vc", dtype, ["nb", bs, hkv, d]),
           helper.make_tensor_value_info("bt", table_dtype, ["b", "mb"]),
           helper.make_tensor_value_info("lens", TP.INT32, ["b"])]
    a = {"num_heads": hq, "kv_num_heads": hkv, "scale": 0.0, "plugin_version": "1",
         "plugin_namespace": "onnx_fuse", **attrs}
    node = helper.make_node("PagedAttention", [i.name for i in ins], ["y", "kc_out", "vc_out"],
                            name="pa0", domain="onnx_fuse", **a)
    outs = [helper.make_tensor_value_info("y", dtype, ["b", sq, hq * d]),
            helper.make_tensor_value_info("kc_out", dtype, ["nb", bs, hkv, d]),
            helper.make_tensor_value_info("vc_out", dtype, ["nb", bs, hkv, d])]
    g = helper.make_graph([node], "pa", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20),
                                               helper.make_opsetid("onnx_fuse", 1)])


def test_valid_paged_attention_node_is_supported():
    r = check_model(_paged_model())
    assert r.supported, r.issues
    assert check_model(_paged_model(window=4096)).supported


def test_sliding_window_fused_attention_is_supported(models):
    for extra in (dict(window=1024), dict(window=4096, softcap=50.0)):
        node = models.fused_attention_node(inputs=["q", "k", "v", "lens"], **extra)
        r = check_model(models.fused_attention(node))
        assert r.supported, r.issues


@pytest.mark.parametrize("kw, message", [
    (dict(table_dtype=TP.INT64), "block_tables must be int32"),
    (dict(hq=64, hkv=2), "GQA group 32 > 16"),
    (dict(dtype=TP.FLOAT), "float16 or bfloat16"),
    (dict(d=72), "head size 72"),  # 80 is supported since issue 12
    # Sq > 1 (chunked prefill) runs the paged prefill kernel: D 64 / 128, power-of-two blocks
    (dict(sq=4, d=80), "head size 80 with 4 query tokens per sequence: the paged prefill "
                       "kernel (Sq > 1) takes head sizes 64 and 128"),
    (dict(sq="s", d=256), "head size 256 with a query length not fixed at 1"),
    (dict(sq=4, bs=24), "block_size 24 with 4 query tokens per sequence"),
    (dict(sq="s", aot=1), "aot=1 with a query length not fixed at 1: the AOT kernel is "
                          "decode-only"),
    (dict(window=-2), "window must be >= 0"),
    (dict(window=2.0), "attribute 'window' must be INT"),
])
def test_paged_attention_contract_violations(kw, message):
    reasons = _reasons(_paged_model(**kw))
    assert any(message in r for r in reasons), reasons
    assert all("\n" not in r for r in reasons)


@pytest.mark.parametrize("kw", [
    dict(sq=4), dict(sq=512, d=128, bs=64), dict(sq="s"), dict(sq="s", aot=0, bs=1),
    dict(sq=1, d=80, bs=24), dict(sq=1, d=256, aot=1), dict(sq=1, d=96),
])
def test_paged_attention_chunked_prefill_and_decode_are_supported(kw):
    """Sq > 1 (or a dynamic Sq) at D 64 / 128 with power-of-two blocks; every head size, any
    block size and the AOT kernel at Sq = 1."""
    r = check_model(_paged_model(**kw))
    assert r.supported, r.issues


@pytest.mark.parametrize("sq, aot", [(1, 1), (4, 0), ("s", 0)])
def test_prepare_for_tensorrt_picks_aot_only_for_decode(sq, aot):
    """The builder writes aot=1 (embedded decode kernel) only where the query length is
    statically 1; otherwise the JIT path (append_kv + paged prefill) serves every Sq."""
    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    m = _paged_model(sq=sq)
    prepared, changed = prepare_for_tensorrt(m)
    attrs = {a.name: helper.get_attribute_value(a) for a in _pa_node(prepared).attribute}
    assert changed == 1 and attrs["aot"] == aot
    assert check_model(prepared).supported
    # An aot the model already carries is kept (and check-trt judges it).
    m.graph.node[0].attribute.append(helper.make_attribute("aot", 1))
    prepared, _ = prepare_for_tensorrt(m)
    attrs = {a.name: helper.get_attribute_value(a) for a in _pa_node(prepared).attribute}
    assert attrs["aot"] == 1 and check_model(prepared).supported == (sq == 1)


def _pa_node(model):
    return next(n for n in model.graph.node if n.op_type == "PagedAttention")


def test_paged_prepare_node_without_shapes_picks_jit():
    node = _paged_model(sq=1).graph.node[0]
    pa.prepare_node(node, None)
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["aot"] == 0


def test_paged_prefill_head_dims_match_the_contract():
    from pathlib import Path

    import yaml

    doc = yaml.safe_load(Path(pa.__file__).with_name("paged_attention.yaml").read_text())
    assert tuple(doc["kernel"]["prefill_over_prefix"]["head_dims"]) == pa.PREFILL_HEAD_DIMS
    assert set(pa.PREFILL_HEAD_DIMS) <= set(pa.HEAD_DIMS)


# ---------------------------------------------------------------------------- contract files

@pytest.mark.parametrize("mod, contract", [(fa, "fused_attention.yaml"),
                                           (pa, "paged_attention.yaml")])
def test_plugin_matches_machine_readable_contract(mod, contract):
    """plugins/<op>.yaml (written with the kernels) and the plugin agree on names."""
    from pathlib import Path

    import yaml

    path = Path(fa.__file__).with_name(contract)
    if not path.exists():
        pytest.skip(f"plugins/{contract} not written yet")
    doc = yaml.safe_load(path.read_text())

    def names(section):
        items = doc.get(section) or []
        if isinstance(items, dict):
            return list(items)
        return [i["name"] if isinstance(i, dict) else str(i) for i in items]

    if doc.get("inputs"):
        assert names("inputs")[: len(mod.INPUTS)] == list(mod.INPUTS)[: len(names("inputs"))]
    if doc.get("attributes"):
        ours = set(mod.ATTRIBUTES)
        theirs = set(names("attributes")) - {"plugin_version", "plugin_namespace", "aot"}
        assert theirs == ours
    for key in ("version", "plugin_version"):
        if key in doc:
            assert str(doc[key]) == mod.PLUGIN_VERSION


# ---------------------------------------------------------------------------- QDP signatures

def _params(fn):
    return list(inspect.signature(fn).parameters)


@pytest.mark.parametrize("mod", [fa, pa])
def test_plugin_functions_follow_the_tensorrt_plugin_schema(mod):
    """The argument-order rules tensorrt.plugin enforces at registration (documented in its
    Python plugin guide), checked without TensorRT: tensors first, then attributes in
    registration order; impl adds outputs, stream[, tactic]; aot_impl adds outputs, tactic."""
    reg = _params(mod.register)
    attrs = list(mod.ATTRIBUTES)
    tensors = reg[: len(reg) - len(attrs)]
    assert reg[len(tensors):] == attrs
    assert tuple(tensors) == mod.INPUTS
    impl = _params(mod.impl)
    assert impl[: len(reg)] == reg and impl[len(reg):][:2] == ["outputs", "stream"]
    assert _params(mod.aot_impl) == reg + ["outputs", "tactic"]
    tune = _params(mod.autotune)
    assert tune[: len(tensors)] == tensors and tune[-1] == "outputs"
    assert all(p in attrs for p in tune[len(tensors):-1])
    # No defaults (tensorrt.plugin rejects them) and string annotations everywhere.
    for fn in (mod.register, mod.impl, mod.aot_impl, mod.autotune):
        sig = inspect.signature(fn)
        assert all(p.default is inspect.Parameter.empty for p in sig.parameters.values())
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values())


@pytest.mark.parametrize("mod", [fa, pa])
def test_string_annotations_resolve_to_classes(mod):
    """Our resolver (not TensorRT) turns "trtp.X" strings into classes and keeps -> None."""
    import copy
    import types
    import typing

    ns = types.SimpleNamespace(**{n: type(n, (), {}) for n in (
        "TensorDesc", "Tensor", "AutoTuneCombination", "KernelLaunchParams", "SymExprs")})
    for name in ("register", "impl", "aot_impl", "autotune"):
        original = getattr(mod, name)
        fn = types.FunctionType(original.__code__, original.__globals__, name)
        fn.__annotations__ = copy.copy(original.__annotations__)
        fa.resolve_annotations(fn, ns)
        hints = fn.__annotations__
        first = mod.INPUTS[0]
        assert hints[first] in (ns.TensorDesc, ns.Tensor)
        if name == "impl":
            assert hints["return"] is None and hints["stream"] is int
            assert typing.get_origin(hints["outputs"]) is tuple
        if name == "aot_impl":
            assert typing.get_args(hints["return"])[2] is ns.KernelLaunchParams


def test_plugin_modules_import_without_tensorrt():
    import sys

    assert "tensorrt" not in sys.modules or HAVE_TRT
    assert fa.trtp is None or HAVE_TRT


# ---------------------------------------------------------------------------- AOT adapters

@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_fused_attention_aot_adapter_compiles_every_variant(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_FUSE_CACHE_DIR", str(tmp_path))
    from onnx_fuse.plugins.aot_ptx import compile_adapter, ptx_entries

    for d in fa.HEAD_DIMS:
        variants = fa.aot_variants(d)
        assert variants, f"no AOT variants for head size {d}"
        entries = set(ptx_entries(compile_adapter("fused_attention", fa.adapter_source())))
        for bm, bn, w, tile in variants:
            for dt in ("f16", "bf16"):
                for causal in (0, 1):
                    assert fa.aot_entry(dt, d, tile, causal) in entries
            assert fa.smem_bytes(d, bm, bn) > 0 and w in (1, 2, 4, 8)
        # softcap twins: the 64-row tile everywhere, 128x64 below D = 256 (tactics of a softcap node)
        sc = fa.aot_variants(d, softcap=True)
        assert {t for *_, t in sc} == ({"m64n64w4"} if d == 256 else {"m64n64w4", "m128n64w4"})
        for *_, tile in sc:
            for dt in ("f16", "bf16"):
                assert fa.aot_entry(dt, d, tile, 1, True) in entries


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_paged_attention_aot_adapter_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_FUSE_CACHE_DIR", str(tmp_path))
    from onnx_fuse.plugins.aot_ptx import aot_kernel_ptx, ptx_entries

    for warps, stages in pa.decode_variants():
        for d in pa.HEAD_DIMS:
            name = pa.aot_entry("bf16", d, warps, stages)
            assert name in ptx_entries(aot_kernel_ptx("paged_attention", name,
                                                      pa.adapter_source()))


# ---------------------------------------------------------------------------- real TensorRT

@pytest.mark.tensorrt
@needs_trt
def test_plugins_register_with_tensorrt():
    from onnx_fuse.plugins.trt_backend import load_backend

    backend = load_backend("tensorrt")
    fa.register_plugin(backend)
    pa.register_plugin(backend)
    registry = backend.module.get_plugin_registry()
    names = {(c.name, c.plugin_namespace) for c in registry.all_creators}
    assert ("FusedAttention", "onnx_fuse") in names and ("PagedAttention", "onnx_fuse") in names


@pytest.mark.tensorrt
@needs_trt
def test_build_engine_with_fused_attention_plugin(models, tmp_path):
    from onnx_fuse.plugins.engine_builder import BuildOptions, build_engine, parse_profiles

    path = tmp_path / "fa.onnx"
    node = models.fused_attention_node(inputs=["q", "k", "v", "lens"], aot=1)
    onnx.save(models.fused_attention(node), path)
    r = build_engine(path, tmp_path / "fa.plan", BuildOptions(
        profiles=parse_profiles(["q:1x1x128,1x64x128,2x256x128", "k:1x1x128,1x64x128,2x256x128",
                                 "v:1x1x128,1x64x128,2x256x128", "lens:1,1,2"]),
        cache_dir="", progress=False, backend="tensorrt"))
    assert r.meta["plugins"] == [{"name": "FusedAttention", "version": "1",
                                  "namespace": "onnx_fuse", "nodes": 1}]
