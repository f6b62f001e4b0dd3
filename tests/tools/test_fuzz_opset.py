"""The fuzzer's pinned output opsets (tools/fuzz_opset.py: optimize(opset=N), N below 23) and GQA's
Tile / Gather / Concat head repeats inside KV-cache decoder steps (tools/fuzz_decoder.py)."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_decoder  # noqa: E402
import fuzz_differential as fd  # noqa: E402
import fuzz_opset  # noqa: E402
from fuzz_motifs import make_case, make_decoder_case  # noqa: E402

# a pageable decoder step (head size 64, a padded past, GQA 4 over 2); seed 77 is opset 18
DECODER = dict(head=64, heads=4, kv_heads=2, layers=1, window=0, sinks=False, fp16=False, upcast=False,
               decode=True, positions="offset", padded=True, dim_names="optimum", repeat="gather",
               present_dims=True, kv_fp8=False)


def test_pins_are_drawn_from_the_models_opset_to_22_and_never_at_o1():
    pins = collections.Counter()
    for opset in (14, 18, 22, 23):
        model = make_decoder_case(77, **DECODER).model
        model.opset_import[0].version = opset
        for seed in range(200):
            for level in (1, 2, 3, 4):
                for target in ("ort", "onnx", "trt"):
                    pin = fuzz_opset.draw_pin(seed, model, level, target)
                    assert pin == fuzz_opset.draw_pin(seed, model, level, target)   # deterministic
                    if level == 1 or opset == 23:
                        assert pin is None
                    elif pin is not None:
                        assert max(opset, 14) <= pin <= 22
                        pins[(opset, pin)] += 1
        if opset < 23:   # about PIN_SHARE of the 1800 level >= 2 runs, every allowed pin drawn
            assert 0.25 < sum(n for (o, _), n in pins.items() if o == opset) / 1800 < 0.45
            assert {p for (o, p) in pins if o == opset} == set(range(opset, 23))
        assert all(fuzz_opset.draw_pin(s, model, 3, "onnx", share=0) is None for s in range(50))


def test_a_pinned_run_lowers_attention_below_23_and_stays_under_its_pin():
    """The decoder at opset 18 pinned to 20: attention takes lower_plain.yaml (no Attention-23), the
    output stays at 18 (nothing needed a raise), and it matches the original; unpinned it is 23."""
    case = make_decoder_case(77, **DECODER)
    assert fuzz_opset.model_opset(case.model) == 18
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, opt, fires = fd.run_one(case.model, case.feeds, ref, 3, "onnx", opset=20)
    assert cls == "ok", detail
    assert fires.get("attention-kv-plain-grouped") and fuzz_opset.model_opset(opt) <= 20, fires
    assert not any(n.op_type == "Attention" for n in opt.graph.node)
    _, _, unpinned, _ = fd.run_one(case.model, case.feeds, ref, 3, "onnx")
    assert fuzz_opset.model_opset(unpinned) == 23


def test_an_output_above_the_pin_is_the_failure_class_opset(monkeypatch):
    """A planted optimizer that ignores the ceiling (raises to 23 anyway) is caught: class opset."""
    import onnx_fuse

    real = onnx_fuse.optimize

    def ignoring_the_pin(model, **kw):
        kw.pop("opset", None)
        return real(model, **kw)

    case = make_decoder_case(77, **DECODER)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    monkeypatch.setattr(onnx_fuse, "optimize", ignoring_the_pin)
    cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, 3, "onnx", opset=20)
    assert cls == "opset" and "opset 23 above the pin opset=20" in detail, (cls, detail)
    assert "opset" in fd.FAIL_CLASSES


def test_fuzz_case_pins_runs_and_records_the_pin(tmp_path):
    case = make_decoder_case(77, **DECODER)
    runs = fd.fuzz_case(case, [1, 3], ["onnx", "trt"], pin_share=1.0)[0]
    pins = {(r["level"], r["target"]): r["opset"] for r in runs}
    assert pins[(1, "onnx")] is None and pins[(1, "trt")] is None
    assert all(18 <= pins[(3, t)] <= 22 for t in ("onnx", "trt")), pins
    assert all(r["cls"] == "ok" for r in runs), [(r["level"], r["target"], r["cls"], r["detail"]) for r in runs]
    assert all(r["opset"] is None for r in fd.fuzz_case(case, [3], ["onnx"])[0])   # tests' default: no pin


def test_summary_counts_pinned_runs(tmp_path):
    summary = fd.fuzz(3, seed=17, levels=[3], targets=["onnx"], out=tmp_path / "out", pin_share=1.0)
    assert summary["pin_share"] == 1.0 and summary["failed"] == 0, summary["failures"]
    pinned = sum(sum(c.values()) for c in summary["pinned_runs"].values())
    opsets = [make_case(fd.case_seed(17, i)).model.opset_import[0].version for i in range(3)]
    assert pinned == sum(o < 23 for o in opsets) == sum(summary["by_level_target"].get("O3/onnx@pin", {}).values())


@pytest.mark.parametrize("value", ["-0.1", "1.5", "x"])
def test_bad_pin_share_exits_2(value, tmp_path):
    proc = subprocess.run([sys.executable, str(TOOLS / "fuzz_differential.py"), "--count", "1", "--pin-share", value,
                           "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


def test_decoder_steps_draw_every_gqa_repeat_form():
    """GQA decoder steps draw tools/fuzz_forms.py's repeats (Tile, Gather, Concat and the near misses)
    from a side stream; steps without GQA keep HF's / the static Expand."""
    forms = collections.Counter()
    for seed in range(600):
        case = make_case(seed)
        if case.spec:
            forms[case.spec["repeat"]] += 1
            if case.spec["heads"] == case.spec["kv_heads"]:
                assert case.spec["repeat"] in ("hf", "static")
    assert set(forms) == {"hf", "static", *fuzz_decoder.REPEAT_FORMS}, forms


