"""row_max's walk (optimizer/rewrite/_row_max.py) on hand-built graphs, called directly so that a value
can be left without an inferred shape (the optimizer's shape inference fills them in a model).

- A keepdims=0 row maximum re-expanded by a Reshape is proven to insert the 1 from the maximum's dims.
  Where the reshaped value has no shape, those come from the ReduceMax it was taken by, reached along
  the same monotone ops the walk itself takes. The first version climbed input 0 of whatever was there:
  a Mul / Add whose constant comes first (Mul(k, max(s)), which the walk takes) led it into the
  constant and the shift was refused, and a constant computed by ops of its own would have given it
  that cone's dims.
- A one-element constant in those ops (or in the scale-down PB-Relax undoes) may have any rank up to
  the value's: a [1, 1] constant cannot widen a [B, H, S, S] one. The first version took rank <= 1
  only (the fuzzer's max_shift idiom draws [1, 1] scalars: CogView's alpha as [1, 1] was refused).
- Mul and Add commute: t = s * k with the maximum scaled as k * max(s) is the same chain. The first
  version keyed each op by its constant's slot too and refused it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._row_max import row_max, unscaled

SHAPE = [2, 2, 5, 5]


class _Ctx:
    """The one thing row_max asks of a rule context: a value's constant (initializers here)."""

    def constant(self, v):
        return None if v is None or v.const_value is None else v.const_value.numpy()


def _graph(nodes, inits):
    """s [2, 2, 5, 5] -> nodes -> c and t [2, 2, 5, 5]; no value_info, so the values between have no shape."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("t", TensorProto.FLOAT, SHAPE)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = ir.serde.deserialize_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    values = {v.name: v for v in model.graph.outputs}
    return values["c"], values["t"]


def _shift(first: bool, kshape=(), shape_vec=(2, 2, 5, 1)):
    """t = k * s, c = Reshape(k * max(s, keepdims=0)), k a [kshape] constant written first or second."""
    n = helper.make_node
    order = (lambda a, b: [a, b]) if first else (lambda a, b: [b, a])
    nodes = [n("Mul", order("k", "s"), ["t"]), n("ReduceMax", ["s", "lax"], ["m0"], keepdims=0),
             n("Mul", order("k", "m0"), ["m"]), n("Reshape", ["m", "sv"], ["c"])]
    return _graph(nodes, {"k": np.full(kshape, 0.25, np.float32), "lax": np.array([-1], np.int64),
                          "sv": np.array(shape_vec, np.int64)})


@pytest.mark.parametrize("first", [True, False])
def test_reshaped_max_dims_read_along_the_walk(first):
    c, t = _shift(first)
    assert c.producer().inputs[0].shape is None     # the reshaped maximum has no shape of its own
    assert row_max(_Ctx(), c, t, 3)


def test_reshape_to_other_dims_still_refused():
    """[2, 5, 2, 1] holds the same elements, not each row's maximum in its row: refused."""
    c, t = _shift(True, shape_vec=(2, 5, 2, 1))
    with pytest.raises(EvalFailure, match="not proven to insert a 1"):
        row_max(_Ctx(), c, t, 3)


@pytest.mark.parametrize("kshape", [(1, 1), (1, 1, 1)])
def test_one_element_constant_of_a_higher_rank(kshape):
    c, t = _shift(False, kshape=kshape)
    assert row_max(_Ctx(), c, t, 3)


def test_constant_wider_than_the_value_refused():
    """A [1, 1, 1, 1] constant on the rank-3 maximum would widen it to rank 4: not a monotone map of it."""
    n = helper.make_node
    nodes = [n("Identity", ["s"], ["t"]), n("ReduceMax", ["s", "lax"], ["m0"], keepdims=0),
             n("Mul", ["m0", "k"], ["m"]), n("Unsqueeze", ["m", "lax"], ["c"])]
    c, t = _graph(nodes, {"k": np.full((1, 1, 1, 1), 0.25, np.float32), "lax": np.array([-1], np.int64)})
    with pytest.raises(EvalFailure, match="goes through Mul"):
        row_max(_Ctx(), c, t, 3)


@pytest.mark.parametrize("kshape", [(), (1, 1)])
def test_unscaled_takes_a_scale_down_of_any_rank_up_to_the_value(kshape):
    """PB-Relax's t = s / 32 with 32 stored as [1, 1]: t * 32 is s exactly."""
    n = helper.make_node
    c, t = _graph([n("Div", ["s", "a"], ["t"]), n("Identity", ["t"], ["c"])],
                  {"a": np.full(kshape, 32.0, np.float32)})
    src, g = unscaled(_Ctx(), t, 32.0)
    assert src.name == "s" and g == 1.0 / 32


def test_commuted_constant_is_the_same_op():
    n = helper.make_node
    nodes = [n("Add", ["s", "k"], ["u"]), n("Mul", ["u", "k2"], ["t"]),
             n("ReduceMax", ["s", "lax"], ["m0"], keepdims=0), n("Add", ["k", "m0"], ["m1"]),
             n("Mul", ["k2", "m1"], ["m"]), n("Unsqueeze", ["m", "lax"], ["c"])]
    inits = {"k": np.float32(-2.5), "k2": np.float32(3.0), "lax": np.array([-1], np.int64)}
    c, t = _graph(nodes, inits)
    assert row_max(_Ctx(), c, t, 3)
    nodes[0] = n("Sub", ["s", "k"], ["u"])      # s - k against k + max(s): not the same op
    c, t = _graph(nodes, inits)
    with pytest.raises(EvalFailure, match="through the same ops"):
        row_max(_Ctx(), c, t, 3)


@pytest.mark.parametrize("f", [1.0, 0.5, 2.0 ** -20])
def test_unscaled_of_no_scale_up_is_t_itself(f):
    """A scale of at most 1 after the shift undoes nothing: [t, 1] (softmax-max-shift asks unscaled once
    for any net scale; a tiny one stays on t as one Mul, as before)."""
    n = helper.make_node
    c, t = _graph([n("Identity", ["s"], ["t"]), n("Identity", ["t"], ["c"])], {})
    src, g = unscaled(_Ctx(), t, f)
    assert src is t and g == 1.0
