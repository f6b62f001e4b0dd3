"""tools/fuzz_forms.py (session 16's forms): grouped-query attention repeated by Tile / Gather /
Concat and its near misses that read kv head h % Hkv, DequantizeLinear weights, opsets 17..23; and
the fuzzer judging a run with ORT's optimizations off where they change values on their own
(ORT 1.32 turns a DequantizeLinear int8 weight and its MatMul into MatMulNBits)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper as oh, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import fuzz_differential as fd  # noqa: E402
import fuzz_forms  # noqa: E402
from fuzz_motifs import F32, Builder, make_case, make_form_case  # noqa: E402
from fuzz_sweeps import _repeat_kv  # noqa: E402


def _run(model, feeds):
    from onnx_fuse.verify import make_session

    return make_session(model, threads=1, ort_optimizations=False).run(None, feeds)


@pytest.mark.parametrize("form", fuzz_forms.GQA_FORMS + fuzz_forms.NEAR_MISSES)
def test_each_repeat_computes_its_head_map(form):
    """GQA's forms give k[:, h // n]; the near misses k[:, h % Hkv] (4 heads over 2: they differ)."""
    heads, hkv, dh = 4, 2, 3
    b = Builder(np.random.default_rng(0), F32)
    b.inputs.append(oh.make_tensor_value_info("k", TensorProto.FLOAT, [1, hkv, 5, dh]))
    out = _repeat_kv(b, form, "k", heads, hkv, dh)
    graph = oh.make_graph(b.nodes, "r", b.inputs, [oh.make_tensor_value_info(out, TensorProto.FLOAT, None)], b.inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    k = np.random.default_rng(1).standard_normal((1, hkv, 5, dh)).astype(np.float32)
    (got,) = _run(model, {"k": k})
    table = np.arange(heads) % hkv if form in fuzz_forms.NEAR_MISSES else np.arange(heads) // (heads // hkv)
    np.testing.assert_array_equal(got, k[:, table])


@pytest.mark.parametrize("opset", [18, 21])
def test_quantized_weight_dequantizes_near_the_float_one(opset):
    """Every weight kind the forms write (per tensor, per channel, blocked at 21, transposed)
    dequantizes to a [d_in, d_out] matrix within half a step of its scale."""
    kinds = collections.Counter()
    for seed in range(40):
        b = Builder(np.random.default_rng(seed), F32)
        w = fuzz_forms.quantized_weight(b, 16, 8, opset)
        kinds.update(t for t in b.traps if t.startswith("dq-weight-"))
        graph = oh.make_graph(b.nodes, "w", [], [oh.make_tensor_value_info(w, TensorProto.FLOAT, None)], b.inits)
        (got,) = _run(oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)]), {})
        assert got.shape == (16, 8)
        assert 0.02 < np.abs(got).max() < 2.5   # N(0, 1/16) weights, not zeros or garbage
    assert set(kinds) == {"dq-weight-tensor", "dq-weight-channel"} | ({"dq-weight-block"} if opset >= 21 else set())


def test_form_cases_are_valid_at_every_opset_and_draw_every_form():
    opsets, traps, motifs = collections.Counter(), collections.Counter(), collections.Counter()
    for seed in range(60):
        case = make_form_case(seed)
        onnx.checker.check_model(case.model, full_check=True)
        opsets[case.model.opset_import[0].version] += 1
        traps.update(case.traps)
        motifs.update(case.motifs)
    assert set(opsets) == set(fuzz_forms.OPSETS), opsets
    assert {"gqa_tile", "quant_proj"} <= set(motifs)
    for trap in ("kv-tile-heads", "kv-gather-mod", "kv-tile-bshd", "kv-gather", "kv-concat-copies",
                 "kv-repeat-interleave-tile", "dq-weight-block", "qdq-activation"):
        assert traps[trap], (trap, traps)


def test_some_fuzzer_seeds_are_form_cases_and_pinned_seeds_are_not():
    forms = [s for s in range(400) if make_case(s).model.graph.name.startswith("fuzz_form")]
    assert 10 < len(forms) < 60, len(forms)
    for seed in (1448915198, 14525077, 2019, 211629190, 2500259774, 3310816760, 3678026147, 875106632, 914902902):
        assert not make_case(seed).model.graph.name.startswith("fuzz_form"), seed


@pytest.mark.parametrize("form", ["tile_bshd", "gather", "concat", "tile_heads", "gather_mod"])
def test_form_graphs_optimize_and_match(form):
    """One seed per repeat form at O3 on every target: right values (fused or not)."""
    for seed in range(200):
        case = make_form_case(seed, "gqa_tile")
        if any(t == f"kv-{form.replace('_', '-')}" for t in case.traps):
            break
    results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
    assert all(r["cls"] in ("ok", "ort-itself") for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]


