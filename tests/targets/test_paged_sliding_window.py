"""Sliding-window (banded) masks and the paged-KV lowering (rules/attention/paged_trt.yaml).

A Mistral / Gemma 2 style mask lets a query see only its last W keys; PagedAttention without a
window attends to every cached token, so once the context exceeds W the two differ. trt-paged-kv
reads W from the mask's own subgraph (sliding_window(), optimizer/rewrite/_mask_probe.py; before
session 9 causal_mask() refused any band) and emits PagedAttention(window=W); dropping that W
(window=0, what a lowering that ignored the band would do) fails verification.

Cases: the real Optimum export of Mistral (sliding_window=4, head size 16, through the rule without
its head-size check as in test_trt_paged_kv.py), the head-64 LLaMA export with a band written into
its mask by hand (built-in rules, no exporter's idiom), the primitive on hand-built masks, and
verify's decoder inputs, which must be longer than the window to show a lost band.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse
from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.verify import make_inputs, make_session

DATA = Path(__file__).resolve().parents[1] / "data"
MISTRAL = DATA / "corpus" / "mistral__optimum__trained.onnx"   # sliding_window=4, full cache
LLAMA64 = DATA / "models" / "llama64_kv_dynamo.onnx"
RULE = Path(onnx_fuse.__file__).resolve().parents[1] / "rules" / "attention" / "paged_trt.yaml"
LAYERS, VOCAB = 2, 128


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph)


def _paged_rule(tmp_path: Path, *, head_check: bool = True, mask_check: bool = True) -> str:
    """trt-paged-kv as built in, optionally without its head-size check, or without its mask check
    and with the window dropped (window=0: the whole cache, what the rule did before windows)."""
    text = RULE.read_text()
    start, end = text.index("rules:"), text.index("  - name: attention-kv-trt")
    drop = ([] if head_check else ["dim(q, 3) in (64, 80, 96, 128, 256)", "dim(q, 3) in (64, 128)"]) + \
           ([] if mask_check else ["sliding_window(mask, q, pk) >= 0"])
    body = text[start:end]
    if not mask_check:
        assert "window=sliding_window(mask, q, pk)" in body
        body = body.replace("window=sliding_window(mask, q, pk)", "window=0")
    lines = [ln for ln in body.splitlines() if not any(d in ln for d in drop)]
    path = tmp_path / "paged_variant.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _o4(model, **kw):
    return onnx_fuse.optimize(model if isinstance(model, onnx.ModelProto) else str(model),
                              level=4, target="trt", float32_plugins=True, **kw)


def _refusal(result) -> str:
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes, result.report.warnings
    return notes[0]


def _decode_feeds(proto: onnx.ModelProto, past: int, new: int, seed: int = 0) -> dict:
    """One sequence with ``past`` cached and ``new`` new tokens, for any of the exports here."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, VOCAB, (1, new)).astype(np.int64)
        elif vi.name == "attention_mask":
            feeds[vi.name] = np.ones((1, past + new), np.int64)
        elif vi.name == "position_ids":
            feeds[vi.name] = np.arange(past, past + new, dtype=np.int64)[None]
        elif vi.name.startswith("past_key_values."):
            feeds[vi.name] = rng.standard_normal((1, dims[1].dim_value, past, dims[3].dim_value)).astype(np.float32)
    return feeds


def _logits(model, feeds: dict) -> np.ndarray:
    sess = make_session(model)
    return sess.run(["logits"], {i.name: feeds[i.name] for i in sess.get_inputs()})[0]


# ---- Mistral as Optimum exports it (transformers 4.57: the whole cache, a banded mask) -----------


def _windows(model) -> list[int]:
    return [n.attributes["window"].value for n in model.graph if n.op_type == "PagedAttention"]


def test_mistral_sliding_window_export_is_paged_with_its_window(tmp_path):
    """Session 8 refused this export (contiguous cache); now it is paged with window=4 in both
    layers and verified against the original at the default dims (past 5 + 8 new > W), the
    paged model running in ORT through the reference, which applies the window."""
    result = _o4(MISTRAL, rules=[_paged_rule(tmp_path, head_check=False)], verify=True)
    assert _windows(result.model) == [4] * LAYERS, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason


