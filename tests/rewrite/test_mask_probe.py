"""causal_mask() (optimizer/rewrite/_mask_probe.py) on decode-step masks whose query length is
fixed upstream while q's length stays symbolic, and on dims without the HF names.

A decode export with a static hidden state [B, 1, D] and RoPE tables built from Range(P, P + 1)
leaves q's length symbolic (the tables' length broadcast against 1); its mask cone holds the 1 as
a constant, so a probe at several new tokens cannot run (attention_mask fed P + 3 keys, the cone
builds P + 1). The probe then tries one new token, the only length the model runs at. A mask that
is not causal at that length is still refused.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._mask_probe import causal_mask

LOWEST = float(np.finfo(np.float32).min)


def _ir_model(name: str, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], consts: dict,
              outputs: tuple[onnx.ValueInfoProto, ...] = (), ours: bool = False) -> ir.Model:
    """``nodes`` over ``inputs`` and ``consts`` (initializers: float32 for a float, else int64) with the
    outputs y, mask and ``outputs``, at opset 18, shapes inferred by onnx (``ours``: by the optimizer's
    ShapeInferencePass, which relates a Concat's length to the sum of its inputs')."""
    inits = [numpy_helper.from_array(np.asarray(v, np.float32 if isinstance(v, float) else np.int64), k)
             for k, v in consts.items()]
    graph = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                                                    helper.make_tensor_value_info("mask", TensorProto.FLOAT, None),
                                                    *outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    if not ours:
        return ir.from_proto(onnx.shape_inference.infer_shapes(model))
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    ir_model = ir.from_proto(model)
    ShapeInferencePass()(ir_model)
    return ir_model


def _mask_tail(shifted: bool) -> list[onnx.NodeProto]:
    """From p0 = P and t0 = P + S (scalars): query positions Range(P, P + S), keys Range(0, P + S),
    keep key j for query i iff j <= i (+ "shift" when ``shifted``), AND the padding attention_mask,
    Where to 0 / "neg": the HF causal-and-padding mask [B, 1, S, P + S]."""
    qpos = "qs" if shifted else "qc"
    return [
        helper.make_node("Range", ["p0", "t0", "one"], ["qp"]),
        helper.make_node("Range", ["zero", "t0", "one"], ["kv"]),
        helper.make_node("Unsqueeze", ["qp", "ax1"], ["qc"]),
        *([helper.make_node("Add", ["qc", "shift"], ["qs"])] if shifted else []),
        helper.make_node("LessOrEqual", ["kv", qpos], ["keep0"]),
        helper.make_node("Unsqueeze", ["keep0", "ax01"], ["keep4"]),
        helper.make_node("Unsqueeze", ["attention_mask", "ax12"], ["am4"]),
        helper.make_node("Cast", ["am4"], ["amb"], to=TensorProto.BOOL),
        helper.make_node("And", ["keep4", "amb"], ["keep"]),
        helper.make_node("Where", ["keep", "zero_f", "neg"], ["mask"]),
        helper.make_node("Identity", ["q"], ["y"]),
    ]


def _decode_mask_graph(kind: str = "causal", names: tuple[str, str, str] = ("b", "s", "p"),
                       mask_len: str | None = None) -> ir.Model:
    """hidden [B, 1, 64] (S fixed at 1), q [B, 2, s, 64] (s symbolic), past [B, 1, P, 64],
    attention_mask [B, P + 1]; mask [1, 1, S, T] from P = Shape(past)[2] and S = Shape(hidden)[1]."""
    b, s, p = names
    nodes = [
        helper.make_node("Shape", ["past"], ["ps"], start=2, end=3),
        helper.make_node("Shape", ["hidden"], ["ss"], start=1, end=2),
        helper.make_node("Add", ["ps", "ss"], ["ts"]),
        helper.make_node("Squeeze", ["ps"], ["p0"]),
        helper.make_node("Squeeze", ["ts"], ["t0"]),
    ] + _mask_tail(shifted=True)
    consts = {"zero": 0, "one": 1, "ax1": [1], "ax01": [0, 1], "ax12": [1, 2],
              "shift": -1 if kind == "own-key-hidden" else 0, "zero_f": 0.0, "neg": LOWEST}
    return _ir_model("decode_mask", nodes, [
        helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [b, 1, 64]),
        helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, 2, s, 64]),
        helper.make_tensor_value_info("past", TensorProto.FLOAT, [b, 1, p, 64]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, mask_len or f"{p} + 1"])], consts)


def _probe(model: ir.Model) -> bool:
    values = {v.name: v for n in model.graph for v in n.outputs}
    inputs = {v.name: v for v in model.graph.inputs}
    return causal_mask(None, values["mask"], inputs["q"], inputs["past"])


@pytest.mark.parametrize("names", [("b", "s", "p"), ("batch_size", "sequence_length", "past_sequence_length"),
                                   ("d0", "unk__q", "cache_len")])
def test_decode_step_with_static_query_length_is_causal(names):
    """Refused before ("the mask probe did not run": And of [1,1,1,P+1] and [B,1,1,P+3])."""
    assert _probe(_decode_mask_graph(names=names)) is True


def test_decode_step_mask_that_hides_the_own_key_is_refused():
    """At one new token every causal mask keeps all P + 1 keys; one that hides the new token's
    own key is no causal mask and stays refused."""
    with pytest.raises(EvalFailure, match="does not see every key"):
        _probe(_decode_mask_graph("own-key-hidden"))


def _in_half_precision(model: ir.Model, dtype: int, fill: float) -> ir.Model:
    """The decode mask built in ``dtype`` (float16 or bfloat16): Where(keep, 0, fill)."""
    import ml_dtypes

    np_t = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}[dtype]
    proto = ir.to_proto(model)
    for i, init in enumerate(proto.graph.initializer):
        if init.name in ("zero_f", "neg"):
            value = 0.0 if init.name == "zero_f" else fill
            proto.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.array(value, np_t), init.name))
    next(o for o in proto.graph.output if o.name == "mask").type.tensor_type.elem_type = dtype
    del proto.graph.value_info[:]
    return ir.from_proto(onnx.shape_inference.infer_shapes(proto))


@pytest.mark.parametrize("dtype, fill", [(TensorProto.BFLOAT16, -3.3895e38), (TensorProto.BFLOAT16, -1e4),
                                         (TensorProto.FLOAT16, -65504.0), (TensorProto.FLOAT16, -1e4)])
def test_half_precision_masks_are_probed(dtype, fill):
    """A bfloat16 mask cone was refused ("the mask probe did not run": ORT's CPU provider has no
    bfloat16 Where); it runs through emulate_bf16 now, and -1e4, which bfloat16 stores as -9984,
    counts as masked. A bfloat16 mask that hides the own key is still refused."""
    assert _probe(_in_half_precision(_decode_mask_graph(), dtype, fill)) is True
    with pytest.raises(EvalFailure, match="does not see every key"):
        _probe(_in_half_precision(_decode_mask_graph("own-key-hidden"), dtype, fill))


def test_a_mask_with_too_few_keys_at_every_length_is_refused():
    """attention_mask one key short of P + S at both lengths probed: the cone cannot run at
    either, and the first length's reason is reported."""
    model = _decode_mask_graph()
    for n in model.graph:
        if n.op_type == "Add" and n.outputs[0].name == "ts":   # T = P + S - 1: one key short
            n.replace_input_with(1, model.graph.initializers["zero"])
    with pytest.raises(EvalFailure, match="the mask probe did not run|has shape"):
        _probe(model)


