"""User rules from a YAML file alone, `onnx-fuse rules ...`, and explain."""

from __future__ import annotations

import json

import onnx
import onnx_ir as ir
import pytest
from rw_testing import model_from_text

from onnx_fuse.cli.main import main
from onnx_fuse.rewrite import RULE_TAG, MatchStatus, explain, load_rule_set

SCALED_RELU = """\
rules:
  - name: scaled-relu
    doc: Mul(Relu(x), s)  ->  mycorp::ScaledRelu(x)
    targets: [ort, onnx, trt]
    match: |
      r = Relu(x)
      y = Mul(r, s)
    where:
      s: {scalar: 2.0}
    rewrite: |
      y = mycorp::ScaledRelu(x, scale=float(value(s))) : like(y)
"""

MODEL = """
<ir_version: 10, opset_import: ["" : 20]>
g (float[N, 4] x) => (float[N, 4] y) {
  s = Constant<value = float {2.0}>()
  r = Relu(x)
  y = Mul(s, r)
}"""


@pytest.fixture
def files(tmp_path):
    rules = tmp_path / "my_rules.yaml"
    rules.write_text(SCALED_RELU)
    model = tmp_path / "m.onnx"
    onnx.save(model_from_text(MODEL), model)
    return rules, model, tmp_path


def test_user_fuses_custom_pattern_into_custom_op_with_yaml_alone(files):
    from onnx_fuse.api import optimize

    rules, model, _ = files
    result = optimize(str(model), level=2, target="ort", rules=[str(rules)])
    got = [(n.domain, n.op_type) for n in result.model.graph]
    assert ("mycorp", "ScaledRelu") in got and ("", "Relu") not in got
    (node,) = [n for n in result.model.graph if n.op_type == "ScaledRelu"]
    assert node.attributes["scale"].value == 2.0 and node.metadata_props[RULE_TAG] == "scaled-relu"
    assert result.model.opset_imports["mycorp"] == 1
    assert result.report.rule_fires == {"scaled-relu": 1}


def test_cli_optimize_with_user_rules(files, capsys):
    rules, model, tmp = files
    out = tmp / "out.onnx"
    assert main(["optimize", str(model), "-o", str(out), "-O", "2", "--rules", str(rules), "-q"]) == 0
    proto = onnx.load(out)
    assert [n.op_type for n in proto.graph.node if n.op_type != "Constant"] == ["ScaledRelu"]


def test_rules_list_and_show(files, capsys):
    rules, _, _ = files
    assert main(["rules", "list", "--rules", str(rules)]) == 0
    out = capsys.readouterr().out
    assert "scaled-relu" in out and "gelu-erf" in out
    assert main(["rules", "list", "--target", "ort"]) == 0
    out = capsys.readouterr().out
    assert "gelu-ort" in out and "gelu-onnx " not in out
    assert main(["rules", "show", "gelu-erf"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# rules/activation/gelu.yaml:") and "y = onnx_fuse.canonical::Gelu(x" in out
    assert main(["rules", "show", "no-such-rule"]) == 2


def test_rules_check_good_and_bad(files, capsys):
    rules, _, tmp = files
    assert main(["rules", "check", str(rules)]) == 0
    assert "OK: 1 rule(s)" in capsys.readouterr().out
    bad = tmp / "bad.yaml"
    bad.write_text(SCALED_RELU.replace("Relu(x)\n", "Reluu(x)\n", 1).replace("targets: [ort, onnx, trt]",
                                                                               "targets: [ort, tpu]"))
    assert main(["rules", "check", str(bad)]) == 2
    err = capsys.readouterr().err  # errors go to stderr
    assert err.startswith(f"{bad}:4: unknown target 'tpu'")
    bad.write_text(SCALED_RELU.replace("r = Relu(x)", "r = Reluu(x)"))
    assert main(["rules", "check", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"{bad}:6: unknown ONNX op 'Reluu'")


def test_bad_user_rule_in_optimize_is_one_line_exit_2(files, capsys):
    rules, model, tmp = files
    rules.write_text(SCALED_RELU.replace("y = mycorp::ScaledRelu(x, ", "y = mycorp::ScaledRelu(z, "))
    code = main(["optimize", str(model), "-o", str(tmp / "o.onnx"), "-O", "2", "--rules", str(rules)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{rules}:11: rewrite uses 'z'" in err[0]


def test_explain_cli_and_api(files, capsys):
    rules, model, tmp = files
    assert main(["rules", "explain", str(model), "--rule", "scaled-relu", "--rules", str(rules)]) == 0
    out = capsys.readouterr().out
    assert "matched" in out and "1 matched" in out
    # near miss: scale 3.0
    m = model_from_text(MODEL.replace("{2.0}", "{3.0}"))
    m.graph.node[2].name = "the_mul"
    onnx.save(m, tmp / "near.onnx")
    assert main(["rules", "explain", str(tmp / "near.onnx"), "--rule", "scaled-relu", "--rules", str(rules),
                 "--node", "the_mul", "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    assert res["status"] == "check failed" and res["step"] == "where s" and "3.0" in res["reason"]
    assert [m["node"] for m in res["matched"]] == ["#1 Relu", "the_mul"] or \
        [m["node"] for m in res["matched"]][-1] == "the_mul"
    assert "value 's'" in res["culprit"]
    # a node that is not an anchor candidate
    rs = load_rule_set(user_files=[rules])
    model_ir = ir.from_proto(m)
    m.graph.node[1].name = "the_relu"
    (r,) = explain(ir.from_proto(m), rs, "scaled-relu", node="the_relu")
    assert r.status is MatchStatus.NO_MATCH and "ends in Mul" in r.reason
    from onnx_fuse.errors import UserError
    with pytest.raises(UserError, match="no rule named"):
        explain(model_ir, rs, "scaled-relux")
    with pytest.raises(UserError, match="no node named"):
        explain(model_ir, rs, "scaled-relu", node="nope")
    assert main(["rules", "explain", str(tmp / "near.onnx"), "--rule", "nope"]) == 2


def test_pipeline_output_is_byte_identical_across_runs(files):
    from onnx_fuse.api import optimize

    rules, model, _ = files
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[N, 8] x) => (float[N, 8] y) {
      c_sqrt2 = Constant<value = float {1.4142135}>()
      c_one = Constant<value = float {1.0}>()
      c_half = Constant<value = float {0.5}>()
      t = Div(x, c_sqrt2)
      e = Erf(t)
      a = Add(c_one, e)
      m = Mul(a, x)
      g1 = Mul(m, c_half)
      s = Constant<value = float {2.0}>()
      r = Relu(g1)
      y = Mul(s, r)
    }""")
    outs = []
    for _ in range(2):
        res = optimize(proto.SerializeToString(), level=3, target="onnx", rules=[str(rules)])
        outs.append(res.to_proto().SerializeToString())
        assert res.report.rule_fires == {"gelu-erf": 1, "gelu-onnx": 1, "scaled-relu": 1}
    assert outs[0] == outs[1]
