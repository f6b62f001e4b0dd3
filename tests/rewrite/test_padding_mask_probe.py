"""padding_mask() (optimizer/rewrite/_key_padding_proof.py): a prefill mask is an attention-mask input's
key padding over a causal band or nothing, decided on its values (the cone run with attention_mask
all ones and with keys dropped, a batch of 2), whatever ops build it; anything else is refused with
the reason. attention-split-value-heads (rules/attention/split_value.yaml) asks it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._key_padding_proof import padding_mask

LOW = float(np.finfo(np.float32).min)


def _graph(form: str) -> ir.Model:
    """q [b, 2, s, 64], attention_mask [b, s] (int64), and a mask [b|1, 1, s|1, s] built by ``form``:
    hf: keys Range(0, S) <= queries Range(0, S), And attention_mask[b, j] (Unsqueeze, Cast), Where
    to 0 / finfo.min (masking_utils' values); window: the same with q - 3 < j; encoder: (1 - m) *
    finfo.min of attention_mask[:, None, None, :]; causal: the causal part alone; first_row: every
    batch row reads attention_mask's row 0; shifted: key j reads attention_mask's key j - 1 (a Pad);
    bias: the encoder mask plus a position bias on kept keys."""
    n = helper.make_node
    nodes = [n("Shape", ["q"], ["ss"], start=2, end=3), n("Squeeze", ["ss"], ["s0"]),
             n("Range", ["zero", "s0", "one"], ["pos"]),
             n("Unsqueeze", ["pos", "ax0"], ["kv"]), n("Unsqueeze", ["pos", "ax1"], ["qp"]),
             n("LessOrEqual", ["kv", "qp"], ["causal2"]), n("Unsqueeze", ["causal2", "ax01"], ["causal4"])]
    am = "attention_mask"
    if form == "first_row":
        nodes.append(n("Gather", [am, "zero_v"], ["row0"], axis=0))   # [1, s]
        am = "row0"
    elif form == "shifted":
        nodes.append(n("Pad", [am, "pads", "one"], ["padded"]))        # [b, s + 1], key j at j + 1
        nodes.append(n("Slice", ["padded", "zero_v", "ss", "one_v"], ["shift"]))   # axis 1: keys 0..s-1
        am = "shift"
    nodes += [n("Unsqueeze", [am, "ax12"], ["am4"]), n("Cast", ["am4"], ["amb"], to=TensorProto.BOOL)]
    if form == "window":
        nodes += [n("Sub", ["qp", "three"], ["lo"]), n("Greater", ["kv", "lo"], ["band2"]),
                  n("And", ["causal2", "band2"], ["cw2"]), n("Unsqueeze", ["cw2", "ax01"], ["cw4"]),
                  n("And", ["cw4", "amb"], ["keep"])]
    elif form in ("encoder", "bias"):
        nodes += [n("Cast", ["am4"], ["amf"], to=TensorProto.FLOAT), n("Sub", ["onef", "amf"], ["inv"]),
                  n("Mul", ["inv", "low"], ["mask" if form == "encoder" else "pad"])]
        if form == "bias":
            nodes += [n("Cast", ["kv"], ["kvf"], to=TensorProto.FLOAT), n("Add", ["pad", "kvf"], ["mask"])]
    if form == "causal":
        nodes.append(n("Where", ["causal4", "zerof", "low"], ["mask"]))
    elif form not in ("encoder", "bias", "window"):
        nodes += [n("And", ["causal4", "amb"], ["keep"])]
    if form not in ("encoder", "bias", "causal"):
        nodes.append(n("Where", ["keep", "zerof", "low"], ["mask"]))
    nodes.append(n("Identity", ["q"], ["y"]))
    inits = [numpy_helper.from_array(np.asarray(v, dt), k) for k, v, dt in [
        ("zero", 0, np.int64), ("one", 1, np.int64), ("three", 3, np.int64), ("zero_v", [0], np.int64),
        ("one_v", [1], np.int64), ("ax0", [0], np.int64), ("ax1", [1], np.int64), ("ax01", [0, 1], np.int64),
        ("ax12", [1, 2], np.int64), ("pads", [0, 1, 0, 0], np.int64), ("zerof", 0.0, np.float32),
        ("onef", 1.0, np.float32), ("low", LOW, np.float32)]]
    graph = helper.make_graph(nodes, "prefill_mask", [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ir.from_proto(onnx.shape_inference.infer_shapes(model))


def _probe(model: ir.Model) -> bool:
    values = {v.name: v for node in model.graph for v in node.outputs}
    return padding_mask(None, values["mask"], model.graph.inputs[0])


@pytest.mark.parametrize("form", ["hf", "window", "encoder"])
def test_key_padding_over_a_band_or_nothing_is_proven(form):
    """Causal, sliding-window and encoder (no GatherND: the stand-in this replaces refused it) forms."""
    assert _probe(_graph(form)) is True


@pytest.mark.parametrize("form, why", [
    ("causal", "the mask reads no \\[batch, keys\\] attention-mask input"),
    ("first_row", "attention_mask\\[1, .*not attention_mask's key padding"),
    ("shifted", "not attention_mask's key padding"),
    ("bias", "adds a bias to kept keys"),
])
def test_other_masks_are_refused_with_the_reason(form, why):
    with pytest.raises(EvalFailure, match=why):
        _probe(_graph(form))


def test_a_graph_input_or_constant_mask_is_refused():
    model = _graph("hf")
    q = model.graph.inputs[0]
    with pytest.raises(EvalFailure, match="graph input"):
        padding_mask(None, q, q)
    const = ir.Value(name="c", const_value=ir.tensor(np.zeros((1, 1, 4, 4), np.float32)))
    const.dtype = ir.DataType.FLOAT
    with pytest.raises(EvalFailure, match="constant"):
        padding_mask(None, const, q)
