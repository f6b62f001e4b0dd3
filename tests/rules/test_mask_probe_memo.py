"""The padding proof (rewrite/_key_padding_proof.py _padding) once per mask: a lowering asks key_padding,
padding_input and padding_fill (and causal_key_padding) about the mask, and every layer reads the
same one, so the cone is built and probed once for the whole graph while it is unchanged; a rewrite
that replaces a node of the cone (or one of its inputs) makes the next question prove it again.
Probe models are counted where the proof's _run_probe looks _probe_model up: rewrite/_mask_probe.py."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto

H, D = 2, 8
HID = H * D
MIN = float(np.finfo(np.float32).min)
# one proof's probe models: at 16 tokens attention_mask all ones, keys dropped, a row fully padded; at 1, 2
# and 3 tokens (either side of the cone's constants, 1 and 2) keys dropped, a row fully padded; batches of
# 3, 4, 5 and 16 (either side of those constants and past them) with keys dropped and a row fully padded,
# at 16 tokens and at each of 1, 2 and 3; and a batch of 1 there, once with keys dropped and once fully
# padded (session 30: a mask may ignore attention_mask at a batch of 1 only)
PROOF = 3 + 3 * 2 + 4 + 4 * 3 + 2 * 4


def _encoder(h, layers: int):
    """``layers`` packed attentions over one Where(attention_mask, 0, min) [B,1,1,S] key mask, with
    the sdpa guard."""
    n = h.node
    nodes = [n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]), n("Cast", ["am4"], ["amb"], to=9),
             n("Where", ["amb", "zero", "fmin"], ["mask"])]
    rng = np.random.default_rng(5)
    inits = {"ax12": np.array([1, 2], np.int64), "zero": np.array(0.0, np.float32),
             "fmin": np.array(MIN, np.float32), "hshape": np.array([0, 0, H, D], np.int64),
             "merge": np.array([0, 0, HID], np.int64), "scale": np.array(D ** -0.5, np.float32)}
    x = "x"
    for i in range(layers):
        p = f"l{i}"
        for c in "qkv":
            inits[f"{p}w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
            inits[f"{p}b{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
            nodes += [n("MatMul", [x, f"{p}w{c}"], [f"{p}m{c}"]), n("Add", [f"{p}m{c}", f"{p}b{c}"], [f"{p}{c}3"]),
                      n("Reshape", [f"{p}{c}3", "hshape"], [f"{p}{c}r"]),
                      n("Transpose", [f"{p}{c}r"], [f"{p}{c}4"], perm=[0, 2, 1, 3])]
        nodes += [n("Transpose", [f"{p}k4"], [f"{p}kt"], perm=[0, 1, 3, 2]),
                  n("MatMul", [f"{p}q4", f"{p}kt"], [f"{p}sc"]), n("Mul", [f"{p}sc", "scale"], [f"{p}ss"]),
                  n("Add", [f"{p}ss", "mask"], [f"{p}sm"]), n("Softmax", [f"{p}sm"], [f"{p}p"], axis=-1),
                  n("IsNaN", [f"{p}p"], [f"{p}isn"]), n("Where", [f"{p}isn", "zero", f"{p}p"], [f"{p}pz"]),
                  n("MatMul", [f"{p}pz", f"{p}v4"], [f"{p}o"]),
                  n("Transpose", [f"{p}o"], [f"{p}ot"], perm=[0, 2, 1, 3]), n("Reshape", [f"{p}ot", "merge"], [f"{p}y"])]
        x = f"{p}y"
    return h.make_model(nodes, [h.vi("x", ["batch", "seq", HID]),
                                h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64)],
                        [h.vi(x, ["batch", "seq", HID])], inits)


def test_one_proof_for_every_layer(h, monkeypatch):
    from onnx_fuse.rewrite import _mask_probe

    built = []
    real = _mask_probe._probe_model
    monkeypatch.setattr(_mask_probe, "_probe_model", lambda *a, **k: built.append(1) or real(*a, **k))
    model = _encoder(h, 4)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::Attention"] == 4 and ops["Where"] == 0 and ops["IsNaN"] == 0, ops
    # one proof (PROOF probe models), not one per question per layer
    assert len(built) == PROOF, len(built)
    rng = np.random.default_rng(6)
    am = np.ones((3, 5), np.int64)
    am[0, 3:] = 0
    am[1, :] = 0
    h.assert_close(model, fused, {"x": rng.standard_normal((3, 5, HID)).astype(np.float32), "attention_mask": am})


def test_a_changed_cone_is_proven_again(h, monkeypatch):
    from onnx_fuse.rewrite import _mask_probe
    from onnx_fuse.rewrite._key_padding_proof import padding_fill, padding_mask

    built = []
    real = _mask_probe._probe_model
    monkeypatch.setattr(_mask_probe, "_probe_model", lambda *a, **k: built.append(1) or real(*a, **k))
    g = ir.serde.deserialize_model(_encoder(h, 1)).graph
    vals = {v.name: v for n in g for v in n.outputs}
    mask, q = vals["mask"], vals["l0q4"]
    assert padding_mask(None, mask, q) and padding_fill(None, mask, q) == np.float32(MIN)
    assert len(built) == PROOF and padding_fill(None, mask, q) == np.float32(MIN) and len(built) == PROOF
    fill = ir.Value(name="fill2", shape=ir.Shape([]), type=ir.TensorType(ir.DataType.FLOAT),
                    const_value=ir.tensor(np.array(-1e4, np.float32)))
    g.register_initializer(fill)
    mask.producer().replace_input_with(2, fill)   # the same nodes, one input replaced
    assert padding_fill(None, mask, q) == np.float32(-1e4) and len(built) == 2 * PROOF
    other = g.node(0)   # Unsqueeze(attention_mask): a node of the cone replaced by an equal one
    new = ir.Node("", "Unsqueeze", list(other.inputs), num_outputs=1)
    g.insert_after(other, new)
    other.outputs[0].replace_all_uses_with(new.outputs[0])
    g.remove(other, safe=True)
    assert padding_mask(None, mask, q) and len(built) == 3 * PROOF