def test_mistral_paged_without_its_window_differs(tmp_path):
    """What a lowering that lost the band would give: the mask check removed and window=0, the
    export is paged and verification (context 13 > W = 4) fails. Keeps this file honest about
    the export being banded."""
    result = _o4(MISTRAL, rules=[_paged_rule(tmp_path, head_check=False, mask_check=False)], verify=True)
    assert _ops(result.model)["PagedAttention"] == LAYERS
    assert result.report.status == "FAILED", result.report.status_reason


# ---- a band written into the head-64 LLaMA export's mask (built-in rules) -----------------------


def _banded(window: int, static_decode: bool = False) -> onnx.ModelProto:
    """llama64_kv_dynamo with every attention's mask m replaced by Where(key j <= i - W, min, m),
    i the query's position counted bottom-right (T - S + row): a banded mask made of plain ops."""
    proto = onnx.load(str(LLAMA64))
    g = proto.graph
    if static_decode:
        dim = next(i for i in g.input if i.name == "input_ids").type.tensor_type.shape.dim[1]
        dim.ClearField("dim_param")
        dim.dim_value = 1
    producers = {o: n for n in g.node for o in n.output}
    softmax_in = {n.input[0] for n in g.node if n.op_type == "Softmax"}
    adds = [n for n in g.node if n.op_type == "Add" and n.output[0] in softmax_in]
    assert len(adds) == LAYERS
    masks = {next(x for x in a.input if producers.get(x) is None or producers[x].op_type not in ("MatMul", "Mul", "Div"))
             for a in adds}
    assert len(masks) == 1, masks   # one mask shared by the layers
    (m,) = masks
    c = lambda name, arr: g.initializer.append(numpy_helper.from_array(np.asarray(arr), name))  # noqa: E731
    c("bw_i2", np.int64(2))
    c("bw_i3", np.int64(3))
    c("bw_zero", np.int64(0))
    c("bw_one", np.int64(1))
    c("bw_w", np.int64(window))
    c("bw_ax1", np.array([1], np.int64))
    c("bw_min", np.float32(np.finfo(np.float32).min))
    band = [
        helper.make_node("Shape", [m], ["bw_shape"]),
        helper.make_node("Gather", ["bw_shape", "bw_i3"], ["bw_t"]),
        helper.make_node("Gather", ["bw_shape", "bw_i2"], ["bw_s"]),
        helper.make_node("Range", ["bw_zero", "bw_t", "bw_one"], ["bw_kv"]),
        helper.make_node("Sub", ["bw_t", "bw_s"], ["bw_p"]),
        helper.make_node("Range", ["bw_p", "bw_t", "bw_one"], ["bw_q"]),
        helper.make_node("Sub", ["bw_q", "bw_w"], ["bw_lim"]),
        helper.make_node("Unsqueeze", ["bw_lim", "bw_ax1"], ["bw_lim2"]),
        helper.make_node("LessOrEqual", ["bw_kv", "bw_lim2"], ["bw_far"]),
        helper.make_node("Where", ["bw_far", "bw_min", m], ["bw_mask"]),
    ]
    at = min(list(g.node).index(a) for a in adds)
    for k, node in enumerate(band):
        g.node.insert(at + k, node)
    for a in adds:
        a.input[:] = ["bw_mask" if x == m else x for x in a.input]
    onnx.checker.check_model(proto)
    return proto


@pytest.mark.parametrize("static_decode", [False, True])
def test_banded_mask_is_paged_with_its_window(static_decode):
    """Built-in rules, head size 64 (the paged kernels' size), a window of 3 written as
    Where(kv <= q - W, min, mask): PagedAttention(window=3) (prefill and a graph fixed to decode,
    where the probe tries P around each constant of the mask), verified (past beyond W)."""
    result = _o4(_banded(3, static_decode), verify=True)
    assert _windows(result.model) == [3] * LAYERS, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason


