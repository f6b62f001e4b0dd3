"""tools/handwritten_models.py and export_corpus.py --holdout 14 (eighth sweep part A: attention written
by hand): the plan, trained-like weights (every norm scale and bias perturbed), and that each decoder's
cache step (torch.cat of past and new keys / values, present returned) equals the full forward."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool

torch = pytest.importorskip("torch")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep8a")


def test_plan_covers_the_idioms_in_their_styles(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[14]
    assert len({s["config"]["idiom"] for s in hs.values()}) >= 12
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(hs), None, 14))
    assert len(todo) == sum(len(s["styles"]) for s in hs.values()) == 58
    kv = {a for a, style, _ in todo if style == "kv"}
    assert kv == {a for a, s in hs.items() if s["kind"] == "decoder" and "kv" in s["styles"]}


@pytest.mark.parametrize("arch", ["hw_gpt_tril", "hw_llama_ref", "hw_neox_parallel", "hw_mqa", "hw_alibi",
                                  "hw_sliding", "hw_qknorm"])
def test_cache_step_equals_the_full_forward(arch):
    ec = _export_corpus()
    hw = load_tool("handwritten_models", "handwritten_models_sweep8a")
    spec = ec.HOLDOUT_SETS[14][arch]
    torch.manual_seed(0)
    model = hw.build(spec)
    touched = ec.perturb(model)
    norms = [n for n, p in model.named_parameters() if n.endswith("bias") or ("n1" in n or "norm" in n)]
    assert norms and set(norms) <= set(touched)
    ids = torch.randint(3, 128, (2, 7))
    with torch.no_grad():
        full, _ = model(ids, torch.ones(2, 7, dtype=torch.long))
        _, past = model(ids[:, :4], torch.ones(2, 4, dtype=torch.long))
        assert [tuple(k.shape) for k, _ in past] == [s[0] for s in model.past_shapes(ids[:, :4])]
        step, _ = model(ids[:, 4:], torch.ones(2, 7, dtype=torch.long), past)
    assert torch.allclose(step, full[:, 4:], atol=1e-5)
