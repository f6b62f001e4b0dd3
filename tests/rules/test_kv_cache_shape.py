"""rules/attention/kv_cache_shape.yaml: a dim of Shape(Concat(past, new)) read from past and new,
so the attention recognizer can take the Concat (Optimum's GPT-2 sizes its mask from present)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

import onnx_fuse
from onnx_fuse.rewrite import load_rule_set
from tests.rewrite.rw_testing import apply, model_from_text, ops

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[B, H, P, D] past, float[B, H, S, D] new) => (float[B, H, T, D] present, int64 n) {
  present = Concat <axis = AXIS> (past, new)
  s = Shape (present)
  i = Constant <value = int64 {IDX}> ()
  n = Gather <axis = 0> (s, i)
}
"""


def _rules():
    rs = load_rule_set()
    return type(rs)([rs.get("shape-of-kv-concat")])


def _run(proto, feeds):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("axis, idx", [(2, 2), (2, -2), (2, 1), (-2, 0), (2, 3)])
def test_dim_read_from_the_inputs(axis, idx):
    proto = model_from_text(MODEL.replace("AXIS", str(axis)).replace("IDX", str(idx)))
    model, p, modified = apply(proto, _rules())
    assert modified and p.stats["shape-of-kv-concat"] == 1
    out = ir.to_proto(model)
    onnx.checker.check_model(out, full_check=True)
    # the count answered without reading present: only the Concat (a graph output) reads it
    assert [n.op_type for n in model.graph if "present" in [i.name for i in n.inputs if i]] == []
    feeds = {"past": np.zeros((2, 3, 5, 4), np.float32), "new": np.zeros((2, 3, 1, 4), np.float32)}
    assert _run(out, feeds)[1] == _run(proto, feeds)[1]


def test_sliced_shape_is_a_near_miss():
    proto = model_from_text(MODEL.replace("AXIS", "2").replace("IDX", "0").replace(
        "s = Shape (present)", "s = Shape <start = 2> (present)"))
    model, p, modified = apply(proto, _rules())
    assert not modified and "Shape" in ops(model)


def test_optimum_gpt2_kv_attention_is_recognized():
    """Without the rule, attention-kv-cache is refused on this export (its mask reads present)."""
    path = CORPUS / "gpt2__optimum__trained.onnx"
    result = onnx_fuse.optimize(str(path), level=3, target="ort", verify=True)
    assert result.report.rule_fires.get("shape-of-kv-concat") == 2
    assert result.report.rule_fires.get("attention-kv-ort") == 2
    assert result.report.status == "PASSED", result.report.status_reason
    off = onnx_fuse.optimize(str(path), level=3, target="ort", disable=["shape-of-kv-concat"])
    assert "attention-kv-ort" not in off.report.rule_fires
