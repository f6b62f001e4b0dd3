"""The key padding proof at the other shapes it probes (trust31), two gaps:

- a probe there that ran but whose mask changes with another integer input (token_type_ids all 0 vs
  all 1: _mask_probe._varies) was skipped as a shape the model cannot run at, so a mask that reads
  token_type_ids at one length only read as attention_mask's key padding (a rewrite reading
  attention_mask alone would drop the keys it keeps there); the base shape refused it already;
- a fixed batch of 1 never ran a fully padded row at those shapes (a batch of 2 runs row 0 fully
  padded), so a mask that lets an empty row see every key at one length (transformers 4's
  _unmask_unattended there only) read as key padding."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._key_padding_proof import padding_mask
from test_probe_size_limits import LOWEST, _model


def _graph(at_len: int | None) -> dict:
    """Prefill: causal AND attention_mask's keys, OR every key whose token_type_ids is nonzero where the
    length S is ``at_len`` (None: nowhere, the term absent)."""
    n = helper.make_node
    nodes = [n("Shape", ["q"], ["qs"], start=2, end=3), n("Squeeze", ["qs"], ["t0"]),
             n("Range", ["zero", "t0", "one"], ["kv"]), n("Unsqueeze", ["kv", "ax1"], ["qc"]),
             n("LessOrEqual", ["kv", "qc"], ["causal"]),
             n("Cast", ["attention_mask"], ["amb"], to=TensorProto.BOOL),
             n("Unsqueeze", ["amb", "ax12"], ["am4"]), n("And", ["am4", "causal"], ["keep0"])]
    keep = "keep0"
    if at_len is not None:
        nodes += [n("Cast", ["token_type_ids"], ["ttb"], to=TensorProto.BOOL),
                  n("Unsqueeze", ["ttb", "ax12"], ["tt4"]), n("Equal", ["qs", "at"], ["is_at"]),
                  n("And", ["tt4", "is_at"], ["extra"]), n("Or", ["keep0", "extra"], ["keep1"])]
        keep = "keep1"
    nodes.append(n("Where", [keep, "zf", "neg"], ["mask"]))
    consts = {"zero": 0, "one": 1, "at": [at_len or 0], "ax1": [1], "ax12": [1, 2], "zf": 0.0, "neg": LOWEST}
    ins = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"]),
           helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["b", "s"])]
    return _model(nodes, ins, "mask", consts)


def test_the_plain_padding_mask_is_proven():
    g = _graph(None)
    assert padding_mask(None, g["mask"], g["q"])


@pytest.mark.parametrize("at_len", [5, 1000])
def test_a_mask_reading_token_types_at_one_length_is_refused(at_len):
    """5 and 1000 are lengths the proof probes beside its constants (the base runs past them, at 1002
    for 1000, where the term is off)."""
    g = _graph(at_len)
    with pytest.raises(EvalFailure, match="token_type_ids"):
        padding_mask(None, g["mask"], g["q"])


def _unmask_graph(at_len: int, batch) -> dict:
    """Causal AND attention_mask's keys; where S is ``at_len`` and a row keeps no key, every key of it."""
    n = helper.make_node
    nodes = [n("Shape", ["q"], ["qs"], start=2, end=3), n("Squeeze", ["qs"], ["t0"]),
             n("Range", ["zero", "t0", "one"], ["kv"]), n("Unsqueeze", ["kv", "ax1"], ["qc"]),
             n("LessOrEqual", ["kv", "qc"], ["causal"]),
             n("Cast", ["attention_mask"], ["amb"], to=TensorProto.BOOL),
             n("Unsqueeze", ["amb", "ax12"], ["am4"]), n("And", ["am4", "causal"], ["keep0"]),
             n("ReduceMax", ["attention_mask", "ax1"], ["rowmax"], keepdims=1),
             n("Equal", ["rowmax", "zero"], ["empty"]), n("Unsqueeze", ["empty", "ax23"], ["empty4"]),
             n("Equal", ["qs", "at"], ["is_at"]), n("And", ["empty4", "is_at"], ["all"]),
             n("Or", ["keep0", "all"], ["keep"]), n("Where", ["keep", "zf", "neg"], ["mask"])]
    consts = {"zero": 0, "one": 1, "at": [at_len], "ax1": [1], "ax12": [1, 2], "ax23": [2, 3], "zf": 0.0,
              "neg": LOWEST}
    ins = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [batch, 2, "s", 64]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, "s"])]
    return _model(nodes, ins, "mask", consts)


@pytest.mark.parametrize("batch", ["b", 1])
@pytest.mark.parametrize("at_len", [5, 1000])
def test_an_empty_row_seeing_every_key_at_one_length_is_refused(batch, at_len):
    """A dynamic batch refused it already (row 0 fully padded at a batch of 2); a fixed batch of 1 did not."""
    g = _unmask_graph(at_len, batch)
    with pytest.raises(EvalFailure, match="keeps key"):
        padding_mask(None, g["mask"], g["q"])


def test_a_fixed_batch_of_one_padding_mask_is_proven():
    g = _unmask_graph(5, 1)
    for node in list(g["mask"].graph):   # the empty-row term gone: plain key padding
        if node.op_type == "Or":
            node.replace_input_with(1, node.inputs[0])
    assert padding_mask(None, g["mask"], g["q"])
