"""tools/holdout_specs.py HOLDOUT5D and export_corpus.py --holdout 9 (transformers 4.48 / 4.53): the plan, the
specs' version pins, the hand-off's error when a version's venv is missing, and the broadcast stand-in for
4.53's vmap masks in TorchScript exports (docs/holdout.md, fifth sweep part D). Only the last needs torch."""

from __future__ import annotations

import sys
import types

import pytest
from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_mid")


def test_every_mid_spec_pins_448_or_453_and_keeps_the_corpus_config():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[9]
    assert len(hs) == 49 and len({s["base_arch"] for s in hs.values()}) == 29
    for name, spec in hs.items():
        base, tag = name.rsplit("_tf", 1)
        assert spec["transformers"] == {"448": "4.48.3", "453": "4.53.3"}[tag] == ec.LEGACY_VERSIONS[tag], name
        # head_dim is honoured since 4.46: the corpus config as it is (part B dropped it for GQA)
        assert spec["base_arch"] == base and spec["config"] == ec.SPECS[base]["config"], name
        assert spec["cache_object"] and set(spec["styles"]) <= set(ec.LEGACY_ATTN), name


def test_plan_holds_cache_styles_for_decoders_and_dynamo_styles_for_453(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[9]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[9]), None, 9))
    assert len(todo) == 74 and all(w == "trained" for _, _, w in todo)
    for arch, style, _ in todo:
        if style.endswith("_kv"):
            assert ec.SPECS[arch]["kind"] in ("decoder", "seq2seq_decoder") and style in ec.KV_STYLES, arch
        if style.startswith("legacy_dynamo"):
            assert arch.endswith("_tf453") and not ec.base_style(style).startswith("torchscript")
    assert ("whisper_decoder_tf453", "legacy_sdpa_kv", "trained") in todo
    assert ("llama_tf453", "legacy_dynamo_kv", "trained") in todo
    assert ("t5_decoder_tf448", "legacy_kv", "trained") in todo
    assert not any(a.startswith("qwen3_tf448") or a.startswith("gemma3_tf448") for a, _, _ in todo)  # newer


def test_missing_version_venv_is_a_clear_error(tmp_path, monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[9]})
    monkeypatch.setattr(ec, "LEGACY_VENVS", tmp_path)
    with pytest.raises(RuntimeError, match=r"no transformers 4\.53\.3 venv .*export_venv\.sh --transformers 4\.53\.3"):
        ec.export_legacy("llama_tf453", "legacy_sdpa_kv", "trained", tmp_path / "x.onnx")


def test_float16_plan_is_the_half_archs_decoders_in_their_styles(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[9]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[9]), None, 9, "float16"))
    assert {a for a, _, _ in todo} == {"llama_tf448", "phi3_tf448", "llama_tf453", "qwen3_tf453", "phi3_tf453",
                                       "gemma3_tf453"}
    assert len(todo) == 19 and all(s in ec.SPECS[a]["styles"] for a, s, _ in todo)


def test_hand_off_passes_the_dtype_to_the_version_venv(tmp_path, monkeypatch):
    """--holdout 9 --dtype float16: the venv's export_torch gets the dtype (the hand-off dropped it before)."""
    pytest.importorskip("torch")  # export_torch imports it first (the CI venv has none)
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[9]})
    monkeypatch.setattr(ec, "LEGACY_VENVS", tmp_path)
    (tmp_path / "tf453/bin").mkdir(parents=True)
    (tmp_path / "tf453/bin/python").touch()
    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        return types.SimpleNamespace(returncode=0, stdout='{"dtype": "float16"}\n', stderr="")

    monkeypatch.setattr(ec.subprocess, "run", run)
    monkeypatch.setattr(ec, "_pinned_elsewhere", lambda spec: True)
    extra = ec.export_torch("llama_tf453", "legacy_sdpa_kv", "trained", tmp_path / "x.onnx", "float16")
    assert extra["dtype"] == "float16"
    assert seen[0][2:] == ["_legacy_export", "llama_tf453", "legacy_sdpa_kv", "trained", str(tmp_path / "x.onnx"),
                           "float16"]


