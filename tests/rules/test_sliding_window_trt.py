"""-O4 --target trt with a sliding-window mask (Mistral, Gemma 2/3, Cohere2, ...): the padding part of
the Hugging Face mask is matched by structure, the causal part (kv_idx <= q_idx and kv_idx > q_idx - W,
however it is written) is proven on its values by sliding_window(), and the attention becomes
onnx_fuse::FusedAttention(causal=1, window=W) (fused-attention-trt-sliding; with Gemma 2's softcap
fused-attention-trt-softcap-sliding). Masks that are banded at some positions only, or whose band
changes width, are refused and keep Attention-23 / the plain ops.

The graphs are the committed LLaMA export (head size 64, tests/data/models) with the band added to
its causal mask as transformers' sliding_window_overlay writes it: Greater(kv_idx, Sub(q_idx, W)),
And-ed with the causal comparison. The trt graphs run in ORT through our reference
(onnx_fuse.reference.ort_ops), which now applies ``window``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.sliding_band import with_band

DATA = Path(__file__).resolve().parents[1] / "data"
ENTRY = json.loads((DATA / "models" / "manifest.json").read_text())["models"]["llama64_sdpa_dynamo"]


def _llama() -> onnx.ModelProto:
    return onnx.load(str(DATA / "models" / "llama64_sdpa_dynamo.onnx"))


def _with_band(model: onnx.ModelProto, window: int, **kw) -> onnx.ModelProto:
    return with_band(model, window, **kw)


def _with_softcap(model: onnx.ModelProto, cap: float = 0.5) -> onnx.ModelProto:
    """Gemma 2's Div(c) -> Tanh -> Mul(c) between each score MatMul and its mask Add."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    g.initializer.append(onnx.numpy_helper.from_array(np.array(cap, np.float32), "softcap_c"))
    for k, sm in reversed(list(enumerate(g.node))):
        if sm.op_type != "Softmax":
            continue
        add = producer[sm.input[0]]
        mm = next(x for x in add.input if producer.get(x) is not None and producer[x].op_type == "MatMul")
        add.input[list(add.input).index(mm)] = f"sc{k}_capped"
        at = list(g.node).index(add)
        for j, n in enumerate([onnx.helper.make_node("Div", [mm, "softcap_c"], [f"sc{k}_d"]),
                               onnx.helper.make_node("Tanh", [f"sc{k}_d"], [f"sc{k}_t"]),
                               onnx.helper.make_node("Mul", [f"sc{k}_t", "softcap_c"], [f"sc{k}_capped"])]):
            g.node.insert(at + j, n)
    return model


def _feeds(s: int = 16, pad_from: int = 11) -> dict:
    rng = np.random.default_rng(0)
    f = {"input_ids": rng.integers(0, ENTRY["config"]["vocab_size"], (2, s), dtype=np.int64),
         "attention_mask": np.ones((2, s), np.int64)}
    f["attention_mask"][-1, pad_from:] = 0   # right-padded last row
    return f


def _fa_rules(model: onnx.ModelProto) -> list[str]:
    return [p.value for n in model.graph.node if n.op_type == "FusedAttention"
            for p in n.metadata_props if p.key == "onnx_fuse.rule"]


def _fa_attrs(model: onnx.ModelProto) -> list[dict]:
    return [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            for n in model.graph.node if n.op_type == "FusedAttention"]


@pytest.mark.parametrize("window", [1, 4, 7])
def test_sliding_mask_becomes_fused_attention_with_its_window(h, window):
    original = _with_band(_llama(), window)
    fused = h.fuse(original, "trt", level=4)
    ops = h.ops(fused)
    assert ops["onnx_fuse::FusedAttention"] == ENTRY["num_layers"] and "Attention" not in ops, dict(ops)
    assert _fa_rules(fused) == ["fused-attention-trt-sliding"] * ENTRY["num_layers"]
    for a in _fa_attrs(fused):
        assert a["causal"] == 1 and a["window"] == window and a["softcap"] == 0.0
    for s, pad in ((16, 11), (13, 3)):
        feeds = _feeds(s, pad)
        h.assert_close(original, fused, feeds, atol=1e-4, rtol=1e-3, valid=feeds["attention_mask"])
    # the check can fail: without its window the fused graph is far from the original
    plain = h.fuse(_llama(), "trt", level=4)
    assert all(a.get("window", 0) == 0 for a in _fa_attrs(plain))
    feeds = _feeds()
    ref, other = h.run(original, feeds)[0], h.run(plain, feeds)[0]
    assert np.abs(ref - other)[feeds["attention_mask"].astype(bool)].max() > 0.05


