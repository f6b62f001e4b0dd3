"""A mask that masks nothing leaves the attention (attention-zero-mask, rules/attention/zero_mask.yaml;
value_range's decided comparisons, rewrite/_value_bound.py).

transformers 5 materializes the bidirectional mask of an attention without a padding mask under
torch.export (masking_utils' `q_idx >= 0` over Range(0, S), expanded to [B, 1, S, T]): Canary's and
PP-FormulaNet's decoders called without encoder_attention_mask (hold-out 42) carried a bias of zeros
into every cross-attention, kept by the lowerings with keep-masked-rows' Mul / Add / Max. value_range
now decides a comparison whose inputs' intervals settle it (a Range from 0 by 1 is >= 0), Not / And /
Or of decided bools, views of a bool and a Where whose condition is decided; the rule drops a mask
proven 0 (or true) everywhere. Near misses keep it: `q_idx > 0` (false on the first query), a Range
from -1, a Range whose step is read from an input, a bias of 1 where the comparison holds.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto

from attention_testing import decoder_attention
from onnx_fuse.rewrite._value_bound import value_range

H, D = 2, 8
MIN = float(np.finfo(np.float32).min)
GLUE = {"Where", "GreaterOrEqual", "Greater", "Expand", "Range"}


def _model(h, kind: str = "plain"):
    """One self-attention over mask = Where(Expand(q_idx >= 0, [B, 1, S, S]), 0, min), q_idx the
    Range over x's length viewed [1, 1, S, 1] (transformers 5's bidirectional mask under export)."""
    n = h.node
    attention, inputs, outputs, inits = decoder_attention(h, H, D, past=False)
    start = "im1" if kind == "from_minus_one" else "i0"
    step = "step_in" if kind == "step_input" else "i1"
    op = "Greater" if kind == "greater" else "GreaterOrEqual"
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i1"], ["ns"], axis=0),
             n("Gather", ["xs", "i0"], ["nb"], axis=0),
             n("Sub", ["ns", "i1"], ["ns_1"]),   # Range(-1, S - 1): S positions from -1
             *([n("Range", [start, "ns_1" if kind == "from_minus_one" else "ns", step], ["rq"])]
               if kind != "int32_wrap" else   # int32's max + Range(0, S): the max at 0, int32's lowest at 1
               [n("Cast", ["ns"], ["ns32"], to=TensorProto.INT32), n("Range", ["z32", "ns32", "o32"], ["rq32"]),
                n("Add", ["rq32", "max32"], ["rq"])]),
             n("Unsqueeze", ["rq", "ax013"], ["qi"]),
             n(op, ["qi", "z32" if kind == "int32_wrap" else "i0"], ["keep0"]),
             n("Unsqueeze", ["nb", "ax0"], ["nb1"]), n("Unsqueeze", ["ns", "ax0"], ["ns1"]),
             n("Concat", ["nb1", "one1", "ns1", "ns1"], ["tgt"], axis=0), n("Expand", ["keep0", "tgt"], ["keep"]),
             n("Where", ["keep", "one_f" if kind == "bias_one" else "zero", "fmin"], ["mask"])]
    if kind == "step_input":
        inputs.append(h.vi("step_in", [], TensorProto.INT64))
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "im1": np.array(-1, np.int64),
                  "ax0": np.array([0], np.int64), "ax013": np.array([0, 1, 3], np.int64),
                  "one1": np.array([1], np.int64), "zero": np.array(0.0, np.float32),
                  "fmin": np.array(MIN, np.float32), "one_f": np.array(1.0, np.float32),
                  "z32": np.array(0, np.int32), "o32": np.array(1, np.int32),
                  "max32": np.array(np.iinfo(np.int32).max, np.int32)})
    return h.make_model(nodes + attention, inputs, outputs, inits)


def _check(h, model, fused, kind: str = "plain"):
    rng = np.random.default_rng(3)
    for b, s in ((1, 1), (3, 4), (2, 7)):
        feeds = {"x": rng.standard_normal((b, s, H * D)).astype(np.float32)}
        if kind == "step_input":
            feeds["step_in"] = np.array(1, np.int64)
        h.assert_close(model, fused, feeds)


@pytest.mark.parametrize("target, op", [("ort", "com.microsoft::Attention"), ("onnx", "Attention"),
                                        ("trt", "Attention")])
def test_a_mask_of_zeros_leaves_the_attention(h, target, op):
    model = _model(h)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    assert ops[op] == 1 and ops["Softmax"] == 0, ops
    assert not GLUE & set(ops), ops   # the comparison, its broadcast and the bias died
    assert "Max" not in ops, ops      # nor keep-masked-rows' floor at Attention-23
    _check(h, model, fused)


@pytest.mark.parametrize("kind", ["greater", "from_minus_one", "step_input", "bias_one", "int32_wrap"])
@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_near_misses_keep_the_mask(h, kind, target):
    """q_idx > 0 masks the first query's keys, a Range from -1 masks them too, a step read from an
    input proves nothing, a kept entry of 1 is a bias, not 0, and int32's max + q_idx >= 0 holds only at
    q_idx = 0 (the sum wraps): value_range decided it true before it knew integer dtypes' ends."""
    model = _model(h, kind)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    assert "Where" in ops or "Expand" in ops, ops   # the mask's cone is still there
    _check(h, model, fused, kind)


class Ctx:
    def constant(self, v):
        return v.const_value.numpy() if v.const_value is not None else None