def _present_sized_mask_graph(present_dim: str | None) -> ir.Model:
    """The key count read from Shape(present)[2], present = Concat(past, k_new) declared with a
    length named ``present_dim`` (None: as shape inference leaves it), attention_mask [B, that
    name]; several new tokens (S symbolic and free)."""
    nodes = [
        helper.make_node("Concat", ["past", "k_new"], ["present"], axis=2),
        helper.make_node("Shape", ["past"], ["ps"], start=2, end=3),
        helper.make_node("Shape", ["present"], ["ts"], start=2, end=3),
        helper.make_node("Squeeze", ["ps"], ["p0"]),
        helper.make_node("Squeeze", ["ts"], ["t0"]),
    ] + _mask_tail(shifted=False)
    consts = {"zero": 0, "one": 1, "ax1": [1], "ax01": [0, 1], "ax12": [1, 2], "zero_f": 0.0, "neg": -np.inf}
    # the optimizer's inference: it names an undeclared present's length p + s and keeps a
    # declared one's relation to that sum (passes/_dim_sums.py), which the probe binds
    present = helper.make_tensor_value_info("present", TensorProto.FLOAT,
                                            ["b", 1, present_dim, 64] if present_dim else None)
    return _ir_model("present_sized_mask", nodes, [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
        helper.make_tensor_value_info("k_new", TensorProto.FLOAT, ["b", 1, "s", 64]),
        helper.make_tensor_value_info("past", TensorProto.FLOAT, ["b", 1, "p", 64]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", present_dim or "kv"])], consts,
        (present,), ours=True)


@pytest.mark.parametrize("present_dim", ["kv_len", "t", None])
def test_key_count_read_from_the_present_is_p_plus_s(present_dim):
    """Refused before with any name but Optimum's total_sequence_length: the probe gave the
    present's length the default of an unknown dim (S), so the mask had S keys. Now a Concat's
    length is the sum of its inputs' (P + S), whatever it is named."""
    assert _probe(_present_sized_mask_graph(present_dim)) is True


def test_a_probe_that_fits_no_length_names_a_reason(monkeypatch):
    """Should the judge ever pass an array whose key count is not P + S, the refusal still says
    why (it raised EvalFailure(None) before)."""
    import onnx_fuse.rewrite._mask_probe as mp

    monkeypatch.setattr(mp, "_judge", lambda arr, p, s: None)
    monkeypatch.setattr(mp, "_run_probe", lambda *a: (np.zeros((1, 1, 1, 2), np.float32), None))
    with pytest.raises(EvalFailure) as err:
        _probe(_decode_mask_graph())
    assert err.value.args[0] and "None" not in str(err.value)


def _token_type_mask_graph() -> ir.Model:
    """q [b, 2, s, 64], past [b, 1, p, 64], token_type_ids [b, s]: the causal mask OR'ed with "both the
    query and the key are typed 1" (Gemma 3's bidirectional image runs; cached keys typed 0). At one new
    token the OR adds nothing (the query sees every key already), at several it lets typed queries see
    later typed keys: the probe at several rows varies with token_type_ids, the one at one row does not."""
    nodes = [
        helper.make_node("Shape", ["past"], ["ps"], start=2, end=3),
        helper.make_node("Shape", ["q"], ["ss"], start=2, end=3),
        helper.make_node("Add", ["ps", "ss"], ["ts"]),
        helper.make_node("Squeeze", ["ps"], ["p0"]),
        helper.make_node("Squeeze", ["ts"], ["t0"]),
        helper.make_node("Range", ["p0", "t0", "one"], ["qp"]),
        helper.make_node("Range", ["zero", "t0", "one"], ["kv"]),
        helper.make_node("Unsqueeze", ["qp", "ax1"], ["qc"]),
        helper.make_node("LessOrEqual", ["kv", "qc"], ["causal"]),
        helper.make_node("Gather", ["token_type_ids", "zero"], ["tq"], axis=0),
        helper.make_node("ConstantOfShape", ["ps"], ["tpast"], value=numpy_helper.from_array(np.zeros(1, np.int64))),
        helper.make_node("Concat", ["tpast", "tq"], ["tk"], axis=0),
        helper.make_node("Equal", ["tk", "one"], ["ek"]),
        helper.make_node("Equal", ["tq", "one"], ["eq1"]),
        helper.make_node("Unsqueeze", ["eq1", "ax1"], ["eq"]),
        helper.make_node("And", ["eq", "ek"], ["both"]),
        helper.make_node("Or", ["causal", "both"], ["keep2"]),
        helper.make_node("Unsqueeze", ["keep2", "ax01"], ["keep"]),
        helper.make_node("Where", ["keep", "zero_f", "neg"], ["mask"]),
        helper.make_node("Identity", ["q"], ["y"]),
    ]
    consts = {"zero": 0, "one": 1, "ax1": [1], "ax01": [0, 1], "zero_f": 0.0, "neg": LOWEST}
    return _ir_model("token_type_mask", nodes, [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
        helper.make_tensor_value_info("past", TensorProto.FLOAT, ["b", 1, "p", 64]),
        helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["b", "s"])], consts)


def test_mask_that_varies_with_token_types_at_several_rows_is_refused():
    """Accepted before (session 31 review): the probe at several new tokens ran but changed with
    token_type_ids, which causal_mask took for a length the model cannot run at, and one new token,
    where the OR adds nothing, then read as causal."""
    with pytest.raises(EvalFailure, match="token_type_ids"):
        _probe(_token_type_mask_graph())


def test_finite_rows_refuses_a_mask_that_varies_with_token_types_at_the_short_length():
    """finite_rows (rewrite/_mask_finite.py), the same gap: prefill probes the far length, then several
    rows; a mask that empties typed queries' rows only below 10 tokens ran at the short length but changed
    with token_type_ids, and was skipped as a length the model cannot run at (True before)."""
    from onnx_fuse.rewrite._mask_finite import finite_rows

    nodes = [
        helper.make_node("Shape", ["q"], ["ss"], start=2, end=3),
        helper.make_node("Squeeze", ["ss"], ["s0"]),
        helper.make_node("Range", ["zero", "s0", "one"], ["kv"]),
        helper.make_node("Unsqueeze", ["kv", "ax1"], ["qc"]),
        helper.make_node("LessOrEqual", ["kv", "qc"], ["causal"]),
        helper.make_node("Less", ["s0", "ten"], ["short"]),
        helper.make_node("Gather", ["token_type_ids", "zero"], ["tq"], axis=0),
        helper.make_node("Equal", ["tq", "one"], ["typed1"]),
        helper.make_node("Unsqueeze", ["typed1", "ax1"], ["typed"]),
        helper.make_node("And", ["typed", "short"], ["drop"]),
        helper.make_node("Not", ["drop"], ["kept"]),
        helper.make_node("And", ["causal", "kept"], ["keep2"]),
        helper.make_node("Unsqueeze", ["keep2", "ax01"], ["keep"]),
        helper.make_node("Where", ["keep", "zero_f", "ninf"], ["mask"]),
        helper.make_node("Identity", ["q"], ["y"]),
    ]
    consts = {"zero": 0, "one": 1, "ten": 10, "ax1": [1], "ax01": [0, 1], "zero_f": 0.0, "ninf": -np.inf}
    model = _ir_model("token_type_rows", nodes, [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
        helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["b", "s"])], consts)
    values = {v.name: v for n in model.graph for v in n.outputs}
    assert finite_rows(None, values["mask"], model.graph.inputs[0]) is False
