"""tools/holdout_specs.py HOLDOUT24 and export_corpus.py --holdout 36 (encoder / vision / speech families as
transformers 4.45 / 4.53 wrote them): the plan, the version pins, the configs taken from the families' own sets,
and the venv side of the hand-off knowing the set (docs/holdout.md, twenty-fourth sweep). No torch needed."""

from __future__ import annotations

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_encoder_drift")


def test_every_spec_pins_445_or_453_and_keeps_its_family_config():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[36]
    assert len(hs) == 43 and len({s["base_arch"] for s in hs.values()}) == 32
    for name, spec in hs.items():
        base, tag = name.rsplit("_tf", 1)
        assert spec["transformers"] == {"445": "4.45.2", "453": "4.53.3"}[tag] == ec.LEGACY_VERSIONS[tag], name
        assert spec["base_arch"] == base and spec["kind"] in ("encoder", "vision", "audio"), name
        assert set(spec["styles"]) <= {"legacy", "legacy_sdpa"}, name
        # the family's config (from the corpus or its hold-out set) less a pinned attention: the style picks it
        own = ec.SPECS.get(base) or next(s[base] for n, s in sorted(ec.HOLDOUT_SETS.items()) if base in s)
        assert spec["config"] == {k: v for k, v in own["config"].items() if k != "attn_implementation"}, name


def test_plan_is_legacy_for_all_and_sdpa_where_the_class_had_it(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[36]
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})  # the shared corpus dict stays as it is
    todo = list(ec.plan_holdout(list(hs), None, 36))
    assert len(todo) == 52 and all(w == "trained" for _, _, w in todo)
    sdpa445 = {a for a, s, _ in todo if s == "legacy_sdpa" and a.endswith("_tf445")}
    assert sdpa445 == {f"{a}_tf445" for a in ("xlm_roberta", "camembert", "bart_encoder", "deit", "dinov2",
                                              "siglip_vision", "wav2vec2", "hubert", "data2vec_audio")}
    assert ("electra_tf445", "legacy", "trained") in todo and ("swin_tf453", "legacy", "trained") in todo
    assert not any(s.endswith("_kv") for _, s, _ in todo)


def test_the_version_venv_side_knows_the_set(tmp_path, monkeypatch):
    """The venv's _legacy_export rebuilds SPECS from holdout_specs: without set 36 there, every hand-off of this
    set fails with a KeyError inside the venv."""
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", dict(ec.SPECS))
    got = {}
    monkeypatch.setattr(ec, "export_torch", lambda arch, *a: got.setdefault("spec", ec.SPECS[arch]))
    monkeypatch.delenv("EXPORT_CORPUS_CONFIG", raising=False)
    assert ec.main(["_legacy_export", "swin_tf445", "legacy", "trained", str(tmp_path / "x.onnx")]) == 0
    assert got["spec"]["transformers"] == "4.45.2" and "attn_implementation" not in got["spec"]["config"]
