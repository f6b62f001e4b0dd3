"""Fixtures shared across test folders."""

from __future__ import annotations

import pytest

#: A user rule that is deliberately wrong (Relu is not Sigmoid): verify and the per-rewrite check
#: must catch it.
WRONG_RELU_RULE = """\
rules:
  - name: wrong-relu
    doc: Relu(x) -> Sigmoid(x) (deliberately wrong)
    targets: [ort, onnx, trt]
    match: |
      y = Relu(x)
    rewrite: |
      y = Sigmoid(x)
"""


@pytest.fixture
def wrong_relu_rule(tmp_path):
    """Path of a rule file holding WRONG_RELU_RULE."""
    path = tmp_path / "wrong.yaml"
    path.write_text(WRONG_RELU_RULE)
    return path
