"""Idioms found on the eighteenth hold-out sweep (Optimum's exporter, transformers 4.57, on the
architectures of hold-out sets 6-29: tools/holdout_specs.py HOLDOUT18, docs/holdout.md), each as a tiny
graph that failed before its fix; numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

HEADS, DH = 2, 8
E = HEADS * DH
BIG = np.iinfo(np.int64).max


def _sine_position_attention(h, last=(-1, BIG), mask_axis=1):
    """DETR's encoder layer as Optimum exports it (transformers 4.57's DetrAttention, heads in the batch
    axis): features [B, E, R, C] flattened to tokens [B, R*C, E]; the sine position embedding from the
    pixel mask m [B, R, C]: y = cumsum(m, 1), y / (y[:, -1:] + eps) (the last row of its own axis), times
    a frequency row; added to the tokens for q and k, not v. q viewed [B, R*C, H, Dh] (sizes read from
    the mask's shape), k and v [B, -1, H, Dh] (the token count left for the view to solve), each then
    [B*H, -1, Dh]; the scores [B*H, S, T] viewed [B, H, S, T] (T read from k's view), the key padding
    bias (1 - m) * -1e4 expanded to [B, 1, S, S] added there, viewed back. last: the Slice bounds of
    the last row; mask_axis: the axis it is cut on (and the cumsum's)."""
    n = h.node
    nodes = [n("Reshape", ["feat", "flat3"], ["f3"]), n("Transpose", ["f3"], ["x"], perm=[0, 2, 1]),
             n("CumSum", ["mask", "cax"], ["y"]),
             n("Slice", ["y", "lstart", "lend", "cax"], ["ylast"]), n("Add", ["ylast", "eps"], ["den"]),
             n("Div", ["y", "den"], ["yn"]), n("Reshape", ["yn", "flat2"], ["yf"]),
             n("Unsqueeze", ["yf", "ax2"], ["yu"]), n("Mul", ["yu", "freq"], ["pos"]),
             n("Add", ["x", "pos"], ["hq"]),
             n("MatMul", ["hq", "wq"], ["q0"]), n("Mul", ["q0", "scale"], ["q"]),
             n("MatMul", ["hq", "wk"], ["k"]), n("MatMul", ["x", "wv"], ["v"]),
             n("Shape", ["mask"], ["ms"]), n("Slice", ["ms", "i0", "i1"], ["bsz"]),
             n("Slice", ["ms", "i1", "i2"], ["rows"]), n("Slice", ["ms", "i2", "i3"], ["cols"]),
             n("Mul", ["rows", "cols"], ["toks"]), n("Mul", ["bsz", "nh"], ["bh"]),
             n("Concat", ["bsz", "toks", "heads"], ["qview"], axis=0),
             n("Concat", ["bsz", "minus1", "heads"], ["kview"], axis=0),
             n("Concat", ["bh", "minus1", "dh"], ["view3"], axis=0),
             n("Reshape", ["q", "qview"], ["q4"]), n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
             n("Reshape", ["qt", "view3"], ["q3"]),
             n("Reshape", ["k", "kview"], ["k4"]), n("Transpose", ["k4"], ["kt4"], perm=[0, 2, 1, 3]),
             n("Reshape", ["kt4", "view3"], ["k3"]), n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
             n("Reshape", ["v", "kview"], ["v4"]), n("Transpose", ["v4"], ["vt4"], perm=[0, 2, 1, 3]),
             n("Reshape", ["vt4", "view3"], ["v3"]),
             n("MatMul", ["q3", "kt"], ["sc"]),
             n("Shape", ["k3"], ["k3s"], start=1, end=2),
             n("Concat", ["bsz", "nh", "toks", "k3s"], ["view4"], axis=0), n("Reshape", ["sc", "view4"], ["s4"]),
             n("Reshape", ["mask", "flat2"], ["mf"]), n("Sub", ["one", "mf"], ["inv"]),
             n("Mul", ["inv", "neg"], ["pad"]), n("Unsqueeze", ["pad", "ax12"], ["pad4"]),
             n("Concat", ["bsz", "i1", "toks", "toks"], ["mview"], axis=0), n("Expand", ["pad4", "mview"], ["m4"]),
             n("Add", ["s4", "m4"], ["sm"]),
             n("Concat", ["bh", "toks", "k3s"], ["back"], axis=0), n("Reshape", ["sm", "back"], ["s3"]),
             n("Softmax", ["s3"], ["p"], axis=-1),
             n("MatMul", ["p", "v3"], ["o3"]), n("Concat", ["bsz", "nh", "toks", "dh"], ["oview"], axis=0),
             n("Reshape", ["o3", "oview"], ["o4"]),
             n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "flat3"], ["out"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    rng = np.random.default_rng(1)
    w = lambda: (0.3 * rng.standard_normal((E, E))).astype(np.float32)  # noqa: E731
    inits = {"flat3": i64(0, 0, -1), "flat2": i64(0, -1), "cax": i64(mask_axis), "lstart": i64(last[0]),
             "lend": i64(last[1]), "eps": np.array(1e-6, np.float32), "ax2": i64(2), "ax12": i64(1, 2),
             "freq": (1.0 + np.arange(E)).astype(np.float32) / E, "wq": w(), "wk": w(), "wv": w(),
             "i0": i64(0), "i1": i64(1), "i2": i64(2), "i3": i64(3), "heads": i64(HEADS, DH), "nh": i64(HEADS),
             "dh": i64(DH), "minus1": i64(-1),
             "scale": np.array(DH ** -0.5, np.float32), "one": np.array(1.0, np.float32),
             "neg": np.array(-1e4, np.float32)}
    return h.make_model(nodes, [h.vi("feat", ["batch", E, "height", "width"]),
                                h.vi("mask", ["batch", "height", "width"])],
                        [h.vi("out", ["batch", None, E])], inits)


def _feeds(h, batch=2, rows=3, cols=4, padded=True):
    mask = np.ones((batch, rows, cols), np.float32)
    if padded and batch > 1:
        mask[-1, :, cols // 2:] = 0  # the last image is padded on the right (DETR's pixel mask)
    return {"feat": h.rng.standard_normal((batch, E, rows, cols)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_keys_beside_a_last_row_normalized_position_embedding_are_fused(h, target):
    """DETR through Optimum (hold-out 30): attention 2/6 before. onnx cannot size y[:, -1:] of a
    symbolic axis (it holds min(n, 1) entries), so y / y[:, -1:] lost the rows' size, the position
    embedding and the k projection after it had an unknown token count, k's [B, -1, H, Dh] view could
    not be solved, and the key padding bias could not be shown not to widen the scores.
    _dim_source._at_most: the last entry of an axis of size n, broadcast against n, is n."""
    model = _sine_position_attention(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    fused = sum(v for k, v in counts.items() if k.split("::")[-1] in (
        "Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedAttention"))
    assert fused == 1 and "Softmax" not in counts, counts
    for batch, rows, cols in ((2, 3, 4), (1, 2, 5), (3, 1, 1)):
        h.assert_close(model, out, _feeds(h, batch, rows, cols))


def _yn_dims(model):
    import onnx_ir as ir

    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    work = ir.serde.deserialize_model(model)
    ShapeInferencePass()(work)
    yn = next(o for node in work.graph for o in node.outputs if o.name == "yn")
    return [d if isinstance(d, int) else str(d.value) for d in yn.shape]


def test_last_row_normalized_embedding_keeps_its_rows(h):
    assert _yn_dims(_sine_position_attention(h)) == ["batch", "height", "width"]
    assert _yn_dims(_sine_position_attention(h, mask_axis=2)) == ["batch", "height", "width"]


def test_two_last_rows_or_the_last_row_of_another_tensor_are_not_taken_as_one(h):
    """Near misses, left to onnx's unknown: y[:, -2:] (two entries, which do not broadcast against n),
    and the last row of another tensor of T rows (T = 0 against one row would give 0 rows, not one)."""
    two = _yn_dims(_sine_position_attention(h, last=(-2, BIG)))
    assert two[0] == "batch" and two[1].startswith("unk__"), two
    n = h.node
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    other = h.make_model([n("CumSum", ["a", "ax"], ["y"]), n("Slice", ["b", "st", "en", "ax"], ["bl"]),
                          n("Div", ["y", "bl"], ["yn"])],
                         [h.vi("a", ["batch", "rows", 4]), h.vi("b", ["batch", "others", 4])],
                         [h.vi("yn", None)], {"ax": i64(1), "st": i64(-1), "en": i64(BIG)})
    dims = _yn_dims(other)
    assert dims[0] == "batch" and dims[1].startswith("unk__") and dims[2] == 4, dims