def test_window_wider_than_the_context_is_paged_with_it():
    """A window of 40 over verify's usual 13 tokens: the mask equals the causal one there, yet it is
    banded from 41 tokens on. The probe runs past every constant of the mask's subgraph, so the
    window is 40, not 0."""
    result = _o4(_banded(40), verify=True)
    assert _windows(result.model) == [40] * LAYERS
    assert result.report.status == "PASSED", result.report.status_reason


def test_unbanded_export_is_still_paged():
    assert _ops(_o4(LLAMA64).model)["PagedAttention"] == LAYERS


# ---- verify's decoder inputs reach past the window -----------------------------------------------


def test_verify_past_is_longer_than_the_window_constant(tmp_path):
    """window_constant() finds W in the graph; the default past (5) grows to W + 1, so the paged
    rewrite with the mask check removed fails verification at W = 20 (at past 5 + 8 new it would
    match: 13 tokens never leave the window)."""
    from onnx_fuse.verify import window_constant

    proto = _banded(20)
    assert window_constant(proto) == 20 and window_constant(onnx.load(str(LLAMA64))) == 0
    assert window_constant(onnx.load(str(MISTRAL))) == 4
    feeds = make_inputs(proto)
    assert feeds["past_key_values.0.key"].shape[2] == 21 and feeds["attention_mask"].shape[1] == 21 + 8
    assert make_inputs(onnx.load(str(LLAMA64)))["past_key_values.0.key"].shape[2] == 5
    result = _o4(proto, rules=[_paged_rule(tmp_path, mask_check=False)], verify=True)
    assert _ops(result.model)["PagedAttention"] == LAYERS
    assert result.report.status == "FAILED", result.report.status_reason
    assert any("window constant 20" in n for n in result.report.verify["notes"]), result.report.verify


# ---- the primitive on hand-built masks -----------------------------------------------------------