@pytest.mark.parametrize("window", [16, 100])
def test_window_at_least_the_context_stays_exact(h, window):
    """W >= S: the band hides nothing at S = 16; the rule still takes W (the probe runs past W,
    where the band shows) and the result is exact at every length run."""
    original = _with_band(_llama(), window)
    fused = h.fuse(original, "trt", level=4)
    assert [a["window"] for a in _fa_attrs(fused)] == [window] * ENTRY["num_layers"]
    feeds = _feeds()
    h.assert_close(original, fused, feeds, atol=1e-4, rtol=1e-3, valid=feeds["attention_mask"])


def test_plain_causal_mask_keeps_the_structural_rule(h):
    """A plain causal mask is no window: FusedAttention(causal=1, window=0). attention-trt rebuilds the
    export's causal + padding bias (causal-key-padding-bias), so the probed rule takes it, not the
    structural fused-attention-trt-causal, which matched the export's ops."""
    fused = h.fuse(_llama(), "trt", level=4)
    assert _fa_rules(fused) == ["fused-attention-trt-probed"] * ENTRY["num_layers"]
    for a in _fa_attrs(fused):
        assert a["causal"] == 1 and a["window"] == 0


def _reasons(model: onnx.ModelProto, rule: str) -> list[str]:
    from onnx_fuse.api import prepare_for_fusion
    from onnx_fuse.rewrite import explain, load_rule_set

    work = prepare_for_fusion(model, level=4, target="trt")
    return [r.reason for r in explain(work, load_rule_set(target="trt", max_level=4), rule)]


@pytest.mark.parametrize("kind, why", [
    ("until", "a band of 4 keys at some positions but lets a query see all of its"),
    ("halve", "band is not one width")])
def test_masks_banded_only_somewhere_are_refused(h, kind, why):
    """Banded for queries before position 40 only (at the lengths a model is usually tried at it
    looks banded everywhere), or a band that widens with the position: no single W, so no
    FusedAttention; Attention-23 (the plain ops with a softcap) keeps the mask, exactly."""
    kw = {"until": 40} if kind == "until" else {"halve": True}
    for softcap in (False, True):
        original = _with_band(_llama(), 4, **kw)
        if softcap:
            original = _with_softcap(original)
            reasons = _reasons(original, "fused-attention-trt-softcap-sliding")
            assert len(reasons) == ENTRY["num_layers"] and all(why in r for r in reasons), reasons
        fused = h.fuse(original, "trt", level=4)
        ops = h.ops(fused)
        assert "onnx_fuse::FusedAttention" not in ops, dict(ops)
        assert ops["Softmax" if softcap else "Attention"] == ENTRY["num_layers"], dict(ops)
        feeds = _feeds()
        h.assert_close(original, fused, feeds, atol=1e-4, rtol=1e-3, valid=feeds["attention_mask"])


def test_softcap_and_window_gemma2(h):
    """Gemma 2's local layers: softcap and a sliding window, in one FusedAttention."""
    original = _with_softcap(_with_band(_llama(), 5))
    fused = h.fuse(original, "trt", level=4)
    ops = h.ops(fused)
    assert ops["onnx_fuse::FusedAttention"] == ENTRY["num_layers"], dict(ops)
    assert not {"Attention", "Softmax", "Tanh"} & set(ops), dict(ops)
    assert _fa_rules(fused) == ["fused-attention-trt-softcap-sliding"] * ENTRY["num_layers"]
    for a in _fa_attrs(fused):
        assert a["window"] == 5 and a["softcap"] == pytest.approx(0.5) and a["causal"] == 1
    feeds = _feeds()
    h.assert_close(original, fused, feeds, atol=1e-4, rtol=1e-3, valid=feeds["attention_mask"])


