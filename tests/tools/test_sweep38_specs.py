"""Hold-out 50 (thirty-eighth sweep, docs/holdout.md): tools/holdout_specs.py HOLDOUT38 (Dia's decoder cache, float16
kv exports) and tools/pretool_holdout.py over any input (--inputs, --set 50)."""

from __future__ import annotations

import json

import pytest

from tests.tool_modules import identity_model, load_tool


@pytest.fixture
def ec(monkeypatch):
    mod = load_tool("export_corpus", "export_corpus_sweep38")
    monkeypatch.setattr(mod, "SPECS", {**mod.SPECS, **mod.HOLDOUT_SETS[50]})
    return mod


def test_plan(ec):
    hs = ec.HOLDOUT_SETS[50]
    assert set(ec.plan_holdout(list(hs), None, 50)) == {("dia_decoder_h50", "kv", "trained")}
    half = {(a, s) for a, s, _ in ec.plan_holdout(list(hs), None, 50, dtype="float16")}
    assert half == {(f"{a}_h50", "kv") for a in ("dia_decoder", "whisper_decoder", "deepseek_v3", "glm")}


def test_dia_decoder_kv_export_forward(ec):
    """Dia's decoder (kind encoder: ids [B, T, 2], the encoder's states an extra input) takes an EncoderDecoderCache
    and builds none: the forward reading the cache's shapes needs the states and a cache object, and the wrapper
    fills the self-attention half (the old code: 'NoneType' object has no attribute 'shape')."""
    torch = pytest.importorskip("torch")
    _, model, _ = ec.build_model("dia_decoder_h50", "trained")
    feeds, dims = ec.example_inputs("dia_decoder_h50", "kv", model)
    keys = [n for n in feeds if n.startswith("past_key_values.")]
    assert len(keys) == 2 * model.config.num_hidden_layers and all(feeds[n].shape[2] == ec.PAST for n in keys)
    assert dims["input_ids"] == ["batch", "sequence", 2] and "encoder_hidden_states" in feeds
    spec, names = ec.SPECS["dia_decoder_h50"], list(feeds)
    wrapper = ec._Wrap.make(spec, model, "kv", model.config.num_hidden_layers)(names).eval()
    with torch.no_grad():
        out = wrapper(*(feeds[n] for n in names))
    assert tuple(out[0].shape) == (ec.BATCH, ec.SEQ, model.config.hidden_size)
    assert len(out) == 1 + len(keys) and all(t.shape[2] == ec.PAST + ec.SEQ for t in out[1:])


@pytest.fixture
def pt():
    return load_tool("pretool_holdout", "pretool_holdout_sweep38")


def _folder(tmp_path, dtype):
    src = tmp_path / "exports"
    src.mkdir()
    identity_model(str(src / "m__kv__trained.onnx"), [2, 3])
    (src / "manifest.json").write_text(json.dumps({"files": {"m__kv__trained.onnx": {
        "file": "m__kv__trained.onnx", "arch": "m", "dtype": dtype}}, "failed": {}}))
    return src


def test_inputs_from_a_folder(pt, tmp_path):
    """--inputs: a folder's files with its own manifest entry (the old script read the corpus's only), the source a
    path; fp16 skipped on a float16 input."""
    src = _folder(tmp_path, "float16")
    models = pt.expand_inputs([str(src), "llama__kv__trained"])
    assert models == [str(src / "m__kv__trained.onnx"), "llama__kv__trained"]
    out = tmp_path / "out"
    copy = {"copy": lambda s, d, e: __import__("shutil").copyfile(s, d), "fp16": lambda s, d, e: 1 / 0}
    pt.write_derived(out, models[:1], ["copy", "fp16"], copy, kind="pretool", about="t",
                     check=lambda s, d, e: {"passed": True})
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["files"]["m__kv__trained__copy.onnx"]
    assert entry["arch"] == "m" and entry["source"] == str(src / "m__kv__trained.onnx") and entry["pretool"] == "copy"
    assert list(manifest["files"]) == ["m__kv__trained__copy.onnx"] and not manifest["failed"]


def test_inputs_errors(pt, tmp_path):
    with pytest.raises(SystemExit, match="not a corpus model"):
        pt.expand_inputs(["no_such_model__kv"])
    lone = tmp_path / "lone.onnx"
    identity_model(str(lone), [1])
    with pytest.raises(SystemExit, match="no manifest.json"):
        pt.expand_inputs([str(lone)])


def test_default_plan_is_set_13(pt):
    assert pt.expand_inputs(pt.MODELS) == list(pt.MODELS)
    assert set(pt.SET50["tools"]) <= set(pt.TOOLS) and "fp16" in pt.SET50["tools"]
