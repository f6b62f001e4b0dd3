"""Helpers for rule-engine tests: build models from ONNX text, apply rules, run ORT."""

from __future__ import annotations

import textwrap

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort

from onnx_fuse.rewrite import RewritePass, RuleSet, load_rule_set, load_text

TOL = {np.dtype(np.float32): (1e-5, 1e-4), np.dtype(np.float16): (1e-2, 1e-2),
       np.dtype(np.float64): (1e-9, 1e-7)}


#: The smallest complete rule, shared by the language and loader tests.
RELU_RELU = """\
rules:
  - name: relu-relu
    doc: Relu(Relu(x)) -> Relu(x)
    targets: [ort]
    match: |
      a = Relu(x)
      y = Relu(a)
    rewrite: |
      y = Relu(x)
"""


def model_from_text(text: str) -> onnx.ModelProto:
    proto = onnx.parser.parse_model(textwrap.dedent(text))
    onnx.checker.check_model(proto)
    return proto


def rules_from_yaml(text: str) -> RuleSet:
    rules, errors = load_text(textwrap.dedent(text), "<test>")
    assert not errors, [str(e) for e in errors]
    return RuleSet(rules)


def apply(proto: onnx.ModelProto, rules: RuleSet | str, *, infer: bool = True):
    """Apply rules to a copy (with shape inference first, as the pipeline does)."""
    if isinstance(rules, str):
        rules = rules_from_yaml(rules)
    if infer:
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    model = ir.from_proto(proto)
    p = RewritePass(rules)
    result = p(model)
    return model, p, result.modified


def ops(model: ir.Model) -> list[str]:
    return [f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model.graph]


def run(proto_or_model, feeds: dict) -> list[np.ndarray]:
    proto = ir.to_proto(proto_or_model) if isinstance(proto_or_model, ir.Model) else proto_or_model
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same_outputs(original: onnx.ModelProto, rewritten: ir.Model, feeds: dict) -> None:
    proto = ir.to_proto(rewritten)
    onnx.checker.check_model(proto, full_check=True)
    want = run(original, feeds)
    got = run(proto, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        rtol, atol = TOL.get(w.dtype, (0, 0))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def builtin(target: str, level: int = 4) -> RuleSet:
    return load_rule_set(target=target, max_level=level)