@pytest.mark.parametrize("window", [4, 12])
def test_per_rewrite_check_runs_the_band_and_catches_a_wrong_window(tmp_path, window):
    """--verify checks each rewrite on a cut-out with random inputs: the band (base), outside the
    match but computed from the match's own index ranges, is computed there on the original's
    side (random booleans would be no mask the model makes, and rolled the right rewrite back);
    the same rule emitting W + 1 is caught and rolled back (and the probed rule takes the attention
    with the window the mask's values give). A window of 12 is wider than the
    cut-out's default 8 positions: the cut-out then runs W + 3 (_local_check._sequence_length)."""
    import onnx_fuse

    original = _with_band(_llama(), window)
    good = onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True, verify=True)
    assert [a["window"] for a in _fa_attrs(good.to_proto())] == [window] * ENTRY["num_layers"]
    assert not good.report.verify["rewrites"]["failed"], good.report.verify["rewrites"]["failed"]
    assert good.report.status == "PASSED", good.report.status_reason
    text = (Path(onnx_fuse.__file__).resolve().parents[1] / "rules" / "attention" / "fused_attention_trt.yaml").read_text()
    rule = text[text.index("  - name: fused-attention-trt-sliding"):text.index("  - name: fused-attention-trt-padding")]
    wrong = rule.replace("window=sliding_window(base, cm, None, attn_in)",
                         "window=sliding_window(base, cm, None, attn_in) + 1")
    assert wrong != rule
    (tmp_path / "wrong.yaml").write_text("rules:\n" + wrong)
    bad = onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True,
                             verify=True, rules=[str(tmp_path / "wrong.yaml")])
    assert [f["rule"] for f in bad.report.verify["rewrites"]["failed"]] == ["fused-attention-trt-sliding"] * 2
    # rolled back; fused-attention-trt-probed then reads the band from the mask's values
    assert [a["window"] for a in _fa_attrs(bad.to_proto())] == [window] * ENTRY["num_layers"]
    assert bad.report.rule_fires.get("fused-attention-trt-probed") == ENTRY["num_layers"], bad.report.rule_fires


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_other_targets_keep_the_band_exactly(h, target):
    """ort (GroupQueryAttention with the banded mask as attention_bias) and onnx (Attention-23 with
    the mask): no window attribute there, the mask carries the band; the result stays exact,
    padded rows included."""
    original = _with_softcap(_with_band(_llama(), 3)) if target == "onnx" else _with_band(_llama(), 3)
    fused = h.fuse(original, target, level=3)
    ops = h.ops(fused)
    assert ops["com.microsoft::GroupQueryAttention" if target == "ort" else "Attention"] == ENTRY["num_layers"], dict(ops)
    h.assert_close(original, fused, _feeds(), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name, want", [
    ("mistral__dyn_mask__trained", [(1, 4, 0.0), (1, 4, 0.0)]),
    ("starcoder2__dyn_mask__trained", [(1, 4, 0.0), (1, 4, 0.0)]),
    ("gemma2__dyn_mask__trained", [(1, 4, 50.0), (1, 0, 50.0)]),   # softcap, local then global
    ("gemma3__dyn_mask__trained", [(1, 4, 0.0), (1, 0, 0.0)]),
    ("exaone4__dyn_mask__trained", [(1, 4, 0.0), (1, 0, 0.0)]),
])
def test_corpus_sliding_prefill_exports_with_the_head_size_check_lifted(tmp_path, name, want):
    """The corpus' transformers-5 exports (head size 16, which the kernels lack, so through the
    rules without that check): every layer FusedAttention with its window (and Gemma 2's softcap),
    verified against the original (8 tokens > W = 4)."""
    import onnx_fuse

    path = DATA / "corpus" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    text = (Path(onnx_fuse.__file__).resolve().parents[1] / "rules" / "attention" / "fused_attention_trt.yaml").read_text()
    rules = tmp_path / "fa_any_head.yaml"
    rules.write_text("\n".join(ln for ln in text.splitlines()
                               if "FusedAttention's kernels take head sizes" not in ln) + "\n")
    result = onnx_fuse.optimize(str(path), level=4, target="trt", float32_plugins=True,
                                rules=[str(rules)], verify=True)
    got = [(a["causal"], a.get("window", 0), round(a.get("softcap", 0.0), 3)) for a in _fa_attrs(result.to_proto())]
    assert got == want, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
