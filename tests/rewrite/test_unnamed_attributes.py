"""An attribute a pattern does not name must be at its default, or the rewrite would silently drop
it (issue 10: `softcap=30` on Attention-23 was lost by a lowering that did not name it)."""

from __future__ import annotations

import pytest
import rw_testing as rt

SOFTMAX_TO_SIGMOID = """
rules:
  - name: softmax-to-sigmoid
    doc: deliberately naive (tests only)
    targets: [ort]
    match: |
      y = Softmax(x{attrs})
    rewrite: |
      y = Sigmoid(x)
"""


def _softmax(axis: int | None) -> str:
    attr = "" if axis is None else f"<axis = {axis}>"
    return f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3] x) => (float[2, 3] y) {{ y = Softmax{attr}(x) }}"""


@pytest.mark.parametrize("axis,attrs,fires", [
    (None, "", True),          # absent: the default
    (-1, "", True),            # written out, equal to the default
    (0, "", False),            # off the default and not named: refused
    (0, ", axis=_", True),     # the pattern says any value is fine
    (0, ", axis=0", True),
    (0, ", axis=-1", False),
])
def test_unnamed_attribute_must_be_at_its_default(axis, attrs, fires):
    _, p, modified = rt.apply(rt.model_from_text(_softmax(axis)), SOFTMAX_TO_SIGMOID.format(attrs=attrs))
    assert modified is fires and (dict(p.stats) == ({"softmax-to-sigmoid": 1} if fires else {}))


def test_reshape_allowzero_may_go_unnamed():
    """dynamo writes allowzero=1 on shapes computed from real dims; it differs only for empty tensors."""
    text = """
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 6] x) => (float[2, 6] y) {
        s1 = Constant<value = int64[3] {2, 3, 2}>()
        s2 = Constant<value = int64[2] {2, 6}>()
        a = Reshape<allowzero = 1>(x, s1)
        y = Reshape<allowzero = 1>(a, s2)
    }"""
    rules = """
    rules:
      - name: reshape-pair
        doc: Reshape(Reshape(x, s1), s2) -> Reshape(x, s2)
        targets: [ort]
        match: |
          a = Reshape(x, s1)
          y = Reshape(a, s2)
        rewrite: |
          y = Reshape(x, s2)
    """
    _, p, modified = rt.apply(rt.model_from_text(text), rules)
    assert modified and dict(p.stats) == {"reshape-pair": 1}


def test_canonical_attention_softcap_not_named_is_not_lowered():
    """A lowering that does not name softcap must not take a canonical op that has one."""
    rules = """
    rules:
      - name: make-canon
        doc: Relu -> canonical Attention with a softcap (tests only)
        targets: [ort]
        match: |
          y = Relu(x)
        rewrite: |
          y = onnx_fuse.canonical::Attention(x, x, x, scale=1.0, softcap={cap}) : like(x)
      - name: naive-lowering
        doc: ignores softcap
        stage: lower
        targets: [ort]
        match: |
          y = onnx_fuse.canonical::Attention(q, k, v, scale=s)
        rewrite: |
          y = Attention(q, k, v, scale=s)
    """
    text = """
    <ir_version: 10, opset_import: ["" : 23]>
    g (float[1, 2, 3, 4] x) => (float[1, 2, 3, 4] y) { y = Relu(x) }"""
    _, p, modified = rt.apply(rt.model_from_text(text), rules.format(cap="0.0"))
    assert dict(p.stats) == {"make-canon": 1, "naive-lowering": 1}
    from onnx_fuse.errors import InternalError
    with pytest.raises(InternalError, match="canonical op Attention"):
        rt.apply(rt.model_from_text(text), rules.format(cap="30.0"))