def _const(arr, name):
    a = np.asarray(arr)
    v = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(a.dtype)), shape=ir.Shape(list(a.shape)))
    v.const_value = ir.tensor(a)
    return v


def _node(op, *inputs, dtype=ir.DataType.BOOL):
    nd = ir.Node("", op, list(inputs), num_outputs=1)
    nd.outputs[0].dtype = dtype
    return nd.outputs[0]


def test_value_range_decides_comparisons():
    n = ir.Value(name="n", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    i64 = ir.DataType.INT64
    r = _node("Range", _const(np.array(0, np.int64), "s"), n, _const(np.array(1, np.int64), "d"), dtype=i64)
    assert value_range(Ctx(), r) == (0.0, math.inf)
    down = _node("Range", _const(np.array(5, np.int64), "s5"), n, _const(np.array(-2, np.int64), "dm"), dtype=i64)
    assert value_range(Ctx(), down) == (-math.inf, 5.0)
    zero, neg = _const(np.array(0, np.int64), "z"), _const(np.array(-3, np.int64), "m3")
    ge = _node("GreaterOrEqual", r, zero)
    assert value_range(Ctx(), ge) == (1.0, 1.0)
    assert value_range(Ctx(), _node("Greater", r, zero)) == (0.0, 1.0)   # false at 0
    assert value_range(Ctx(), _node("Greater", r, neg)) == (1.0, 1.0)
    assert value_range(Ctx(), _node("Less", r, neg)) == (0.0, 0.0)
    assert value_range(Ctx(), _node("LessOrEqual", down, _const(np.array(5, np.int64), "f"))) == (1.0, 1.0)
    assert value_range(Ctx(), _node("Not", ge)) == (0.0, 0.0)
    anyb = ir.Value(name="b", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([2]))
    assert value_range(Ctx(), _node("And", ge, anyb)) == (0.0, 1.0)
    assert value_range(Ctx(), _node("Or", ge, anyb)) == (1.0, 1.0)
    assert value_range(Ctx(), _node("Expand", ge, n)) == (1.0, 1.0)
    f32 = ir.DataType.FLOAT
    w = _node("Where", _node("Expand", ge, n), _const(np.array(0.0, np.float32), "z0"),
              _const(np.array(MIN, np.float32), "fm"), dtype=f32)
    assert value_range(Ctx(), w) == (0.0, 0.0)
    w2 = _node("Where", anyb, _const(np.array(0.0, np.float32), "z1"), _const(np.array(MIN, np.float32), "fm1"),
               dtype=f32)
    assert value_range(Ctx(), w2) == (MIN, 0.0)   # an undecided condition: both branches
    stepped = _node("Range", _const(np.array(0, np.int64), "s0"), n, n, dtype=i64)   # step unknown
    assert value_range(Ctx(), _node("GreaterOrEqual", stepped, zero)) == (0.0, 1.0)
    # floats are not decided (a rounding Cast may have made 2049 into 2048), nor sums near int64's ends
    fr = _node("Cast", r, dtype=ir.DataType.FLOAT16)
    assert value_range(Ctx(), _node("Greater", fr, _const(np.array(-1.0, np.float16), "h"))) == (0.0, 1.0)
    big = _node("Add", r, _const(np.array(2 ** 62, np.int64), "big"), dtype=i64)
    assert value_range(Ctx(), _node("GreaterOrEqual", big, zero)) == (0.0, 1.0)


def test_value_range_does_not_decide_an_integer_op_that_wraps():
    """An integer interval past its dtype's ends is no bound: int32's max + a Range from 0 is max at 0 and wraps to
    int32's lowest at 1; uint8's Cast(b) - 1 is 255 where b is false; a Range over int32 times 2^30 wraps at 2. Each
    comparison >= 0 (< 1) would have been decided true, and attention-zero-mask dropped a mask that masks keys
    (tools/fuzz_s40.py zero_mask: seeds 63 / 30 wrong at ort / onnx / trt). In range the ops still decide."""
    i32, u8 = ir.DataType.INT32, ir.DataType.UINT8
    n = ir.Value(name="n", type=ir.TensorType(i32), shape=ir.Shape([]))
    r = _node("Range", _const(np.array(0, np.int32), "s"), n, _const(np.array(1, np.int32), "d"), dtype=i32)
    assert value_range(Ctx(), r) == (0.0, float(np.iinfo(np.int32).max))   # stops below its int32 limit
    zero = _const(np.array(0, np.int32), "z")
    top = _node("Add", r, _const(np.array(np.iinfo(np.int32).max, np.int32), "mx"), dtype=i32)
    assert value_range(Ctx(), _node("GreaterOrEqual", top, zero)) == (0.0, 1.0)
    times = _node("Mul", _node("Add", r, _const(np.array(1, np.int32), "o"), dtype=i32),
                  _const(np.array(1 << 30, np.int32), "k"), dtype=i32)
    assert value_range(Ctx(), _node("Greater", times, zero)) == (0.0, 1.0)
    b = ir.Value(name="b", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([2]))
    less = _node("Sub", _node("Cast", b, dtype=u8), _const(np.array(1, np.uint8), "u1"), dtype=u8)
    assert value_range(Ctx(), less) == (-math.inf, math.inf)
    assert value_range(Ctx(), _node("Less", less, _const(np.array(1, np.uint8), "u1b"))) == (0.0, 1.0)
    assert value_range(Ctx(), _node("GreaterOrEqual", _node("Add", r, zero, dtype=i32), zero)) == (1.0, 1.0)

