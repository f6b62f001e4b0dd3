"""An encoder's 4-D additive mask that is attention_mask's key padding alone, lowered from the [B, T] input.

transformers 5's dynamo export builds BERT's mask as Where(GatherND(attention_mask, batch / key index
grids), 0, finfo.min) (about 20 ops), transformers 4 as (1 - attention_mask[:, None, None, :]) * min, and
torch's bool mask becomes Where(m, 0, -inf). key_padding(mask, q, k) (rewrite/_mask_probe.py) proves on
the values that the mask is attention_mask's key padding with one fill for masked keys; then
  ort : com.microsoft Attention / MultiHeadAttention read attention_mask as a 2-D mask_index /
        key_padding_mask with mask_filter_value = the fill (what the bias added, bit for bit);
  onnx, trt : Attention-23 reads Where(attention_mask != 0, 0, fill') [B,1,1,T] broadcast to the
        query rows, fill' the fill as keep-masked-rows would raise it (no Mul / Add / Max left).
The sdpa NaN guard after the op goes where no row can have every key at -inf: a mask proven finite
(finite_mask) or a key mask whose fill is finite; a -inf fill keeps it (a fully padded row is 0 there).
Over a plain causal part with one fill (causal_key_padding: Where(key <= query and kept, 0, min)) the
ort ops take the same 2-D mask with unidirectional=1; Attention-23 keeps the 4-D bias there.
Near misses keep the 4-D bias: a fill that differs per batch row.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

H, D = 2, 8
HID = H * D
MIN = float(np.finfo(np.float32).min)


def _mask_nodes(n, kind: str) -> list:
    """Nodes from attention_mask [batch, seq] (int64) to ``mask`` (float [B,1,1 or S,S])."""
    nodes = [n("Shape", ["attention_mask"], ["ash"]), n("Gather", ["ash", "i0"], ["nb"], axis=0),
             n("Gather", ["ash", "i1"], ["ns"], axis=0), n("Range", ["i0", "nb", "i1"], ["rb"]),
             n("Range", ["i0", "ns", "i1"], ["rs"])]
    if kind in ("gathernd", "causal", "causal_inf", "row_fills"):   # transformers 5: padding_mask[batch_idx, kv_idx]
        nodes += [n("Unsqueeze", ["rb", "ax123"], ["bi"]), n("Unsqueeze", ["rs", "ax012"], ["ki"]),
                  n("Max", ["bi", "ki"], ["bk"]), n("Shape", ["bk"], ["bks"]),
                  n("Expand", ["bi", "bks"], ["bix"]), n("Unsqueeze", ["bix", "axm1"], ["biu"]),
                  n("Expand", ["ki", "bks"], ["kix"]), n("Unsqueeze", ["kix", "axm1"], ["kiu"]),
                  n("Concat", ["biu", "kiu"], ["idx"], axis=-1), n("Cast", ["attention_mask"], ["amb"], to=9),
                  n("GatherND", ["amb", "idx"], ["keep"])]
        cond = "keep"
        if kind in ("causal", "causal_inf"):   # and key j <= query i
            nodes += [n("Unsqueeze", ["rs", "ax013"], ["qi"]), n("LessOrEqual", ["ki", "qi"], ["cz"]),
                      n("And", ["keep", "cz"], ["keepc"])]
            cond = "keepc"
        if kind == "row_fills":   # batch row b masks with (b + 1) * -1e30
            nodes += [n("Add", ["bi", "i1"], ["b1"]), n("Cast", ["b1"], ["b1f"], to=1),
                      n("Mul", ["b1f", "big"], ["fills"]), n("Where", [cond, "zero", "fills"], ["mask"])]
        else:
            nodes.append(n("Where", [cond, "zero", "ninf" if kind == "causal_inf" else "fmin"], ["mask"]))
    elif kind == "sub_mul":   # transformers 4: (1 - attention_mask[:, None, None, :]) * min
        nodes += [n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]), n("Cast", ["am4"], ["amf"], to=1),
                  n("Sub", ["one", "amf"], ["inv"]), n("Mul", ["inv", "fmin"], ["mask"])]
    elif kind == "bool_inf":   # torch's bool mask through sdpa: Where(m, 0, -inf)
        nodes += [n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]), n("Cast", ["am4"], ["amb4"], to=9),
                  n("Where", ["amb4", "zero", "ninf"], ["mask"])]
    return nodes


def _model(h, kind: str, packed: bool, mask_read_elsewhere: bool = False):
    """One encoder attention over ``mask``: packed (q / k / v biased projections of x: com.microsoft
    Attention at ort) or separate q3 / k3 / v3 inputs (MultiHeadAttention), with the sdpa NaN guard."""
    n = h.node
    nodes = _mask_nodes(n, kind)
    inputs = [h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64)]
    if packed:
        inputs.insert(0, h.vi("x", ["batch", "seq", HID]))
        for c in "qkv":
            nodes += [n("MatMul", ["x", f"w{c}"], [f"m{c}"]), n("Add", [f"m{c}", f"bias_{c}"], [f"{c}3"])]
    else:
        inputs = [h.vi(f"{c}3", ["batch", "seq", HID]) for c in "qkv"] + inputs
    for c in "qkv":
        nodes += [n("Reshape", [f"{c}3", "hshape"], [f"{c}r"]),
                  n("Transpose", [f"{c}r"], [f"{c}4"], perm=[0, 2, 1, 3])]
    nodes += [n("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("IsNaN", ["p"], ["isn"]),
              n("Where", ["isn", "zero", "p"], ["pz"]), n("MatMul", ["pz", "v4"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["y"])]
    outputs = [h.vi("y", ["batch", "seq", HID])]
    if mask_read_elsewhere:   # ModernBERT's global mask also builds the local band's: the 4-D mask stays
        nodes.append(n("ReduceMin", ["mask"], ["mask_min"], keepdims=0))
        outputs.append(h.vi("mask_min", []))
    rng = np.random.default_rng(1)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
             "ax013": np.array([0, 1, 3], np.int64), "axm1": np.array([-1], np.int64),
             "ax12": np.array([1, 2], np.int64), "zero": np.array(0.0, np.float32),
             "fmin": np.array(MIN, np.float32), "ninf": np.array(-np.inf, np.float32),
             "big": np.array(-1e30, np.float32), "one": np.array(1.0, np.float32),
             "hshape": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    if packed:
        for c in "qkv":
            inits[f"w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
            inits[f"bias_{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(model, b=4, s=7):
    """Right, fully, left and inner padding: row 1 has no key at all (the guard's case)."""
    rng = np.random.default_rng(2)
    am = np.ones((b, s), np.int64)
    am[0, 5:] = 0
    am[1, :] = 0
    am[2, :3] = 0
    am[3, 2] = 0
    feeds = {"attention_mask": am}
    for i in model.graph.input:
        if i.name != "attention_mask":
            feeds[i.name] = rng.standard_normal((b, s, HID)).astype(np.float32)
    return feeds


def _check(h, model, fused):
    for b, s in ((4, 7), (4, 3)):
        feeds = _feeds(model, b, s)
        if s < 7:
            feeds["attention_mask"][1, 0] = 1   # only row 1 of the short batch keeps a key
        h.assert_close(model, fused, feeds)


MASK_BUILDERS = {"GatherND", "Range", "Max", "Sub", "Mul", "And", "Concat"}


@pytest.mark.parametrize("kind", ["gathernd", "sub_mul", "bool_inf"])
@pytest.mark.parametrize("packed", [True, False])
def test_key_mask_at_ort(h, kind, packed):
    model = _model(h, kind, packed)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    op = "com.microsoft::Attention" if packed else "com.microsoft::MultiHeadAttention"
    assert ops[op] == 1 and ops["Softmax"] == 0, ops
    node = next(x for x in fused.graph.node if x.op_type == op.split("::")[1])
    slot = 3 if packed else 4   # mask_index / key_padding_mask
    cast = next(x for x in fused.graph.node if node.input[slot] in x.output)
    assert cast.op_type == "Cast" and cast.input[0] == "attention_mask", cast
    assert len(node.input) == slot + 1, node.input   # no 4-D attention_bias beside it
    fill = next(a.f for a in node.attribute if a.name == "mask_filter_value")
    assert fill == (-np.inf if kind == "bool_inf" else np.float32(MIN))
    assert not MASK_BUILDERS & set(ops) and ops["Where"] == (1 if kind == "bool_inf" else 0), ops
    # a -inf fill leaves a fully padded row NaN in the op: the guard zeroes it, as the export did
    assert ops["IsNaN"] == (1 if kind == "bool_inf" else 0), ops
    _check(h, model, fused)


@pytest.mark.parametrize("kind", ["gathernd", "sub_mul", "bool_inf"])
@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_key_mask_at_attention_23(h, kind, target):
    model = _model(h, kind, packed=True)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, ops
    # Cast, Unsqueeze, Where and its broadcast to the query rows: nothing of the export's mask ops
    assert not MASK_BUILDERS - {"Concat"} & set(ops) and ops["IsNaN"] == 0, ops
    assert ops["Where"] == 1 and ops["Cast"] == 1 and ops["Unsqueeze"] == 1, ops
    _check(h, model, fused)


@pytest.mark.parametrize("packed", [True, False])
def test_causal_key_mask_at_ort(h, packed):
    """Where(key <= query and attention_mask, 0, min) (CLIP's text tower): causal_key_padding proves
    one fill over a plain causal part; the contrib op reads attention_mask as its 2-D key mask with
    unidirectional=1 and mask_filter_value = min (ORT adds the fill to causal and padded keys alike:
    a fully padded row averages every key, as the export does)."""
    model = _model(h, "causal", packed)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    op = "com.microsoft::Attention" if packed else "com.microsoft::MultiHeadAttention"
    assert ops[op] == 1 and ops["Softmax"] == 0, ops
    node = next(x for x in fused.graph.node if x.op_type == op.split("::")[1])
    slot = 3 if packed else 4
    cast = next(x for x in fused.graph.node if node.input[slot] in x.output)
    assert cast.op_type == "Cast" and cast.input[0] == "attention_mask", cast
    assert len(node.input) == slot + 1, node.input
    attrs = {a.name: a for a in node.attribute}
    assert attrs["unidirectional"].i == 1 and attrs["mask_filter_value"].f == np.float32(MIN), attrs
    assert not MASK_BUILDERS & set(ops) and "LessOrEqual" not in ops and ops["IsNaN"] == 0, ops
    _check(h, model, fused)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_causal_key_mask_rebuilt_at_attention_23(h, target):
    """Attention-23's is_causal masks future keys with -inf: a fully padded row would average its
    causal keys only, where the export averages every key; the 4-D bias stays a bias, rebuilt from
    attention_mask (causal-key-padding-bias, tests/rules/test_causal_padding_bias.py)."""
    model = _model(h, "causal", packed=True)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["GatherND"] == 0 and ops["Where"] == 1, ops
    _check(h, model, fused)


@pytest.mark.parametrize("kind", ["row_fills", "causal_inf"])
def test_other_masks_keep_the_bias(h, kind):
    """A fill that differs per batch row is no 2-D key mask; over a causal part a -inf fill is not
    what unidirectional=1 adds (the lowest float: a row whose causal keys are all padded would
    average the future keys, not give NaN / 0): the 4-D bias stays."""
    model = _model(h, kind, packed=True)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::Attention"] == 1 and ops["GatherND"] == 1, ops
    node = next(x for x in fused.graph.node if x.op_type == "Attention")
    assert len(node.input) == 6 and node.input[3] == "", node.input   # attention_bias, no mask_index
    assert "unidirectional" not in {a.name for a in node.attribute if a.i}, node.attribute
    # the per-row fills are computed from the batch size, which value_range cannot bound, and they
    # depend on the batch row (finite_rows refuses); a -inf fill leaves fully padded rows NaN: the
    # guard stays
    assert ops["IsNaN"] == 1, ops
    _check(h, model, fused)


def test_a_mask_read_elsewhere_keeps_the_bias(h):
    """The 4-D mask has another reader: the 2-D form would only add a Cast beside the ops that stay."""
    model = _model(h, "gathernd", packed=True, mask_read_elsewhere=True)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::Attention"] == 1 and ops["GatherND"] == 1, ops
    node = next(x for x in fused.graph.node if x.op_type == "Attention")
    assert len(node.input) == 6 and node.input[3] == "", node.input
    _check(h, model, fused)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_one_token_reads_the_fill_from_a_masked_key(h, target):
    """A static sequence of one token, where the probe's every-third-key pattern masks no key: the fill
    is read from a probe that masks one, never assumed -inf. The export's finite min gives a fully
    padded row its one key's value; a -inf rebuild gave 0 (differential fuzz seed 24006, graph
    2778370133: 1.9 off at onnx -O3)."""
    import onnx

    model = _model(h, "sub_mul", packed=True)
    del model.graph.value_info[:]
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.shape.dim[1].dim_value = 1   # seq -> 1
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((4, 1, HID)).astype(np.float32),
             "attention_mask": np.array([[1], [0], [1], [0]], np.int64)}
    h.assert_close(model, fused, feeds)
