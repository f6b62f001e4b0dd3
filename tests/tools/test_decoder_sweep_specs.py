"""tools/holdout_specs.py HOLDOUT5A and export_corpus.py --holdout 6 (fifth sweep part A: decoders of
transformers 5.24 no earlier set has): the plan, that every architecture is new to the sets before it,
and the manifest's sizes for configs that spell them their own way (docs/holdout.md, fifth sweep part A).
No torch needed."""

from __future__ import annotations

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_decoder_sweep")


def test_sweep_architectures_are_new_decoders():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[6]
    assert len(hs) == 18
    hold = load_tool("holdout_specs", "holdout_specs_decoder_sweep")
    seen = set(ec.SPECS) | set(hold.HOLDOUT) | set(hold.HOLDOUT2) | set(hold.HOLDOUT3)
    assert not seen & set(hs)
    seen_types = {s["model_type"] for s in (*ec.SPECS.values(), *hold.HOLDOUT.values(), *hold.HOLDOUT2.values(),
                                            *hold.HOLDOUT3.values())}
    assert not seen_types & {s["model_type"] for s in hs.values()}
    assert {s["kind"] for s in hs.values()} == {"decoder"}


def test_plan_is_the_corpus_styles(monkeypatch):
    """43 files, trained weights; cache styles only where the architecture has a cache (GPT-1 and XLM:
    none), and no hold-out-only style (noopt, static_cache ...)."""
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[6]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[6]), None, 6))
    assert len(todo) == 43 and all(w == "trained" for _, _, w in todo)
    assert {s for _, s, _ in todo} == {"dyn_mask", "kv", "static_nomask", "torchscript", "torchscript_kv"}
    for arch in ("openai_gpt", "xlm"):
        assert not [s for a, s, _ in todo if a == arch and s in ec.KV_STYLES], arch
    assert ("falcon_h1", "static_nomask", "trained") in todo and ("minicpm3", "torchscript_kv", "trained") in todo


def test_manifest_reads_xlm_hidden_size(monkeypatch, tmp_path):
    """XLM names its hidden size emb_dim: make_entry found none and the export was recorded as failed
    (unsupported operand for //)."""
    import onnx
    from onnx import TensorProto, helper

    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[6]})
    monkeypatch.setattr(ec, "ort_check", lambda path, entry: {"ok": True})
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    path = tmp_path / "xlm__dyn_mask__trained.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), path)
    entry = ec.make_entry("xlm", "dyn_mask", "trained", path, {})
    assert entry["hidden_size"] == 32 and entry["head_dim"] == 16 and entry["num_heads"] == 2
