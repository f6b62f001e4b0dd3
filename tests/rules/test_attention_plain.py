"""rules/attention/lower_plain.yaml: canonical attention below opset 23 (a pinned --opset, or a model
onnx's version converter refuses) is lowered to one MatMul(q * scale, K^T) [+ mask] -> Softmax ->
MatMul(., V) chain instead of being left unfused. Hand-built blocks (tests/rules/test_attention.py's
head-split prefill block: MHA / GQA by repeat_kv, causal + right padding, eager and sdpa forms;
test_attention_canonical.py's [B,H,S,D] block: KV cache, no mask, softcap, NaN guard) at opsets 17,
18, 20, 21 and 22, optimized at onnx-O3 and trt-O4, compared with the original in ORT. On the old
code the pinned runs had no ``opset`` and the refused conversion left attention unfused."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.errors import UserError
from tests.rules import test_attention as prefill
from tests.rules import test_attention_canonical as canon

OPSETS = [17, 18, 20, 21, 22]
PLAIN = ("attention-plain", "attention-kv-plain", "attention-plain-grouped", "attention-kv-plain-grouped")
TARGETS = [("onnx", 3), ("trt", 4)]


def _at(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """The same graph declared at ``opset`` (the blocks use no op that changed between 17 and 23)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for imp in out.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = opset
    onnx.checker.check_model(out)
    return out


def _optimize(model, target, level, **kw):
    result = onnx_fuse.optimize(model, level=level, target=target, verify=True, **kw)
    assert result.report.status == "PASSED", result.report.status_reason
    return result


def _ops(result) -> collections.Counter:
    return collections.Counter(n.op_type for n in result.model.graph)


def _assert_plain(result, opset: int, n: int = 1) -> None:
    """One clean chain per attention: the lowering fired, no Attention-23, the opset kept."""
    ops = _ops(result)
    assert sum(result.report.rule_fires.get(r, 0) for r in PLAIN) == n, result.report.rule_fires
    assert ops["Attention"] == 0 and ops["Softmax"] == n and ops["MatMul"] == 2 * n, ops
    assert not any(node.domain.startswith("onnx_fuse") for node in result.model.graph)
    assert dict(result.model.opset_imports)[""] == opset


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("target,level", TARGETS)
@pytest.mark.parametrize("form,kv_heads", [("eager", prefill.H), ("sdpa", prefill.H), ("sdpa", 2), ("eager", 1)])
def test_prefill_mha_gqa_causal_padding(h, target, level, opset, form, kv_heads):
    model = _at(prefill._block(h, form=form, kv_heads=kv_heads), opset)
    result = _optimize(model, target, level, opset=opset)
    _assert_plain(result, opset)
    _assert_gqa_form(result, target, kv_heads != prefill.H)
    h.assert_close(model, result.to_proto(), prefill._feeds(h, kv_heads=kv_heads))


def _assert_gqa_form(result, target: str, gqa: bool) -> None:
    """trt: K and V repeated once each (Reshape -> Expand -> Reshape, 4-D MatMuls); onnx: q viewed
    [B,Hkv,G,S,D] against K/V [B,Hkv,1,T,D], 5-D scores, no Expand; MHA: neither."""
    ops, fires = _ops(result), result.report.rule_fires
    ranks = sorted({len(n.inputs[0].shape) for n in result.model.graph if n.op_type == "Softmax"})
    if gqa and target != "trt":
        assert ops["Expand"] == 0 and fires.get("attention-plain-grouped", 0) + \
            fires.get("attention-kv-plain-grouped", 0) == 1 and ranks == [5], (ops, fires, ranks)
    else:
        assert ops["Expand"] == (2 if gqa else 0) and ranks == [4], (ops, ranks)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("target,level", TARGETS)
@pytest.mark.parametrize("kv_heads", [canon.H, 2])
def test_kv_cache_keeps_past_and_present(h, target, level, opset, kv_heads):
    model = _at(canon._block(h, kv_heads=kv_heads), opset)
    result = _optimize(model, target, level, opset=opset)
    _assert_plain(result, opset)
    _assert_gqa_form(result, target, kv_heads != canon.H)
    assert [v.name for v in result.model.graph.outputs] == ["o", "present_k", "present_v"]
    h.assert_close(model, result.to_proto(), canon._feeds(h, kv_heads=kv_heads))


@pytest.mark.parametrize("target,level", TARGETS)
@pytest.mark.parametrize("kw", [dict(cache=False, mask=False), dict(cache=False, softcap=30.0),
                                dict(cache=False, guard=True)], ids=["nomask", "softcap", "nan-guard"])
