"""Test helper: add transformers' sliding-window band to a committed causal export.

``with_band(model, W)`` And-s the graph's one causal comparison ``le = LessOrEqual(kv_idx, q_idx)``
with ``kv_idx > q_idx - W``, as transformers' sliding_window_overlay writes it, so every consumer of
``le`` sees the banded mask. ``until``: the band only for queries at positions < until
(Or(gt, q >= until)), a mask banded at small positions only; ``halve``: kv > q // 2 - 1 instead, a
band whose width grows. Both must be refused by sliding_window().
"""

from __future__ import annotations

import numpy as np
import onnx


def with_band(model: onnx.ModelProto, window: int, *, until: int | None = None,
              halve: bool = False) -> onnx.ModelProto:
    g = model.graph
    le = [n for n in g.node if n.op_type == "LessOrEqual"]
    assert len(le) == 1, [n.name for n in le]
    le = le[0]
    kv, q = le.input
    ints = lambda name, v: onnx.numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    g.initializer.extend([ints("band_w", window), ints("band_until", until or 0), ints("band_two", 2),
                          ints("band_one", 1)])
    nodes = [onnx.helper.make_node("Div", [q, "band_two"], ["band_half"])] if halve else []
    nodes += [onnx.helper.make_node("Sub", ["band_half", "band_one"] if halve else [q, "band_w"], ["band_lo"]),
              onnx.helper.make_node("Greater", [kv, "band_lo"], ["band_gt"])]
    gt = "band_gt"
    if until is not None:
        nodes += [onnx.helper.make_node("GreaterOrEqual", [q, "band_until"], ["band_late"]),
                  onnx.helper.make_node("Or", ["band_gt", "band_late"], ["band_any"])]
        gt = "band_any"
    nodes.append(onnx.helper.make_node("And", [le.output[0], gt], ["band_keep"]))
    for n in g.node:
        for i, x in enumerate(n.input):
            if x == le.output[0]:
                n.input[i] = "band_keep"
    at = list(g.node).index(le) + 1
    for j, n in enumerate(nodes):
        g.node.insert(at + j, n)
    onnx.checker.check_model(model)
    return model