@pytest.mark.parametrize("form", ["tile_ri", "gather", "concat"])
def test_decoder_with_a_gqa_repeat_form_is_paged_and_exact(form):
    """Tile on a new axis, Gather(h // n) and Concat of copies over the KV cache: GQA recognized,
    paged at O4 trt (fp8 pools too), every run matching the original."""
    runs = fd.fuzz_case(make_decoder_case(77, **{**DECODER, "repeat": form, "kv_fp8": True}), [3, 4], ["onnx", "trt"])[0]
    by = {(r["level"], r["target"]): r for r in runs}
    assert all(r["cls"] == "ok" for r in runs), [(k, r["cls"], r["detail"][:200]) for k, r in by.items()]
    assert by[(3, "onnx")]["fires"].get("attention-repeat-kv")
    assert by[(4, "trt")]["fires"].get("trt-paged-kv") and by[(4, fd.FP8_TARGET)]["fires"].get("trt-paged-kv")


@pytest.mark.parametrize("form", ["tile_heads", "gather_mod"])
def test_decoder_near_miss_repeat_is_not_taken_for_gqa(form):
    """k.repeat(1, n, 1, 1) and Gather(h % Hkv) read kv head h % Hkv: with Hkv = 2 not GQA's map, so
    neither the repeat rule nor the paged rewrite (which reads h // n) may take it; values exact."""
    runs = fd.fuzz_case(make_decoder_case(77, **{**DECODER, "repeat": form}), [3, 4], ["onnx", "trt"])[0]
    assert all(r["cls"] == "ok" for r in runs), [(r["level"], r["target"], r["cls"], r["detail"][:200]) for r in runs]
    assert not any(r["fires"].get("attention-repeat-kv") or r["fires"].get("trt-paged-kv") for r in runs)


def test_some_decoder_steps_are_below_opset_18_so_lower_pins_are_drawn():
    """A side stream writes LOW_OPSET_SHARE of the decoder steps at opset 15..17 (sinks' ReduceMax
    with its axes attribute there): valid models, and pins down to 15 come up."""
    import onnx

    opsets, pins = collections.Counter(), set()
    for seed in range(400):
        case = make_case(seed)
        if not case.spec:
            continue
        own = fuzz_opset.model_opset(case.model)
        opsets[own] += 1
        if own < 18:
            onnx.checker.check_model(case.model, full_check=True)
            pins |= {fuzz_opset.draw_pin(seed, case.model, 3, t, share=1.0) for t in ("ort", "onnx", "trt")}
    assert set(fuzz_decoder.LOW_OPSETS) <= set(opsets) and {18, 20, 23} <= set(opsets), opsets
    assert min(pins) == 15, pins
    for seed in (13, 3678026147, 2500259774):   # the decoder seeds tests name keep their opset
        assert fuzz_opset.model_opset(make_case(seed).model) >= 18