def test_no_mask_softcap_and_nan_guard(h, target, level, kw):
    model = _at(canon._block(h, **kw), 18)
    result = _optimize(model, target, level, opset=18)
    fires = result.report.rule_fires
    # trt lowers a softcap with attention-trt-softcap (priority 60) before the fallback
    rule = "attention-trt-softcap" if target == "trt" and "softcap" in kw else "attention-plain"
    assert fires.get(rule) == 1 and _ops(result)["Attention"] == 0, fires
    if "softcap" in kw:
        assert _ops(result)["Tanh"] == 1
    if kw.get("guard"):   # trt: on the output, Softmax -> BMM2 one chain (TensorRT's MHA fusion);
        soft = next(n for n in result.model.graph if n.op_type == "Softmax")   # onnx: on p (exact)
        readers = sorted(c.op_type for c, _ in soft.outputs[0].uses())
        assert readers == (["MatMul"] if target == "trt" else ["IsNaN", "Where"]), readers
        assert _ops(result)["IsNaN"] == 1
    feeds = canon._feeds(h, cache=False, mask=kw.get("mask", True))
    if kw.get("guard"):
        feeds["mask"][0, 0, 1, :] = -np.inf          # a row with no kept key: the guard's 0
    h.assert_close(model, result.to_proto(), feeds)


@pytest.mark.parametrize("target,level", TARGETS)
@pytest.mark.parametrize("mask_shape", [("b", 1, "s", 1), ("s", "s"), (1, "s", "s"), (1, 1, 1, "s"), ("b", 1, 1, "s")])
def test_gqa_masks_that_broadcast(h, target, level, mask_shape):
    """Every additive bias that broadcasts to [B,H,S,T] with one row for all heads: onnx views it
    as [.,1,1,S,T] beside the 5-D scores (rank 4 gets an Unsqueeze; ranks 2 and 3 broadcast as
    they are), trt adds it to the 4-D scores; the original's numbers either way."""
    model = _at(prefill._block(h, form="sdpa", kv_heads=2, mask_shape=mask_shape), 20)
    result = _optimize(model, target, level, opset=20)
    _assert_plain(result, 20)
    _assert_gqa_form(result, target, True)
    feeds = prefill._feeds(h, kv_heads=2, causal=False)
    dims = {"b": prefill.B, "s": prefill.S}
    feeds["mask"] = (h.rng.standard_normal([dims.get(d, d) for d in mask_shape]) * 3).astype(np.float32)
    h.assert_close(model, result.to_proto(), feeds)


def test_mask_with_a_row_per_head_repeats_kv(h):
    """GQA whose mask has one row per q head cannot view it as [B,Hkv,G,S,T] for free: the
    repeated-K/V form, still exact."""
    model = _at(prefill._block(h, form="sdpa", kv_heads=2, mask_shape=("b", prefill.H, "s", "s")), 20)
    result = _optimize(model, "onnx", 3, opset=20)
    assert result.report.rule_fires.get("attention-plain") == 1, result.report.rule_fires
    feeds = prefill._feeds(h, kv_heads=2)
    feeds["mask"] = np.repeat(feeds["mask"], prefill.H, axis=1)
    feeds["mask"][0, 1, 2, :2] = np.finfo(np.float32).min     # head 1 differs from head 0
    h.assert_close(model, result.to_proto(), feeds)


@pytest.mark.parametrize("target,level", [("onnx", 3), ("trt", 4), ("trt", 3)])
def test_refused_conversion_takes_the_plain_lowering(h, target, level, monkeypatch):
    """No pin: the converter refuses the model (kvcrash's fallback left attention unfused)."""
    from onnx_fuse.targets import onnx as onnx_target

    def refuse(model, target_opset):
        raise RuntimeError("no adapter")

    monkeypatch.setattr(onnx_target, "upgraded_copy", refuse)
    model = _at(prefill._block(h, form="sdpa", kv_heads=2), 20)
    result = _optimize(model, target, level)
    _assert_plain(result, 20)
    assert any("kept opset 20: cannot convert" in w for w in result.report.warnings)
    h.assert_close(model, result.to_proto(), prefill._feeds(h, kv_heads=2))


@pytest.mark.parametrize("target,level", TARGETS)
def test_without_a_pin_the_model_is_still_raised_to_attention_23(h, target, level):
    model = _at(prefill._block(h, form="sdpa", kv_heads=2), 20)
    result = _optimize(model, target, level)
    assert "attention-plain" not in result.report.rule_fires
    assert _ops(result)["Attention"] == 1 and dict(result.model.opset_imports)[""] == 23


def test_pin_above_the_model_raises_only_to_the_pin(h):
    """--opset 21 on an opset-18 model: converted to 21 at most (Attention-23 is out of reach, so
    the plain lowering runs on the converted copy)."""
    model = _at(prefill._block(h, form="sdpa", kv_heads=prefill.H), 18)
    result = _optimize(model, "onnx", 3, opset=21)
    _assert_plain(result, 18)


