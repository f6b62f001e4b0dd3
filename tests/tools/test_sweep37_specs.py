"""tools/holdout_specs.py HOLDOUT37 and export_corpus.py --holdout 49 (thirty-seventh sweep: popular architectures in
(export style x dtype) cells no plan had; docs/holdout.md, thirty-seventh sweep): the plan."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool


@pytest.fixture
def ec(monkeypatch):
    mod = load_tool("export_corpus", "export_corpus_sweep37")
    monkeypatch.setattr(mod, "SPECS", {**mod.SPECS, **mod.HOLDOUT_SETS[49]})
    return mod


NEW32 = {"deepseek_v3": ("static_cache",), "granite": ("static_cache", "torchscript_kv"),
         "olmo2": ("static_cache", "torchscript_kv"), "gemma2": ("static_cache", "kv_latest_opset"),
         "phi3": ("kv_latest_opset",), "whisper_decoder": ("torchscript_kv",), "bart_decoder": ("torchscript_kv",),
         "gpt_oss": ("static_nomask", "torchscript")}
NEW16 = {"deepseek_v3": ("dyn_mask", "kv"), "granite": ("kv",), "whisper_decoder": ("kv",),
         "modernbert": ("dyn_mask",), "mixtral": ("kv",), "gemma2": ("static_cache",)}


def test_plan(ec):
    hs = ec.HOLDOUT_SETS[49]
    todo = {(a, s) for a, s, _ in ec.plan_holdout(list(hs), None, 49)}
    assert todo == {(f"{a}_h49", s) for a, st in NEW32.items() for s in st}
    half = {(a, s) for a, s, _ in ec.plan_holdout(list(hs), None, 49, dtype="float16")}
    assert half == {(f"{a}_h49", s) for a, st in NEW16.items() for s in st}


def test_cells_are_new(ec):
    """Each planned cell is its corpus architecture's tiny config in a (style, dtype) that neither the corpus's own
    styles nor any earlier set's spec of that model type names (the float16 cells: no earlier half plan has them)."""
    hs = ec.HOLDOUT_SETS[49]
    earlier = [ec.HOLDOUT_SETS[n] for n in sorted(ec.HOLDOUT_SETS) if n != 49]
    for arch in NEW32.keys() | NEW16.keys():
        spec = hs[f"{arch}_h49"]
        src = ec.SPECS[arch]
        assert spec["base_arch"] == arch and spec["config"] == src["config"]
        assert spec["model_type"] == src["model_type"]
        for style in NEW32.get(arch, ()):
            assert (arch, style, "trained") not in set(ec.plan([arch], None, ["trained"])), (arch, style)
            for s in earlier:   # no earlier spec of the same model type (or the same part) planned this style
                for other in s.values():
                    if isinstance(other, dict) and other.get("model_type") == src["model_type"] \
                            and other.get("part") == src.get("part"):
                        assert style not in (other.get("styles") or ()), (arch, style)
