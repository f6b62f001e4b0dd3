"""optimizer/passes/reshape_dims.py: the -1 of a Reshape target built from the input's own symbolic
dims (TorchScript / Optimum head splits) is sized exactly, through ShapeInferencePass."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

from onnx_fuse.passes.shape_inference import ShapeInferencePass

I64 = onnx.TensorProto.INT64


def _model(target_tail, hidden=64):
    """x [B,S,hidden] -> Reshape(x, Concat(Shape(x)[0], Shape(x)[1], *target_tail)) -> Transpose."""
    n = oh.make_node
    nodes = [n("Shape", ["x"], ["sx"]),
             n("Gather", ["sx", "i0"], ["b"], axis=0), n("Gather", ["sx", "i1"], ["s"], axis=0),
             n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Unsqueeze", ["s", "ax0"], ["su"]),
             n("Concat", ["bu", "su", "tail"], ["shp"], axis=0),
             n("Reshape", ["x", "shp"], ["r"])]
    inits = [oh.make_tensor("i0", I64, [], [0]), oh.make_tensor("i1", I64, [], [1]),
             oh.make_tensor("ax0", I64, [1], [0]),
             oh.make_tensor("tail", I64, [len(target_tail)], list(target_tail))]
    rank = 2 + len(target_tail)
    if rank == 4:
        nodes.append(n("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]))
    else:
        nodes.append(n("Identity", ["r"], ["y"]))
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", "S", hidden])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)]))


def _dims(model, name):
    v = next(o for node in model.graph for o in node.outputs if o.name == name)
    return None if v.shape is None else [d if isinstance(d, int) else (d.value or "?") for d in v.shape]


def test_minus_one_beside_the_inputs_own_dims_is_sized_and_reaches_later_values():
    model = _model([-1, 16])
    p = ShapeInferencePass()
    result = p(model)
    assert result.modified and p.stats["reshape-dims"] == 1
    assert _dims(model, "r") == ["B", "S", 4, 16]
    assert _dims(model, "y") == ["B", 4, "S", 16]   # the second round carries it on


@pytest.mark.parametrize("tail,hidden", [([-1, 24], 64),      # 64 / 24 is not exact
                                         ([-1, -1], 64),      # two unknowns
                                         ([-1, 16], 60)])     # 60 / 16 is not exact
def test_inexact_or_ambiguous_targets_stay_unknown(tail, hidden):
    model = _model(tail, hidden)
    p = ShapeInferencePass()
    p(model)
    assert "reshape-dims" not in p.stats
    dims = _dims(model, "r")
    assert dims is None or not all(isinstance(d, int) for d in dims[2:])


def _tile_model(reps_tail, x_dims=(1, 128, 8)):
    """Optimum GPT-J: Tile(table [1, P, D], Concat(Shape(pos)[0], *reps_tail)) -> GatherElements."""
    n = oh.make_node
    nodes = [n("Shape", ["pos"], ["sp"], start=0, end=1),
             n("Concat", ["sp", "tail"], ["reps"], axis=0),
             n("Tile", ["x", "reps"], ["t"]),
             n("Identity", ["t"], ["y"])]
    inits = [oh.make_tensor("tail", I64, [len(reps_tail)], list(reps_tail))]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_dims)),
                                   oh.make_tensor_value_info("pos", I64, ["B", "S"])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)]))


def test_tile_by_a_shape_vector_is_sized():
    """onnx sizes a Tile only from constant repeats; a dim of 1 tiled by the symbol B is B."""
    model = _tile_model([1, 1])
    ShapeInferencePass()(model)
    assert _dims(model, "t") == ["B", 128, 8] and _dims(model, "y") == ["B", 128, 8]


def test_tile_of_a_dim_other_than_one_by_a_symbol_stays_unknown():
    model = _tile_model([1, 2], x_dims=(2, 128, 8))
    ShapeInferencePass()(model)
    dims = _dims(model, "t")
    assert dims is not None and not isinstance(dims[0], int) and dims[0] != "B"   # 2 * B: unknown
    assert dims[1:] == [128, 16]


def _expand_model(mark=-1):
    """torch's expand(-1, 2, -1, -1) as TorchScript writes it: Expand(x [8, 1, S, B],
    Where(Equal(c, m), 1, c)) with c = Concat([-1], [2], Shape(ids)[1], Shape(ids)[0])."""
    n = oh.make_node
    nodes = [n("Shape", ["ids"], ["sb"], start=0, end=1), n("Shape", ["ids"], ["ss"], start=1, end=2),
             n("Concat", ["head", "ss", "sb"], ["c"], axis=0),
             n("Equal", ["c", "m"], ["eq"]),
             n("Where", ["eq", "ones", "c"], ["tgt"]),
             n("Expand", ["x", "tgt"], ["e"]),
             n("Identity", ["e"], ["y"])]
    inits = [oh.make_tensor("head", I64, [2], [-1, 2]), oh.make_tensor("m", I64, [4], [mark] * 4),
             oh.make_tensor("ones", I64, [4], [1] * 4)]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8, 1, "S", "B"]),
                                   oh.make_tensor_value_info("ids", I64, ["B", "S"])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)]))


def test_expand_by_torch_expand_target_is_sized():
    """Where(Equal(c, -1), 1, c) keeps c's symbols (a dim is never -1) and turns -1 into 1 (keep)."""
    model = _expand_model()
    ShapeInferencePass()(model)
    assert _dims(model, "e") == [8, 2, "S", "B"] and _dims(model, "y") == [8, 2, "S", "B"]