def test_pin_below_the_model_is_refused(h):
    model = _at(prefill._block(h), 20)
    with pytest.raises(UserError, match="opset 20, above --opset 18: onnx-fuse never converts"):
        onnx_fuse.optimize(model, level=3, target="onnx", opset=18)
    for bad in (6, 10**3, 18.0, True, "18"):
        with pytest.raises(UserError, match="opset must be an integer from 7"):
            onnx_fuse.optimize(model, level=3, target="onnx", opset=bad)


def test_pin_at_23_is_the_default(h):
    model = _at(prefill._block(h, form="sdpa"), 20)
    a = onnx_fuse.optimize(model, level=3, target="onnx", opset=23)
    b = onnx_fuse.optimize(model, level=3, target="onnx")
    assert _ops(a) == _ops(b) and dict(a.model.opset_imports) == dict(b.model.opset_imports)


def test_cli_opset_flag(h, tmp_path, capsys):
    """``--opset N`` pins the output; a model above N: one line, exit 2, nothing written."""
    from onnx_fuse.cli.main import main

    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_at(prefill._block(h, form="sdpa", kv_heads=2), 20), src)
    assert main(["optimize", str(src), "-o", str(out), "--target", "onnx", "--opset", "20", "-q", "--verify"]) == 0
    assert capsys.readouterr().out.strip() == "PASSED"
    saved = onnx.load(out)
    assert saved.opset_import[0].version == 20 and "Attention" not in {n.op_type for n in saved.graph.node}
    out.unlink()
    assert main(["optimize", str(src), "-o", str(out), "--target", "trt", "--opset", "18"]) == 2
    err = capsys.readouterr().err
    assert "above --opset 18" in err and len(err.strip().splitlines()) == 1 and not out.exists()


def _myelin_layers(model: onnx.ModelProto) -> list[str]:
    """The layer names of a TensorRT-RTX engine built from ``model`` for an SM89 target (CPU-only
    build; the names say which kernels Myelin chose)."""
    trt = pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed")

    class Log(trt.ILogger):
        def __init__(self):
            super().__init__()
            self.lines = []

        def log(self, severity, msg):
            self.lines += msg.splitlines()

    log = Log()
    builder = trt.Builder(log)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, log)
    assert parser.parse(model.SerializeToString())
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        t = network.get_input(i)
        dims = list(t.shape)
        profile.set_shape(t.name, [1 if d == -1 else d for d in dims], [prefill.S if d == -1 else d for d in dims],
                          [2 * prefill.S if d == -1 else d for d in dims])
    config.add_optimization_profile(profile)
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM89, 0)
    assert builder.build_serialized_network(network, config) is not None, [x for x in log.lines if "rror" in x][:3]
    return [x.split(",")[0][len("Name: "):] for x in log.lines if x.startswith("Name: ")]


@pytest.mark.parametrize("name", ["bert_sdpa_dynamo", "llama_sdpa_dynamo"])
def test_tensorrt_fuses_the_trt_chain_into_one_mha_kernel(name):
    """TensorRT-RTX 1.7's Myelin takes the trt form of the sdpa exports (fp16; LLaMA's GQA 4/2 by
    K/V repeated; the export's NaN guard on the output) into its fused MHA kernel (_gemm_mha_v2),
    one per layer. With the guard between Softmax and BMM2, as the export has it (and this
    lowering's first version), the build of the same fp16 graph fails in Myelin's mha_fusion."""
    path = Path(__file__).resolve().parents[1] / "data" / "models" / f"{name}.onnx"
    result = onnx_fuse.optimize(str(path), level=3, target="trt", opset=20, precision="fp16")
    layers = _myelin_layers(result.to_proto())
    assert sum("_gemm_mha" in x for x in layers) == 2, layers


@pytest.mark.parametrize("target,level", TARGETS)
def test_nan_already_in_v_propagates_where_the_export_propagates_it(h, target, level):
    """The export guards p only: a NaN that V holds reaches the output. ort / onnx keep the guard on p
    (exact); trt's guard on the output zeroes those entries too (the price of TensorRT's MHA fusion,
    docs/tensorrt.md), so there they differ and only there."""
    model = _at(canon._block(h, cache=False, guard=True), 18)
    result = _optimize(model, target, level, opset=18)
    feeds = canon._feeds(h, cache=False)
    feeds["v_new"][0, 0, 1, 0] = np.nan          # one value: every row of head 0, batch 0, column 0
    ref, got = h.run(model, feeds)[0], h.run(result.to_proto(), feeds)[0]
    nan_ref = np.isnan(ref)
    assert nan_ref[0, 0, :, 0].all()
    if target == "trt":   # the guard is elementwise: the NaN entries become 0, the rest as before
        assert not np.isnan(got).any() and (got[nan_ref] == 0).all()
        np.testing.assert_allclose(got[~nan_ref], ref[~nan_ref], rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(np.isnan(got), nan_ref)
        np.testing.assert_allclose(got[~nan_ref], ref[~nan_ref], rtol=1e-4, atol=1e-5)