def _mask_graph(kind: str) -> ir.Model:
    """q [B,2,S,64], past [B,1,P,64], attention_mask [B,T]; mask [1,1,S,T] from positions."""
    nodes = [
        helper.make_node("Shape", ["past"], ["ps"], start=2, end=3),
        helper.make_node("Shape", ["attention_mask"], ["ts"], start=1, end=2),
        helper.make_node("Squeeze", ["ps"], ["p"]),
        helper.make_node("Squeeze", ["ts"], ["t"]),
        helper.make_node("Range", ["zero", "t", "one"], ["kv"]),
        helper.make_node("Range", ["p", "t", "one"], ["qp"]),
        helper.make_node("Unsqueeze", ["qp", "ax1"], ["qc"]),
        helper.make_node("Add", ["qc", "shift"], ["qs"]),
        helper.make_node("LessOrEqual", ["kv", "qs"], ["keep0"]),
        helper.make_node("Sub", ["qc", "width"], ["lo"]),
        helper.make_node("Greater", ["kv", "lo"], ["inband"]),
        helper.make_node("And", ["keep0", "inband"] if kind == "banded" else ["keep0", "keep0"], ["keep"]),
        helper.make_node("Where", ["keep", "zero_f", "neg"], ["m0"]),
        helper.make_node("Add", ["m0", "bias"], ["m2"]),
        helper.make_node("Unsqueeze", ["m2", "ax01"], ["mask"]),
        helper.make_node("Identity", ["q"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.asarray(v, dt), n) for n, v, dt in [
        ("zero", 0, np.int64), ("one", 1, np.int64), ("ax1", [1], np.int64), ("ax01", [0, 1], np.int64),
        ("shift", 1 if kind == "future" else 0, np.int64), ("width", 100, np.int64),
        ("zero_f", 0.0, np.float32), ("neg", -np.inf, np.float32),
        ("bias", 0.5 if kind == "bias" else 0.0, np.float32)]]
    graph = helper.make_graph(nodes, "m", [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
        helper.make_tensor_value_info("past", TensorProto.FLOAT, ["b", 1, "p", 64]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "p + s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ir.from_proto(onnx.shape_inference.infer_shapes(model))


def _probe(kind: str):
    from onnx_fuse.rewrite._mask_probe import causal_mask

    model = _mask_graph(kind)
    values = {v.name: v for n in model.graph for v in n.outputs}
    inputs = {v.name: v for v in model.graph.inputs}
    return causal_mask(None, values["mask"], inputs["q"], inputs["past"])


def test_probe_causal_mask_passes():
    assert _probe("causal") is True


@pytest.mark.parametrize("kind, reason", [
    ("banded", "sees only the keys .*: a sliding window of 100 keys"),
    ("future", "sees the later key"),
    ("bias", "adds a bias to kept keys"),
])
def test_probe_refuses_what_is_not_causal(kind, reason):
    with pytest.raises(EvalFailure, match=reason):
        _probe(kind)


def test_probe_refuses_a_mask_given_as_input():
    from onnx_fuse.rewrite._mask_probe import causal_mask

    model = _mask_graph("causal")
    inputs = {v.name: v for v in model.graph.inputs}
    with pytest.raises(EvalFailure, match="graph input"):
        causal_mask(None, inputs["q"], inputs["q"], inputs["past"])


# ---- the other attention rewrites keep the band as a mask ------------------------------------------


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_fused_attention_with_a_cache_keeps_the_band(target):
    """Recognition (canonical AttentionKV) and each target's O3 lowering carry the mask as a bias:
    the fused model equals the Mistral export at a decode context of 12 > W and at a chunk of 6 new
    tokens after 6 cached ones (rows inside and past the window)."""
    proto = onnx.load(str(MISTRAL))
    model = onnx_fuse.optimize(str(MISTRAL), level=3, target=target).model
    ops = _ops(model)
    assert ops["Softmax"] == 0 and ops["Attention"] + ops["GroupQueryAttention"] + ops["MultiHeadAttention"] == LAYERS
    for past, new in ((11, 1), (6, 6)):
        feeds = _decode_feeds(proto, past=past, new=new, seed=past)
        np.testing.assert_allclose(_logits(model, feeds), _logits(proto, feeds), rtol=1e-4, atol=1e-5)


def test_fused_attention_plugin_is_given_the_window(tmp_path):
    """FusedAttention (level 4, trt) matches the padding part of transformers' masking_utils mask
    and proves the rest on its values: with the kernels' head-size check removed so head size 16
    qualifies, LLaMA's prefill export is lowered (causal=1, no window) and Mistral's
    (sliding_window=4) with window=4, verified at 8 tokens > W (session 8 kept Attention-23)."""
    text = (RULE.parent / "fused_attention_trt.yaml").read_text()
    path = tmp_path / "fused_any_head.yaml"
    path.write_text("\n".join(ln for ln in text.splitlines() if "FusedAttention's kernels take head sizes" not in ln) + "\n")
    llama = _o4(DATA / "corpus" / "llama__dyn_mask__trained.onnx", rules=[str(path)])
    assert _ops(llama.model)["FusedAttention"] == LAYERS
    # no window: the attribute absent, or 0 where the probed rule writes it (d04da49's rebuilt mask)
    assert all("window" not in n.attributes or n.attributes["window"].value == 0
               for n in llama.model.graph if n.op_type == "FusedAttention")
    mistral = _o4(DATA / "corpus" / "mistral__dyn_mask__trained.onnx", rules=[str(path)], verify=True)
    fa = [n for n in mistral.model.graph if n.op_type == "FusedAttention"]
    assert [(n.attributes["causal"].value, n.attributes["window"].value) for n in fa] == [(1, 4)] * LAYERS
    assert mistral.report.status == "PASSED", mistral.report.status_reason
    # ModernBERT (encoder): its global layer has the padding mask, its local one a window of
    # +-2 keys (not causal: no FusedAttention window); only the global one becomes
    # FusedAttention(causal=0)
    bert = _o4(DATA / "corpus" / "modernbert__dyn_mask__trained.onnx", rules=[str(path)], verify=True)
    fused = [n for n in bert.model.graph if n.op_type == "FusedAttention"]
    assert len(fused) == 1 and fused[0].attributes["causal"].value == 0
    assert _ops(bert.model)["Attention"] == 1
    assert bert.report.status == "PASSED", bert.report.status_reason
