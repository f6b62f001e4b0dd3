"""Prefill mask rebuilds decided by net_nodes (rewrite/_rebuild_cost.py), not by freed_ops(mask) > N.

attention-onnx / attention-trt rebuild a causal + key padding mask from attention_mask
(causal-key-padding-bias, rules/attention/lower.yaml) where the probe proves it (causal_key_padding). They
used to ask for more than 6 ops dying with the export's mask; Gemma 2 / 3 and EXAONE 4 share that mask's
grids with their sliding layers' window mask, so few die with the full layers' mask and it was kept,
though the rebuild (9 ops, its key range the export's own Range by shape-cse) costs less than the
keep-masked-rows and broadcast the lowering builds for a kept mask. Each model is optimized three times:
as the rule decides, with the rebuild forced and with the export's mask forced (net_nodes patched to -1 /
1): the decision must be the leaner graph, checked against the original with right, fully, left and
inner padded rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from attention_testing import decoder_attention
from test_causal_padding_bias import H, D, HID, MIN, _check, _mask_nodes
from onnx_fuse.rewrite import _expr


def _layers(h, kind: str):
    """Two decoder layers over attention_mask: a full one (causal + key padding: Where(keepc, 0, min),
    keepc = GatherND(attention_mask) And key j <= query i) then a sliding one (key j > i - 3 too).
    ``shared``: the window mask is keepc And in-window, so only the full mask's Where dies with it (1 op;
    the old count kept it, as net_nodes does); ``split``: the window mask reads the GatherND and its own
    band (key j < i + 1 and j > i - 3, as Gemma 2's), so the full mask's LessOrEqual / And / Where die
    (3 ops: the old count kept it; the rebuild adds 5, keep-masked-rows 3: rebuilt, one op fewer)."""
    n = h.node
    nodes = _mask_nodes(n, False, "window" if kind == "shared" else "plain")
    if kind == "shared":
        nodes.append(n("Where", ["keepc", "zero", "fmin"], ["mask_full"]))
    else:
        nodes[-1].output[:] = ["mask_full"]
        nodes += [n("Add", ["qi", "i1"], ["q1"]), n("Less", ["ki", "q1"], ["ahead"]), n("Sub", ["qi", "i3"], ["qw"]),
                  n("Greater", ["ki", "qw"], ["inw"]), n("And", ["ahead", "inw"], ["band"]),
                  n("And", ["keep", "band"], ["keepw"]), n("Where", ["keepw", "zero", "fmin"], ["mask"])]
    a_nodes, inputs, _, inits = decoder_attention(h, H, D, False, seed=1)
    for x in a_nodes:
        x.input[:] = ["mask_full" if i == "mask" else i for i in x.input]
        x.output[:] = ["ya" if o == "y" else o for o in x.output]
    b_nodes, _, outputs, b_inits = decoder_attention(h, H, D, False, seed=2)
    shared_inits = {"scale", "merge", "qshape", "kvshape"}
    for x in b_nodes:
        x.input[:] = ["ya" if i == "x" else (i if i in ("mask",) or i in shared_inits else f"b_{i}") for i in x.input]
        x.output[:] = [o if o == "y" else f"b_{o}" for o in x.output]
    inits.update({(k if k in shared_inits else f"b_{k}"): v for k, v in b_inits.items()})
    inputs.insert(1, h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64))
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i3": np.array(3, np.int64),
                  "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
                  "ax013": np.array([0, 1, 3], np.int64), "axm1": np.array([-1], np.int64),
                  "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32)})
    return h.make_model(nodes + a_nodes + b_nodes, inputs, outputs, inits)


def _counts(h, monkeypatch, model, target, check=None):
    """Node counts as the rule decides (net_nodes) and with the rebuild forced / refused (-1 / 1); the
    decided graph checked against the original and its op counts under "ops"."""
    real = _expr._net_nodes
    counts = {}
    for mode in ("computed", -1, 1):
        monkeypatch.setattr(_expr, "_net_nodes", real if mode == "computed" else (lambda ctx, *a, m=mode: m))
        fused = h.fuse(model, target, level=4 if target == "trt" else 3)
        counts[mode] = len(fused.graph.node)
        if mode == "computed":
            (check or (lambda f: _check(h, model, f, past=False)))(fused)
            counts["ops"] = h.ops(fused)
    return counts


@pytest.mark.parametrize("kind, rebuilt", [("shared", False), ("split", True)])
@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_the_decision_is_the_leaner_graph(h, monkeypatch, target, kind, rebuilt):
    """(fails on freed_ops(mask) > 6: split kept, and the patched net_nodes moves nothing)"""
    model = _layers(h, kind)
    counts = _counts(h, monkeypatch, model, target)
    assert counts[-1] != counts[1], counts   # the two graphs differ: the test decides something
    assert counts["computed"] == min(counts[-1], counts[1]), counts
    assert (counts["computed"] == counts[-1]) == rebuilt, counts
    ops = counts["ops"]
    assert ops["Attention"] == 2 and ops["Softmax"] == 0 and ops["GatherND"] == 1, ops
    # the rebuilt bias raises its own fill: keep-masked-rows' Max on the window layer's mask only (and
    # the export's index grids' Max)
    assert ops["Max"] == (2 if rebuilt else 3), ops


@pytest.mark.parametrize("target, rebuilt", [("ort", False), ("onnx", True), ("trt", True)])
def test_banded_key_padding_over_a_shared_key_mask(h, monkeypatch, target, rebuilt):
    """Moonshine Streaming's window over a frame mask (test_band_key_padding) whose GatherND key mask the
    model also returns: only the window's And and the Where die (2 ops; the old freed_ops(mask) > 4 kept
    the bias everywhere: fails on it). Rebuilding adds the pattern's Cast / Unsqueeze / And / Where: at
    Attention-23 (onnx, trt) that is leaner than keep-masked-rows over the export's bias, at ort's packed
    Attention (the bias passed as it is) it is not."""
    from test_band_key_padding import _model as band_model
    from test_key_padding_computed import _feeds

    model = band_model(h, 3, 3)
    model.graph.output.append(h.vi("keep", ["batch", 1, 1, 7], TensorProto.BOOL))
    counts = _counts(h, monkeypatch, model, target, lambda f: h.assert_close(model, f, _feeds(model)))
    ops = counts["ops"]
    assert counts[-1] != counts[1], counts
    assert counts["computed"] == min(counts[-1], counts[1]), counts
    assert (counts["computed"] == counts[-1]) == rebuilt, counts
    assert ops["GatherND"] == 1 and ops["Softmax"] == 0, ops
