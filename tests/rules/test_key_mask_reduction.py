"""rules/attention/key_mask_reduction.yaml: a 4-D key-padding mask reduced back to a per-key frame mask.

LASR's conv module masks its frames with all(~mask, dim=query) over the encoder's [B, 1, S, S]
boolean attention mask (Not, Cast, ReduceMin over the query axis), so the 4-D mask and the glue that
builds it from the key mask km stayed alive for that reader after the attention lowerings took km as
their 2-D key mask. key_mask_reduction (rewrite/_key_padding_proof.py) proves on the values that the
reduction is ~km[b, j] (or km) and the rule reads km itself: the 4-D mask dies. km a computed key
mask (arange(S) < lengths) or the attention_mask input. Near misses: the reduction over the key axis
(a per-query value), any() with a causal part (queries that mask a kept key), a second mask input
And-ed into the 4-D mask. Numerics with rows of lengths 7 / 0 / 3 (a fully padded row).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

H, D = 2, 8
HID = H * D
MIN = float(np.finfo(np.float32).min)


def _model(h, source: str = "lengths", axis: int = 2, causal: bool = False, extra: bool = False,
           unmask: bool = False, rows_late: bool = False, short: bool = False, band_rows: bool = False):
    """An encoder attention over Where(m4, 0, min), m4 = km[:, None, None, :] broadcast to
    [B, 1, S, S] (And the causal grid when ``causal``; And a second [B, S] input when ``extra``), and
    a frame mask of m4 reduced over ``axis`` (all(~m4): ReduceMin; any(~m4): ReduceMax) zeroing the
    output's frames."""
    n = h.node
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i1"], ["ns"], axis=0),
             n("Gather", ["xs", "i0"], ["nb"], axis=0)]
    inputs = [h.vi("x", ["batch", "seq", HID])]
    if source == "lengths":   # km = arange(S) < lengths[:, None]
        inputs.append(h.vi("lengths", ["batch"], TensorProto.INT64))
        nodes += [n("Range", ["i0", "ns", "i1"], ["ar"]), n("Unsqueeze", ["lengths", "ax1"], ["lu"]),
                  n("Less", ["ar", "lu"], ["km"])]
    else:
        inputs.append(h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64))
        nodes.append(n("Cast", ["attention_mask"], ["km"], to=TensorProto.BOOL))
    nodes += [n("Unsqueeze", ["km", "ax12"], ["km4"]), n("Unsqueeze", ["nb", "ax0"], ["nb1"]),
              n("Unsqueeze", ["ns", "ax0"], ["ns1"]), n("Concat", ["nb1", "one1", "ns1", "ns1"], ["tgt"], axis=0),
              n("Expand", ["km4", "tgt"], ["m4a"])]
    m4 = "m4a"
    if causal:
        nodes += [n("Range", ["i0", "ns", "i1"], ["rk"]), n("Unsqueeze", ["rk", "ax0"], ["ki"]),
                  n("Unsqueeze", ["rk", "ax1"], ["qi"]), n("LessOrEqual", ["ki", "qi"], ["cz"]),
                  n("And", [m4, "cz"], ["m4c"])]
        m4 = "m4c"
    if unmask:   # transformers 4's _unmask_unattended: a query row with no kept key attends every key
        nodes += [n("Cast", [m4], ["m4i"], to=TensorProto.INT64), n("ReduceMax", ["m4i", "axm1"], ["anyk"], keepdims=1),
                  n("Cast", ["anyk"], ["anyb"], to=TensorProto.BOOL), n("Not", ["anyb"], ["none"]),
                  n("Or", [m4, "none"], ["m4u"])]
        m4 = "m4u"
    if short:   # every key kept below 5 tokens (the proof's 16 show none)
        nodes += [n("Less", ["ns", "i5"], ["few"]), n("Or", [m4, "few"], ["m4s"])]
        m4 = "m4s"
    if rows_late:   # batch rows past the second keep every key (a batch of 2 shows none)
        nodes += [n("Range", ["i0", "nb", "i1"], ["rb"]), n("Unsqueeze", ["rb", "ax123"], ["bi"]),
                  n("Greater", ["bi", "i1"], ["later"]), n("Or", [m4, "later"], ["m4l"])]
        m4 = "m4l"
    if band_rows:   # those rows keep every key at 2..4 tokens only (the proof's 16 and a batch of 2 show none)
        nodes += [n("GreaterOrEqual", ["ns", "i2"], ["b_lo"]), n("LessOrEqual", ["ns", "i4"], ["b_hi"]),
                  n("And", ["b_lo", "b_hi"], ["band"]), n("Range", ["i0", "nb", "i1"], ["rb"]),
                  n("Unsqueeze", ["rb", "ax123"], ["bi"]), n("Greater", ["bi", "i1"], ["later"]),
                  n("And", ["band", "later"], ["bl"]), n("Or", [m4, "bl"], ["m4b"])]
        m4 = "m4b"
    if extra:
        inputs.append(h.vi("other_mask", ["batch", "seq"], TensorProto.BOOL))
        nodes += [n("Unsqueeze", ["other_mask", "ax12"], ["o4"]), n("And", [m4, "o4"], ["m4e"])]
        m4 = "m4e"
    rng = np.random.default_rng(1)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "ax0": np.array([0], np.int64),
             "ax1": np.array([1], np.int64), "ax12": np.array([1, 2], np.int64), "one1": np.array([1], np.int64),
             "axm1": np.array([-1], np.int64), "ax123": np.array([1, 2, 3], np.int64),
             "i2": np.array(2, np.int64), "i4": np.array(4, np.int64), "i5": np.array(5, np.int64),
             "red": np.array([axis], np.int64), "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
             "hshape": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    nodes.append(n("Where", [m4, "zero", "fmin"], ["mask"]))
    for c in "qkv":
        inits[f"w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
        inits[f"bias_{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
        nodes += [n("MatMul", ["x", f"w{c}"], [f"m{c}"]), n("Add", [f"m{c}", f"bias_{c}"], [f"{c}3"]),
                  n("Reshape", [f"{c}3", "hshape"], [f"{c}r"]), n("Transpose", [f"{c}r"], [f"{c}4"], perm=[0, 2, 1, 3])]
    nodes += [n("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2])]
    return nodes, inputs, inits, m4


def _finish(h, nodes, inputs, inits, m4, reduce: str):
    """Scores, softmax with the sdpa NaN guard, PV, head merge; then the frame mask (the reduction
    of ~m4 over the chosen axis, as bool [B, 1, S]) zeroes the output's frames ([B, HID, S])."""
    n = h.node
    red = "ReduceMin" if reduce == "all" else "ReduceMax"
    nodes += [n("MatMul", ["q4", "kt"], ["sc"]), n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("IsNaN", ["p"], ["isn"]), n("Where", ["isn", "zero", "p"], ["pz"]),
              n("MatMul", ["pz", "v4"], ["o"]), n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              n("Reshape", ["ot", "merge"], ["att"]), n("Transpose", ["att"], ["att_t"], perm=[0, 2, 1]),
              n("Not", [m4], ["nm"]), n("Cast", ["nm"], ["nmi"], to=TensorProto.INT64),
              n(red, ["nmi", "red"], ["rd"], keepdims=0), n("Cast", ["rd"], ["frame"], to=TensorProto.BOOL),
              n("Where", ["frame", "zero", "att_t"], ["y"])]
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", HID, "seq"])], inits)


def _build(h, reduce: str = "all", **kw):
    nodes, inputs, inits, m4 = _model(h, **kw)
    return _finish(h, nodes, inputs, inits, m4, reduce)


def _check(h, model, fused):
    rng = np.random.default_rng(2)
    names = {i.name for i in model.graph.input}
    for s in (7, 4):
        lengths = np.array([s, 0, 3], np.int64)
        feeds = {"x": rng.standard_normal((3, s, HID)).astype(np.float32)}
        if "lengths" in names:
            feeds["lengths"] = lengths
        if "attention_mask" in names:
            feeds["attention_mask"] = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int64)
        if "other_mask" in names:
            feeds["other_mask"] = (np.arange(s)[None, :] % 4 != 1) | (np.arange(3)[:, None] == 0)
        h.assert_close(model, fused, feeds)


@pytest.mark.parametrize("source", ["lengths", "input"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_frame_mask_reads_the_key_mask(h, source, target):
    model = _build(h, source=source)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert h.fired(fused)["key-mask-reduction"] >= 1, ops
    # the 4-D mask and its broadcast died (at onnx / trt the Expand left is key-padding-bias's to the query rows)
    made = {o for nd in fused.graph.node for o in nd.output}
    assert ops["ReduceMin"] == 0 and not {"m4a", "tgt"} & made, ops
    assert target != "ort" or ops["Expand"] == 0, ops
    _check(h, model, fused)


@pytest.mark.parametrize("kw", [dict(axis=3), dict(reduce="any", causal=True), dict(extra=True), dict(unmask=True),
                                dict(rows_late=True), dict(short=True), dict(band_rows=True)],
                         ids=["key_axis", "any_causal", "second_mask", "unmask_unattended", "rows_late", "short",
                              "rows_late_at_4"])
def test_other_reductions_stay(h, kw):
    """Over the key axis (all keys of a query masked: a per-query value), any() of a causal mask
    (query 0 masks every later key), a second mask input in the 4-D mask, a mask whose fully padded
    rows attend every key (the probe pads a whole batch row), batch rows past the second keeping
    every key (the probe runs batches beside each constant and past them), every key kept below 5
    tokens (and lengths beside each constant), those rows keeping every key at 2..4 tokens only (the
    batches at each of those lengths): the reduction stays."""
    model = _build(h, **kw)
    fused = h.fuse(model, "onnx")
    ops = h.ops(fused)
    assert "key-mask-reduction" not in h.fired(fused)
    assert ops["ReduceMin"] + ops["ReduceMax"] == (2 if kw.get("unmask") else 1), ops
    _check(h, model, fused)
