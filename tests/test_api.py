"""The Python API and report: inputs untouched, report contents, levels and flags checked."""

import json

import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.demo_model import build_demo_model
from onnx_fuse.errors import UserError


def test_optimize_O0_keeps_graph_and_reports():
    model = build_demo_model(layers=1)
    before = model.SerializeToString()
    result = onnx_fuse.optimize(model, level=0, verify=True)
    assert model.SerializeToString() == before  # the caller's proto is untouched
    rep = result.report.to_dict()
    assert rep["nodes_before"] == rep["nodes_after"] == len(model.graph.node)
    assert rep["status"] == "PASSED" and rep["verify"]["passed"]
    assert rep["ops_before"]["MatMul"] == 8  # 6 projections + 2 attention products


def test_optimize_does_not_mutate_an_ir_model():
    model = ir.from_proto(build_demo_model(layers=1))
    n = len(model.graph)
    onnx_fuse.optimize(model, level=1)
    assert len(model.graph) == n


def test_report_json_is_written_atomically(tmp_path):
    result = onnx_fuse.optimize(build_demo_model(layers=1), level=0)
    path = tmp_path / "r.json"
    result.report.write_json(path)
    data = json.loads(path.read_text())
    assert data["level"] == 0 and data["target"] == "ort"
    assert not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize("kwargs, message", [
    ({"level": 7}, "unknown optimization level"),
    ({"target": "tpu"}, "unknown target"),
    ({"level": 1, "disable": ["no-such-pass"]}, "no pass of that name"),
])
def test_bad_options_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        onnx_fuse.optimize(build_demo_model(layers=1), **kwargs)


def test_save_refuses_to_overwrite_input(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(build_demo_model(layers=1), src)
    data = src.read_bytes()
    result = onnx_fuse.optimize(src, level=0)
    with pytest.raises(UserError, match="overwrite the input"):
        result.save(src)
    assert src.read_bytes() == data
    out = tmp_path / "o.onnx"
    result.save(out)
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_prepare_for_fusion_runs_the_stages_before_the_rules():
    """What `rules explain` matches on: cleaned up, at the model's own opset (the fusion pass
    raises it on demand; `rules explain` upgrades for a rule that needs it)."""
    from onnx_fuse.api import prepare_for_fusion

    proto = build_demo_model()
    onnx_model = prepare_for_fusion(proto, level=3, target="onnx")
    assert onnx_model.opset_imports[""] == 18
    ops = [n.op_type for n in onnx_model.graph]
    assert "Identity" not in ops and "Softmax" in ops  # cleanup ran, the rules did not
    assert proto.opset_import[0].version == 18  # the input is untouched
    assert prepare_for_fusion(proto, level=1, target="onnx").opset_imports[""] == 18  # O1: no rules, no upgrade


def _unchecked_wrong(tmp_path, rule):
    """A wrong user rule on a model whose input dim has no name: the per-rewrite check cannot
    run (unknown shape), so only the whole-model verification can catch it."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    return src, rule


def test_save_refuses_a_model_that_failed_verification(tmp_path, wrong_relu_rule):
    from onnx_fuse.errors import VerificationError

    src, rule = _unchecked_wrong(tmp_path, wrong_relu_rule)
    result = onnx_fuse.optimize(src, level=2, rules=[str(rule)], verify=True)
    assert result.report.status == "FAILED" and not result.report.passed
    assert result.report.verify["rewrites"]["unchecked"] >= 1
    out = tmp_path / "o.onnx"
    with pytest.raises(VerificationError, match="failed verification.*output 'z' differs.*force=True"):
        result.save(out)
    assert not out.exists()
    result.save(out, force=True)
    assert out.exists()


def test_cli_verify_failure_writes_nothing_unless_forced(tmp_path, capsys, wrong_relu_rule):
    from onnx_fuse.cli.main import main

    src, rule = _unchecked_wrong(tmp_path, wrong_relu_rule)
    out = tmp_path / "o.onnx"
    args = ["optimize", str(src), "-o", str(out), "-O", "2", "--rules", str(rule), "--verify", "-q"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert not out.exists()
    assert "FAILED" in captured.out
    assert "verification failed (output 'z' differs" in captured.err and "--force" in captured.err
    assert main([*args, "--force"]) == 1
    assert out.exists()


def test_status_says_not_verified_without_verify():
    result = onnx_fuse.optimize(build_demo_model(layers=1), level=1)
    rep = result.report.to_dict()
    assert rep["status"] == "NOT VERIFIED" and "not requested" in rep["status_reason"]
    assert result.report.passed  # nothing failed: exit 0
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    result.report.render(Console(file=buf, width=200))
    text = buf.getvalue()
    assert "NOT VERIFIED" in text and "PASSED" not in text


def test_verified_report_names_its_checks():
    result = onnx_fuse.optimize(build_demo_model(layers=1), level=3, verify=True)
    rep = result.report.to_dict()
    assert rep["status"] == "PASSED" and rep["status_reason"] == ""
    assert rep["verify"]["ort_optimizations"] == {"original": "off", "optimized": "default"}
    assert rep["verify"]["rewrites"]["checked"] >= 1