def _vmapped(fn, bh_indices=True):
    """What transformers 4.53's masking_utils._vmap_for_bhqkv computes: fn vmapped over kv, q (and h, b)."""
    torch = pytest.importorskip("torch")

    dims = [(None, None, None, 0), (None, None, 0, None)] + ([(None, 0, None, None), (0, None, None, None)]
                                                              if bh_indices else [])
    for d in dims:
        fn = torch.vmap(fn, in_dims=d, out_dims=0)
    return fn


@pytest.mark.parametrize("bh_indices", [True, False])
def test_traceable_masks_give_the_vmapped_mask_and_restore(monkeypatch, bh_indices):
    torch = pytest.importorskip("torch")
    ec = _export_corpus()
    fake = types.ModuleType("transformers.masking_utils")
    fake._vmap_for_bhqkv, fake.TransformGetItemToIndex, fake.find_packed_sequence_indices = _vmapped, object, len
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(masking_utils=fake))
    padding = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)

    def mask(b, h, q, kv):  # causal, a window of 3, and (with batch indices) the padding mask
        m = (kv <= q) & (kv > q - 3)
        return m & padding[b, kv] if bh_indices else m

    b, h, q, kv = torch.arange(2), torch.arange(1), torch.arange(4, 7), torch.arange(7)
    args = (b, h, q, kv) if bh_indices else (None, None, q, kv)
    want = _vmapped(mask, bh_indices)(*args)
    with ec._traceable_masks(True):
        assert fake.TransformGetItemToIndex is not object and fake.find_packed_sequence_indices(q) is None
        got = fake._vmap_for_bhqkv(mask, bh_indices)(*args)
    assert fake._vmap_for_bhqkv is _vmapped and fake.TransformGetItemToIndex is object
    assert fake.find_packed_sequence_indices is len
    assert got.shape == want.shape == ((2, 1, 3, 7) if bh_indices else (3, 7))
    assert torch.equal(got, want) and 0 < int(got.sum()) < got.numel()
    with ec._traceable_masks(False):  # off: the vmap stays
        assert fake._vmap_for_bhqkv is _vmapped


def test_the_parent_config_travels_to_the_version_venv(tmp_path, monkeypatch):
    """--head-dim 64 changes a spec's config in this process; the venv's _legacy_export rebuilds the specs
    from holdout_specs, so the config goes with the call (EXPORT_CORPUS_CONFIG) and replaces its own."""
    import json
    import subprocess

    ec = _export_corpus()
    cfg = dict(ec.HOLDOUT_SETS[9]["llama_tf453"]["config"], hidden_size=128, head_dim=64)
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, "llama_tf453": dict(ec.HOLDOUT_SETS[9]["llama_tf453"], config=cfg)})
    monkeypatch.setattr(ec, "LEGACY_VENVS", tmp_path)
    (tmp_path / "tf453/bin").mkdir(parents=True)
    (tmp_path / "tf453/bin/python").touch()
    seen = {}

    def run(cmd, env, **kw):
        seen.update(env=env, cmd=cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout='{"exporter": {}}\n', stderr="")

    monkeypatch.setattr(ec.subprocess, "run", run)
    assert ec.export_legacy("llama_tf453", "legacy_sdpa_kv", "trained", tmp_path / "x.onnx") == {"exporter": {}}
    assert json.loads(seen["env"]["EXPORT_CORPUS_CONFIG"]) == cfg
    assert seen["cmd"][2:4] == ["_legacy_export", "llama_tf453"]

    got = {}
    monkeypatch.setattr(ec, "SPECS", dict(ec.SPECS))
    monkeypatch.setattr(ec, "export_torch", lambda arch, *a: got.setdefault("config", ec.SPECS[arch]["config"]))
    monkeypatch.setenv("EXPORT_CORPUS_CONFIG", seen["env"]["EXPORT_CORPUS_CONFIG"])
    assert ec.main(["_legacy_export", "llama_tf453", "legacy_sdpa_kv", "trained", str(tmp_path / "x.onnx")]) == 0
    assert got["config"] == cfg and ec.HOLDOUT_SETS[9]["llama_tf453"]["config"]["hidden_size"] == 32
