"""`None` as a match input: the input must be absent, where `_` takes any value.

Found by the differential fuzzer's pinned opsets (tools/fuzz_opset.py, seed 2078360400): the
lowerings matched ``AttentionKV(q, k, v, mask, ...) | AttentionKV(q, k, v, _, ...)`` and meant the
second alternative for "no mask". When the first one's check refused the mask (attention-kv-plain-
grouped: a mask with one row per q head), the second matched the same node and the rewrite dropped
the mask: wrong values at ort / onnx pinned below opset 23. The alternatives now say `None`."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

import onnx_fuse
from onnx_fuse.verify import make_session

from rw_testing import apply, model_from_text, ops

CLIP_NO_MIN = """
rules:
  - name: clip-max-only
    doc: Clip without a lower bound  ->  Min(x, hi)
    targets: [ort]
    match: |
      y = Clip(x, None, hi)
    rewrite: |
      y = Min(x, hi)
"""

CLIP_ANY_MIN = CLIP_NO_MIN.replace("Clip(x, None, hi)", "Clip(x, _, hi)")


def _clip(with_min: bool):
    lo = "lo" if with_min else '""'
    return model_from_text(f"""
        <ir_version: 9, opset_import: ["" : 18]>
        g (float[4] x) => (float[4] y) {{
          lo = Constant <value = float {{-1.0}}> ()
          hi = Constant <value = float {{0.5}}> ()
          y = Clip(x, {lo}, hi)
        }}""")


def test_none_matches_only_an_absent_input():
    model, _, modified = apply(_clip(False), CLIP_NO_MIN)
    assert modified and ops(model)[-1] == "Min"
    model, _, modified = apply(_clip(True), CLIP_NO_MIN)
    assert not modified and "Clip" in ops(model)
    model, _, modified = apply(_clip(True), CLIP_ANY_MIN)   # `_` still takes any value
    assert modified


def _gqa_kv_with_a_mask_per_head() -> tuple[onnx.ModelProto, dict]:
    """GQA (4 q heads over 2 kv heads) over a KV cache whose additive mask has one row per q head
    ([B, 4, S, T]), opset 18: attention-kv-plain-grouped refuses that mask (5-D q view), and the
    mask-less alternative took the node anyway."""
    b, h, hkv, s, p, d = 2, 4, 2, 3, 5, 8
    t = p + s
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    ints = lambda name, v: oh.make_tensor(name, TensorProto.INT64, [len(v)], v)  # noqa: E731
    nodes = [
        oh.make_node("Concat", ["past_key", "k"], ["present_key"], axis=2),
        oh.make_node("Concat", ["past_value", "v"], ["present_value"], axis=2),
        oh.make_node("Unsqueeze", ["present_key", "ax2"], ["ku"]),
        oh.make_node("Expand", ["ku", "rep"], ["ke"]),
        oh.make_node("Reshape", ["ke", "heads"], ["kr"]),
        oh.make_node("Unsqueeze", ["present_value", "ax2"], ["vu"]),
        oh.make_node("Expand", ["vu", "rep"], ["ve"]),
        oh.make_node("Reshape", ["ve", "heads"], ["vr"]),
        oh.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]),
        oh.make_node("MatMul", ["q", "kt"], ["sc"]),
        oh.make_node("Mul", ["sc", "scale"], ["ss"]),
        oh.make_node("Add", ["ss", "mask"], ["sm"]),
        oh.make_node("Softmax", ["sm"], ["pr"], axis=-1),
        oh.make_node("MatMul", ["pr", "vr"], ["o"]),
    ]
    inits = [ints("ax2", [2]), ints("rep", [1, 1, h // hkv, 1, 1]), ints("heads", [0, h, -1, d]),
             oh.make_tensor("scale", TensorProto.FLOAT, [], [1 / np.sqrt(d)])]
    shapes = {"q": [b, h, s, d], "k": [b, hkv, s, d], "v": [b, hkv, s, d], "past_key": [b, hkv, p, d],
              "past_value": [b, hkv, p, d], "mask": [b, h, s, t]}
    inputs = [oh.make_tensor_value_info(n, TensorProto.FLOAT, shp) for n, shp in shapes.items()]
    outputs = [oh.make_tensor_value_info("o", TensorProto.FLOAT, [b, h, s, d]),
               oh.make_tensor_value_info("present_key", TensorProto.FLOAT, [b, hkv, t, d]),
               oh.make_tensor_value_info("present_value", TensorProto.FLOAT, [b, hkv, t, d])]
    model = oh.make_model(oh.make_graph(nodes, "gqa_kv", inputs, outputs, inits),
                          opset_imports=[oh.make_opsetid("", 18)], ir_version=9)
    feeds = {n: f(*shp) for n, shp in shapes.items()}
    feeds["mask"] = np.where(rng.random(shapes["mask"]) < 0.3, -1e4, 0.0).astype(np.float32)   # differs per head
    return model, feeds


def test_gqa_cache_with_a_mask_per_head_keeps_its_mask_below_opset_23():
    model, feeds = _gqa_kv_with_a_mask_per_head()
    names = [o.name for o in model.graph.output]
    want = make_session(model, threads=1, ort_optimizations=False).run(names, feeds)
    for target in ("ort", "onnx"):
        result = onnx_fuse.optimize(model, level=3, target=target, opset=20)
        assert result.report.rule_fires.get("attention-kv-cache"), result.report.rule_fires
        assert not result.report.rule_fires.get("attention-kv-plain-grouped")   # its check refuses the mask
        got = make_session(result.to_proto(), threads=1, ort_optimizations=True).run(names, feeds)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
