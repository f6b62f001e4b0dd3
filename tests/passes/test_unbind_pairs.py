"""unbind-pairs: a pick k of x viewed as [..., D/2, 2] (Slice [k:k+1] + Squeeze, Gather k, a two-way
Split + Squeezes: Flux's x.unflatten(-1, (-1, 2)).unbind(-1)) becomes Slice(x, k::2) on x's last axis;
views that split another axis, picks on another axis stay. Exact (same elements), checked in ORT."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnx_fuse.passes.unbind_pairs import UnbindPairsPass

PICKS = {
    "slice": """a0 = Slice(r, zero, one, last)
        a = Squeeze(a0, last)
        b0 = Slice(r, one, two, last)
        b = Squeeze(b0, last)""",
    "gather": """a = Gather<axis = -1>(r, i0)
        b = Gather<axis = 4>(r, i1)""",
    "split": """a0, b0 = Split<axis = -1, num_outputs = 2>(r)
        a = Squeeze(a0, last)
        b = Squeeze(b0, last)""",
}


def _model(picks: str, view: str = "{2, 3, 4, 4, 2}", out: str = "float[2, 3, 4, 4]") -> onnx.ModelProto:
    proto = onnx.parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>' + f'''
    g (float[2, 3, 4, 8] x) => ({out} y)
    <int64[5] shp = {view}, int64[1] zero = {{0}}, int64[1] one = {{1}}, int64[1] two = {{2}},
     int64[1] last = {{-1}}, int64 i0 = {{0}}, int64 i1 = {{-1}}>
    {{
        r = Reshape(x, shp)
        {picks}
        n = Neg(b)
        y = Add(a, n)
    }}''')
    return onnx.shape_inference.infer_shapes(proto)


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _apply(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, collections.Counter, bool]:
    model = ir.from_proto(proto)
    changed = UnbindPairsPass()(model).modified
    out = ir.to_proto(model)
    return out, collections.Counter(n.op_type for n in out.graph.node), changed


@pytest.mark.parametrize("form", sorted(PICKS))
def test_pair_picks_become_strided_slices_of_x(form):
    proto = _model(PICKS[form])
    out, _, changed = _apply(proto)
    assert changed
    onnx.checker.check_model(out)
    # every reader of the picks now reads a step-2 Slice of x itself
    add = next(n for n in out.graph.node if n.op_type == "Add")
    prod = {o: n for n in out.graph.node for o in n.output}
    neg = prod[add.input[1]]
    for v in (add.input[0], neg.input[0]):
        sl = prod[v]
        assert sl.op_type == "Slice" and sl.input[0] == "x", sl
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in out.graph.initializer}
        assert inits[sl.input[4]].tolist() == [2] and inits[sl.input[3]].tolist() == [-1]
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(_run(out, x), _run(proto, x))
    # the rerouted picks are left for dead-code removal: a second run changes nothing
    model = ir.from_proto(out)
    assert not UnbindPairsPass()(model).modified


def test_a_view_that_splits_the_last_axis_the_other_way_is_left():
    """[..., 2, D/2]: picking on its last axis takes a contiguous half, not the even columns."""
    proto = _model(PICKS["gather"], view="{2, 3, 4, 2, 4}", out="float[2, 3, 4, 2]")
    _, ops, changed = _apply(proto)
    assert not changed and ops["Gather"] == 2


def test_a_view_that_splits_another_axis_is_left():
    """x [2, 3, 4, 8] viewed as [2, 3, 2, 8, 2]... as [2, 3, 16, 2]: the leading dims change (rank 4 out)."""
    proto = onnx.parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>' + '''
    g (float[2, 3, 4, 8] x) => (float[2, 3, 16] y)
    <int64[4] shp = {2, 3, 16, 2}, int64 i0 = {0}>
    {
        r = Reshape(x, shp)
        y = Gather<axis = -1>(r, i0)
    }''')
    _, ops, changed = _apply(onnx.shape_inference.infer_shapes(proto))
    assert not changed and ops["Gather"] == 1


def test_a_pick_on_another_axis_is_left():
    proto = _model("""a = Gather<axis = 3>(r, i0)
        b = Gather<axis = 3>(r, i1)""", out="float[2, 3, 4, 2]")
    _, ops, changed = _apply(proto)
    assert not changed and ops["Gather"] == 2
