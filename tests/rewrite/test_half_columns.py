"""half_columns (optimizer/rewrite/_half_columns.py): whether a table's first half of columns provably equals
its second half, on hand-built graphs (shapes inferred), called directly. Each proof is also checked on the
values ONNX Runtime computes for random inputs: a table proven True must have equal halves there; the
refusals are tables whose halves differ for those inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._half_columns import half_columns

S, W = 5, 4   # rows, half width
F = TensorProto.FLOAT


class _Ctx:
    """What half_columns asks of a rule context: a value's constant (initializers here)."""

    def constant(self, v):
        return None if v is None or v.const_value is None else v.const_value.numpy()


def _i64(*v):
    return np.array(v, np.int64)


def _case(nodes, inits, out="t"):
    """f [1, S, W] and g [1, S, W] inputs -> nodes -> out; returns (the ir value of out, its ORT value)."""
    import onnxruntime as ort
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("f", F, [1, S, W]),
                                       helper.make_tensor_value_info("g", F, [1, S, W]),
                                       helper.make_tensor_value_info("pos", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info(out, F, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    proto = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    proto.ir_version = 10
    rng = np.random.default_rng(0)
    feeds = {"f": rng.standard_normal((1, S, W)).astype(np.float32),
             "g": rng.standard_normal((1, S, W)).astype(np.float32),
             "pos": rng.integers(0, S, (2, 3)).astype(np.int64)}
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})[0]
    model = ir.serde.deserialize_model(proto)
    value = next(v for v in model.graph.outputs if v.name == out)
    return value, got


def _halves_equal(a):
    h = a.shape[-1] // 2
    return a.shape[-1] % 2 == 0 and np.array_equal(a[..., :h], a[..., h:])


n = helper.make_node
PROVEN = {
    "concat-cos": ([n("Concat", ["f", "f"], ["c"], axis=-1), n("Cos", ["c"], ["t"])], {}),
    "tile-sin": ([n("Tile", ["f", "r"], ["c"]), n("Sin", ["c"], ["t"])], {"r": _i64(1, 1, 2)}),
    "scaled-cast-unsqueezed": ([n("Concat", ["f", "f"], ["c"], axis=2), n("Cos", ["c"], ["co"]),
                                n("Mul", ["k", "co"], ["m"]), n("Cast", ["m"], ["cm"], to=F),
                                n("Unsqueeze", ["cm", "ax"], ["t"])],
                               {"k": np.array(1.5, np.float32), "ax": _i64(2)}),
    "transposed-gathered": ([n("Concat", ["f", "f"], ["c"], axis=-1), n("Squeeze", ["c", "z"], ["sq"]),
                             n("Gather", ["sq", "pos"], ["gg"], axis=0), n("Transpose", ["gg"], ["tt"], perm=[1, 0, 2]),
                             n("Cos", ["tt"], ["t"])], {"z": _i64(0)}),
    "rows-cut": ([n("Concat", ["f", "f"], ["c"], axis=-1), n("Slice", ["c", "a", "b", "one"], ["t"])],
                 {"a": _i64(1), "b": _i64(4), "one": _i64(1)}),
    "angles-times-concat-freqs": ([n("Concat", ["inv", "inv"], ["ic"], axis=-1), n("Mul", ["p", "ic"], ["t"])],
                                  {"inv": np.linspace(1, 0.01, W).astype(np.float32),
                                   "p": np.arange(S, dtype=np.float32)[:, None]}),
    "constant": ([n("Identity", ["k"], ["t"])], {"k": np.tile(np.arange(6, dtype=np.float32), 2)[None]}),
    "expand-width-one": ([n("Slice", ["f", "z", "one", "m1"], ["c"]), n("Expand", ["c", "sh"], ["t"])],
                         {"z": _i64(0), "one": _i64(1), "m1": _i64(-1), "sh": _i64(1, S, 6)}),
}
REFUSED = {
    "concat-two-values": ([n("Concat", ["f", "g"], ["c"], axis=-1), n("Cos", ["c"], ["t"])], {}),
    "interleave-repeated": ([n("Unsqueeze", ["f", "m1"], ["u"]), n("Tile", ["u", "r"], ["tl"]),
                             n("Reshape", ["tl", "sh"], ["t"])],
                            {"m1": _i64(-1), "r": _i64(1, 1, 1, 2), "sh": _i64(1, S, 2 * W)}),
    "columns-cut": ([n("Concat", ["f", "f"], ["c"], axis=-1), n("Slice", ["c", "a", "b", "m1"], ["t"])],
                    {"a": _i64(1), "b": _i64(7), "m1": _i64(-1)}),
    "last-axis-moved": ([n("Concat", ["f", "f"], ["c"], axis=-1), n("Transpose", ["c"], ["t"], perm=[0, 2, 1])], {}),
    "added-other-table": ([n("Concat", ["f", "f"], ["c"], axis=-1), n("Concat", ["g", "f"], ["d"], axis=-1),
                           n("Add", ["c", "d"], ["t"])], {}),
    "constant-halves-differ": ([n("Identity", ["k"], ["t"])], {"k": np.arange(12, dtype=np.float32)[None]}),
}


@pytest.mark.parametrize("name", sorted(PROVEN))
def test_proven_tables_have_equal_halves(name):
    value, got = _case(*PROVEN[name])
    assert _halves_equal(got), got
    assert half_columns(_Ctx(), value)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_tables_with_other_halves_are_refused(name):
    value, got = _case(*REFUSED[name])
    assert not _halves_equal(got)
    assert not half_columns(_Ctx(), value)
