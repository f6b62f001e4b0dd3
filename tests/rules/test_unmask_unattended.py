"""A padding mask whose fully masked query rows attend every key is no key padding.

transformers 4's sdpa mask (AttentionMaskConverter._unmask_unattended, exported on CUDA or torch < 2.5)
lets a query row with no kept key (a fully padded sequence, a left-padded row's first queries) attend every
key: Where(keep or not any(keep, -1), 0, min). On every mask the key padding probe fed before (all ones;
every third key dropped, another first key per batch row) no query row is fully masked, so the probe
proved it attention_mask's key padding (over a causal part, with or without a past) and the lowerings
rebuilt it from attention_mask (key-padding-bias, causal-key-padding-bias, cache-key-padding-bias, the
contrib ops' 2-D key mask): the padded rows then average V uniformly (or causally) where the export
attends every key. The probe now also feeds batch row 0 fully padded. Found by review (trust26).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from attention_testing import decoder_attention

H, D = 2, 8
HID = H * D
MIN = float(np.finfo(np.float32).min)


def _model(h, causal: bool, past: bool, unmask: bool):
    n = h.node
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i1"], ["ns"], axis=0)]
    if past:
        nodes += [n("Shape", ["past_k"], ["pks"]), n("Gather", ["pks", "i2"], ["np"], axis=0)]
    else:
        nodes += [n("Identity", ["i0"], ["np"])]
    nodes += [n("Add", ["np", "ns"], ["nt"]), n("Range", ["i0", "nt", "i1"], ["rk"]),
              n("Range", ["np", "nt", "i1"], ["rq"]), n("Unsqueeze", ["rk", "ax0"], ["ki"]),
              n("Unsqueeze", ["rq", "ax1"], ["qi"]), n("LessOrEqual", ["ki", "qi"], ["cz"]),
              n("Cast", ["attention_mask"], ["amb"], to=TensorProto.BOOL),
              n("Unsqueeze", ["amb", "ax12"], ["am4"])]
    nodes.append(n("And", ["am4", "cz"], ["keep"]) if causal else n("Identity", ["am4"], ["keep"]))
    cond = "keep"
    if unmask:   # query rows with no kept key attend every key
        nodes += [n("Cast", ["keep"], ["keepi"], to=TensorProto.INT32),
                  n("ReduceMax", ["keepi", "axm1"], ["anyk"], keepdims=1),
                  n("Equal", ["anyk", "izero"], ["dead"]), n("Or", ["keep", "dead"], ["keepu"])]
        cond = "keepu"
    nodes.append(n("Where", [cond, "zero", "fmin"], ["mask"]))
    attention, inputs, outputs, inits = decoder_attention(h, H, D, past)
    inputs.insert(1, h.vi("attention_mask", ["batch", "total" if past else "seq"], TensorProto.INT64))
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i2": np.array(2, np.int64),
                  "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64), "ax12": np.array([1, 2], np.int64),
                  "axm1": np.array([-1], np.int64), "izero": np.array(0, np.int32),
                  "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32)})
    return h.make_model(nodes + attention, inputs, outputs, inits)


def _check(h, model, fused, past: bool):
    """Right, fully, left and inner padded rows (batch 4), prefill at 7 and 3 / decode at 3 and 1 after 5 / 6."""
    rng = np.random.default_rng(2)
    for s, p in (((3, 5), (1, 6)) if past else ((7, 0), (3, 0))):
        am = np.ones((4, p + s), np.int64)
        am[0, -1] = 0
        am[1, :] = 0
        am[2, : p + 1] = 0
        am[3, (p + s) // 2] = 0
        feeds = {"x": rng.standard_normal((4, s, HID)).astype(np.float32), "attention_mask": am}
        if past:
            feeds["past_k"] = rng.standard_normal((4, H, p, D)).astype(np.float32)
            feeds["past_v"] = rng.standard_normal((4, H, p, D)).astype(np.float32)
        h.assert_close(model, fused, feeds)


CASES = [(causal, past, target) for causal, past in ((False, False), (True, False), (True, True))
         for target in ("ort", "onnx", "trt")]


@pytest.mark.parametrize("causal,past,target", CASES)
def test_unmasked_rows_keep_the_export_mask(h, causal, past, target):
    model = _model(h, causal, past, unmask=True)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["Softmax"] == 0 and ops["ReduceMax"] == 1, ops   # fused, the export's mask kept
    _check(h, model, fused, past)


@pytest.mark.parametrize("causal,past,target", CASES)
def test_the_same_mask_without_the_unmask_is_rebuilt(h, causal, past, target):
    model = _model(h, causal, past, unmask=False)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["Softmax"] == 0 and any("Attention" in op for op in ops), ops   # fused
    _check(h, model, fused, past)