def _dq_matmul_model():
    """y = x @ DequantizeLinear(int8 W, per-column scales): ORT 1.32's own optimizations write a
    MatMulNBits of it whose sums differ from the float MatMul by ~1e-2."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)) / 8
    scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    nodes = [oh.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=1), oh.make_node("MatMul", ["x", "w"], ["y"])]
    graph = oh.make_graph(nodes, "dq", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
                          [numpy_helper.from_array(q, "wq"), numpy_helper.from_array(scale, "ws")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    return model, {"x": rng.standard_normal((4, 64)).astype(np.float32)}


def test_a_wrong_rewrite_is_caught_where_orts_optimizations_change_the_original():
    """Before, a run whose original ORT's optimizations change was `ort-itself` whatever ours
    computed; now ours is judged with them off: right there -> ort-itself, wrong -> wrong."""
    model, feeds = _dq_matmul_model()
    names = ["y"]
    (ref,) = _run(model, feeds)
    if not fd._ort_itself(model, feeds, [ref]):
        pytest.skip("this ORT's optimizations keep the DequantizeLinear MatMul's values")
    assert fd._judge(model, model, names, feeds, [ref], None)[0] == "ort-itself"
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    wrong.graph.initializer[1].CopyFrom(numpy_helper.from_array(
        numpy_helper.to_array(model.graph.initializer[1]) * 1.5, "ws"))
    cls, detail, _ = fd._judge(model, wrong, names, feeds, [ref], None)
    assert cls == "wrong" and "optimizations off" in detail, (cls, detail)


def test_float16_keyless_rows_beside_an_unaligned_output_are_half_masked_rows():
    """Fuzz run 16011, seed 1356464380 (a form case: float16, a float mask padding the whole
    sequence, an intermediate [B, 1, S, 1] also an output): only rows with no kept key differ,
    as the half-masked-rows class allows; the intermediate, which no mask lines up with, agrees
    whole. Before, any output the mask did not line up with ruled the class out: `wrong`."""
    case = make_case(1356464380)
    assert case.model.graph.name.startswith("fuzz_form") and "fp16" in case.traps
    ((cls, detail),) = [(r["cls"], r["detail"]) for r in fd.fuzz_case(case, [3], ["onnx"])[0]]
    assert cls in ("half-masked-rows", "ok"), (cls, detail)
    feeds = {"attention_mask": np.zeros((1, 3), np.int64)}
    ref = [np.zeros((1, 3, 2), np.float32), np.ones((1, 1, 3, 1), np.float32)]
    got = [ref[0] + 1.0, ref[1].copy()]
    assert fd._kept_rows_match(["y", "inter"], ref, got, feeds, None, keyless=True)
    got[1] += 1.0   # the unaligned output must still agree
    assert not fd._kept_rows_match(["y", "inter"], ref, got, feeds, None, keyless=True)


def test_quant_after_forms_are_drawn_aside_and_end_in_a_dequantized_output():
    """quant_after (a float MatMul quantized and dequantized, the DequantizeLinear an output) is drawn by a
    side stream of the seed: the form seeds the tests name keep their graphs."""
    drawn = 0
    for seed in range(60):
        case = make_form_case(seed)
        if "quant_after" not in case.motifs:
            continue
        drawn += 1
        onnx.checker.check_model(case.model, full_check=True)
        assert "quant-after-compute" in case.traps
        producers = {o: n for n in case.model.graph.node for o in n.output}
        out = producers[case.model.graph.output[-1].name]
        assert out.op_type == "DequantizeLinear" and producers[out.input[0]].op_type == "QuantizeLinear"
        assert fd.quantized_steps(case.model), case.seed
    assert 8 < drawn < 30, drawn
    assert make_case(1356464380).motifs == ["quant_proj"]


def test_quant_after_under_fp16_takes_the_one_step_tolerance():
    """Seed 1's quant_after under --precision fp16: the MatMul is float16 (nothing dequantized feeds it), so
    the quantizer may round one step apart; ok with verify's one-step rule, wrong without it (the form
    exercises the tolerance e95b1c8 added, which no generated graph reached before)."""
    case = make_form_case(1, "quant_after")
    results, _, _ = fd.fuzz_case(case, [1, 3], ["ort"], precision="fp16")
    assert all(r["cls"] == "ok" for r in results), [(r["level"], r["cls"], r["detail"]) for r in results]
    steps = fd.quantized_steps
    try:
        fd.quantized_steps = lambda model: {}
        results, _, _ = fd.fuzz_case(case, [1, 3], ["ort"], precision="fp16")
    finally:
        fd.quantized_steps = steps
    assert any(r["cls"] == "wrong" for r in results), [(r["level"], r["cls"]) for r in results]


def test_a_sparse_per_channel_scale_gives_its_step():
    """A DequantizeLinear output's one-step tolerance reads a sparse scale's stored values (its largest
    entry): fuzz 26007's graph 1436930359 (fp16 quant_after, the per-channel scale a sparse
    initializer with zeros) was 'wrong' by exactly one step of channel 2 (0.022 against 0.0194) at
    O2-O4 because the step was not found."""
    scale = oh.make_sparse_tensor(numpy_helper.from_array(np.array([0.02, 0.04], np.float32), "s"),
                                      numpy_helper.from_array(np.array([1, 3], np.int64), "s_idx"), [4])
    graph = oh.make_graph(
        [oh.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=-1),
         oh.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=-1)],
        "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.zeros(4, np.uint8), "zp")], sparse_initializer=[scale])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    assert fd.quantized_steps(model) == {"y": pytest.approx(0.04)}
    results, _, _ = fd.fuzz_case(make_case(1436930359), [2], ["ort"], precision="fp16")
    assert [r["cls"] for r in results] == ["ok"], [(r["level"], r["cls"], r["detail"]) for r in results]
