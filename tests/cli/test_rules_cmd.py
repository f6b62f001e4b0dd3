"""``onnx-fuse rules explain``: it matches on the model as optimize's fusion stage sees it."""

from __future__ import annotations

import json

import onnx
import pytest

from onnx_fuse.cli.main import main
from onnx_fuse.demo_model import build_demo_model


@pytest.fixture
def demo(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)  # opset 18; the onnx and trt targets upgrade it to 23
    return str(path)


def explain(capsys, *args: str) -> tuple[int, list[dict]]:
    code = main(["rules", "explain", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else []


@pytest.mark.parametrize("rule,target", [
    ("attention", None),            # default: the rule's first target, ort
    ("attention", "trt"),
    ("attention-packed-ort", None),
    ("gelu-erf", None),             # ort (the rule's first target)
    ("gelu-onnx", None),            # onnx; Gelu-20 needs opset 20: explain upgrades like optimize
    ("gelu-erf", "trt"),
    ("layer-norm", "ort"),
])
def test_explain_sees_the_prepared_model(demo, capsys, rule, target):
    code, results = explain(capsys, demo, "--rule", rule, *(["--target", target] if target else []))
    assert code == 0
    statuses = [r["status"] for r in results]
    assert "skipped" not in statuses, results
    assert statuses.count("matched") in (2, 4), statuses  # 2 layers (layer-norm: 2 per layer)


def test_explain_raw_matches_the_model_as_loaded(demo, capsys):
    code, results = explain(capsys, demo, "--rule", "gelu-onnx", "--raw")
    assert code == 0
    assert results and all(r["status"] == "skipped" and "opset 18 is outside" in r["reason"]
                            for r in results), results


def test_explain_for_a_target_the_rule_does_not_run_on_is_a_user_error(demo, capsys):
    assert main(["rules", "explain", demo, "--rule", "gelu-onnx", "--target", "ort"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not run for target 'ort'" in err[0]


def test_explain_agrees_with_optimize(demo, capsys):
    import onnx_fuse

    for target, rule in (("ort", "attention-packed-ort"), ("onnx", "attention"), ("trt", "gelu-erf")):
        fires = onnx_fuse.optimize(demo, level=3, target=target).report.rule_fires
        code, results = explain(capsys, demo, "--rule", rule, "--target", target)
        assert code == 0
        assert sum(r["status"] == "matched" for r in results) == fires[rule] == 2