def test_expand_target_whose_symbols_could_match_stays_unknown():
    model = _expand_model(mark=2)   # Equal(c, 2): a symbol might be 2, so the Where is not known
    ShapeInferencePass()(model)
    dims = _dims(model, "e")
    assert dims is None or dims[2:] != ["S", "B"]


def test_int64_wrap_in_a_target_states_no_dim():
    """Reshape(x, Concat((INT64_MAX + 1) - INT64_MIN - 1, [16])): -1 in ONNX's int64 arithmetic
    (it wraps), 2**64 - 1 in Python's, a dim that cannot be serialized (to_proto raised)."""
    import numpy as np

    import onnx_fuse

    n = oh.make_node
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    nodes = [n("Add", ["big", "one"], ["wrap"]), n("Sub", ["wrap", "small"], ["zero"]),
             n("Sub", ["zero", "one"], ["m1"]), n("Concat", ["m1", "sixteen"], ["shp"], axis=0),
             n("Reshape", ["x", "shp"], ["y"])]
    inits = [oh.make_tensor("big", I64, [1], [big]), oh.make_tensor("one", I64, [1], [1]),
             oh.make_tensor("small", I64, [1], [small]), oh.make_tensor("sixteen", I64, [1], [16])]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 16])], inits)
    proto = oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)])
    result = onnx_fuse.optimize(proto, level=1, verify=True)
    assert result.report.verify["passed"]
    y = result.to_proto().graph.output[0]
    assert all(d.dim_value < 1 << 63 for d in y.type.tensor_type.shape.dim)


def test_a_negative_entry_other_than_minus_one_states_no_dim():
    """Reshape to [B, S, -3] fails at run time; the old code declared the output's last dim -3."""
    model = _model([-3])
    ShapeInferencePass()(model)
    dims = _dims(model, "r")
    assert dims is None or -3 not in dims


def test_an_expand_of_an_invented_dim_is_no_new_fact_each_time():
    """An Expand keeps its input's invented dim (unk__...): restating the same name counted as a
    gain every time, so the shape-refresh stage never reached its fixed point (fuzz seed 187: 9
    rounds of inference and cleanup with 'reshape-dims: 2' each)."""
    import onnx.parser

    from onnx_fuse.passes.reshape_dims import refine_reshape_outputs

    model = ir.from_proto(onnx.parser.parse_model('''<ir_version: 9, opset_import: ["" : 18]>
    g (float[A, 3] x) => (float[B, 3] y)
    <int64[2] shp = {1, 3}>
    {
        r = Relu(x)
        e = Expand(r, shp)
        y = Neg(e)
    }'''))
    model.graph.inputs[0].shape = ir.Shape([None, 3])   # unnamed: inference invents its name
    ShapeInferencePass()(model)
    assert refine_reshape_outputs(model) == 0
    assert not ShapeInferencePass()(model).modified
