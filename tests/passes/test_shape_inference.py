"""ShapeInferencePass: adds types and symbolic shapes, reports a change only when it adds some."""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def test_infers_symbolic_shapes_then_reports_unmodified():
    proto = parse(HEADER + '''
    g (float[B, S, 8] x) => (float[B, S, 8] y)
    <int64[3] s = {0, 0, 8}>
    {
        a = Relu(x)
        t = Transpose<perm = [1, 0, 2]>(a)
        r = Reshape(a, s)
        y = Add(r, a)
    }''')
    model, modified, p = apply(ShapeInferencePass, proto)
    assert modified and p.stats["values-typed"] > 0
    values = {n.outputs[0].name: n.outputs[0] for n in model.graph}
    assert values["t"].dtype == ir.DataType.FLOAT
    assert [str(d) for d in values["t"].shape] == ["S", "B", "8"]
    assert values["r"].shape is not None and values["r"].shape[2] == 8
    assert ops(model) == {"Relu": 1, "Transpose": 1, "Reshape": 1, "Add": 1}
    again = ShapeInferencePass()
    assert not again(model).modified


def test_inference_failure_is_reported_not_raised(monkeypatch):
    import onnx

    def broken(*args, **kwargs):
        raise onnx.shape_inference.InferenceError("[ShapeInferenceError] boom\nmore")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", broken)
    proto = parse(HEADER + '''
    g (float[3] x) => (float[3] y)
    {
        a = Relu(x)
        y = Neg(a)
    }''')
    model, modified, p = apply(ShapeInferencePass, proto)
    assert not modified and p.stats == {"failed": 1}
    assert p.stats_reason == "shape inference failed: [ShapeInferenceError] boom"
    assert model.graph.node(0).outputs[0].type is None


def test_static_dim_refines_symbolic_but_never_overwrites_known_dim():
    proto = parse(HEADER + '''
    g (float[2, 8] x) => (float[B, 8] y)
    {
        y = Relu(x)
    }''')
    model, modified, _ = apply(ShapeInferencePass, proto)
    assert modified and list(model.graph.outputs[0].shape) == [2, 8]


def test_data_propagation_runs_on_shape_math_but_not_over_long_vectors():
    """onnx's data propagation expands every 1-D operand into a dims list (a 100 MB 1-D weight
    took 5.2 GB and 20 s); it is skipped when a 1-D value is longer than DATA_PROP_MAX_LEN."""
    from onnx_fuse.passes.shape_inference import DATA_PROP_MAX_LEN

    shape_math = '''
        s = Shape(x)
        b = Slice(s, zero, one)
        t = Concat<axis = 0>(b, eight)
        r = Reshape(x, t)
        y = Add(v, v)
    }'''
    inits = '<int64[1] zero = {0}, int64[1] one = {1}, int64[1] eight = {8}>'

    def run(n):
        proto = parse(HEADER + f'''
        g (float[2, 4, 2] x, float[{n}] v) => (float[{n}] y)
        {inits}
        {{''' + shape_math)
        model, _, p = apply(ShapeInferencePass, proto)
        r = next(n.outputs[0] for n in model.graph if n.op_type == "Reshape")
        return r.shape, p.stats

    shape, stats = run(16)
    assert list(shape) == [2, 8] and "data-prop-skipped" not in stats  # propagated
    shape, stats = run(DATA_PROP_MAX_LEN + 1)
    assert stats["data-prop-skipped"] == 1
    assert shape is not None and len(shape) == 2  # the rank is still known


def test_names_invented_by_inference_give_way_after_folding():
    """TorchScript's rotate-half: Slice(x, 0, Shape(x)[3] // 2, axis 3). Before folding, onnx
    cannot size the Slice and invents names (unk__N) for every dim; after folding the end is a
    constant, and a second inference must replace those names with the facts (head count 2,
    the symbols B and S) instead of keeping them as if they were known dims."""
    from onnx_fuse.passes.constant_folding import ConstantFoldingPass

    proto = parse(HEADER + '''
    g (float[B, 2, S, 16] x) => (float[B, 2, S, 8] y)
    <int64 three = {3}, int64 two = {2}, int64[1] zero = {0}, int64[1] ax = {3}, int64[1] ax0 = {0}>
    {
        s = Shape(x)
        d = Gather<axis = 0>(s, three)
        h = Div(d, two)
        ha = Abs(h)
        e = Unsqueeze(ha, ax0)
        y1 = Slice(x, zero, e, ax)
        y = Neg(y1)
    }''')
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    sliced = next(n.outputs[0] for n in model.graph if n.op_type == "Slice")
    # the cut axis is invented: Abs is no shape arithmetic the shape facts read (without it they
    # size the cut [:8] of 16 before folding: passes/_dim_source.py _at_least) (the axes it leaves alone are named from x: passes/_dim_source.py)
    assert sliced.shape is not None and str(sliced.shape[3]).startswith("unk__")
    assert [str(d) for d in sliced.shape][:3] == ["B", "2", "S"]
    ConstantFoldingPass()(model)
    assert ShapeInferencePass()(model).modified
    sliced = next(n.outputs[0] for n in model.graph if n.op_type == "Slice")
    assert [str(d) for d in sliced.shape] == ["B", "2", "S", "8"]
    assert not ShapeInferencePass()(model).modified


def test_invented_names_never_replace_facts():
    """The other direction: a symbol the exporter wrote (B) or a static dim is never replaced by a
    name inference invents, and an invented name only by a fact."""
    from onnx_fuse.passes.shape_inference import _merge_shape

    old = ir.Shape([ir.SymbolicDim("B"), 4, ir.SymbolicDim("unk__3"), ir.SymbolicDim("unk__4")])
    new = ir.Shape([ir.SymbolicDim("unk__9"), ir.SymbolicDim("unk__10"), ir.SymbolicDim("unk__11"), 8])
    merged, gained = _merge_shape(old, new)
    assert [str(d) for d in merged] == ["B", "4", "unk__3", "8"] and gained == 1
    merged, gained = _merge_shape(old, ir.Shape([2, 4, ir.SymbolicDim("S"), None]))
    assert [str(d) for d in merged] == ["2", "4", "S", "unk__4"] and gained == 2


def test_invented_dim_names_of_two_runs_never_meet():
    """onnx numbers its invented dims afresh each run (unk__1 again): left as they are, a name kept
    from the first run and one made by the second would pose as one dim in the saved model, and ONNX
    Runtime's buffer reuse fails on it (onnx's affine_grid_2d_expanded node test did at O2)."""
    import numpy as np
    import onnxruntime as ort
    from onnx.backend.test import loader

    import onnx_fuse

    (case,) = [tc for tc in loader.load_model_tests(kind="node") if tc.name == "test_affine_grid_2d_expanded"]
    proto = onnx_fuse.optimize(case.model, level=2, target="ort").to_proto()
    names = {d.dim_param for vi in proto.graph.value_info for d in vi.type.tensor_type.shape.dim if d.dim_param}
    assert names and all(n.startswith("unk__r") for n in names if n.startswith("unk__")), names
    inputs, outputs = case.data_sets[0]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: a for i, a in zip(proto.graph.input, inputs)})
    np.testing.assert_allclose(got[0], outputs[0], rtol=1e-5, atol=1e-6)


def test_torchscript_output_placeholders_give_way_to_inferred_dims():
    """TorchScript names an output's dims it could not relate <OpType><output>_dim_<i>
    (Concatpresent.0.value_dim_0): inference replaces them (the present's batch is the past's B);
    a name the model chose (T) and a placeholder-like name on another op's output stay."""
    proto = parse(HEADER + '''
    g (float[B, 2, P, 4] past, float[B, 2, S, 4] new)
        => (float[Concatpresent_dim_0, 2, T, Concatpresent_dim_3] present,
            float[Reluother_dim_0, 2, S, 4] other)
    {
        present = Concat<axis = 2>(past, new)
        other = Neg(new)
    }''')
    model, modified, _ = apply(ShapeInferencePass, proto)
    outs = {v.name: [str(d) for d in v.shape] for v in model.graph.outputs}
    assert modified and outs["present"] == ["B", "2", "T", "4"]
    assert outs["other"] == ["Reluother_dim_0", "2", "S", "4"]


def test_a_model_that_fails_to_serialize_keeps_its_initializers():
    """onnx-ir's call_onnx_api moves initializers into the inputs and detaches large values before
    serializing, outside its try/finally: a dim outside int64 left every weight an overridable
    input and the large ones empty (constant folding then folded nothing)."""
    import numpy as np

    w = ir.tensor(np.arange(1024, dtype=np.float32), name="w")   # 4 KB: call_onnx_api detaches it
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1024]))
    w_val = ir.Value(name="w", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1024]), const_value=w)
    add = ir.node("Add", [x, w_val], num_outputs=1)
    add.outputs[0].name = "y"
    add.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    add.outputs[0].shape = ir.Shape([(1 << 64) - 1])   # cannot be serialized
    graph = ir.Graph([x], [add.outputs[0]], nodes=[add], initializers=[w_val], opset_imports={"": 20})
    model = ir.Model(graph, ir_version=10)
    p = ShapeInferencePass()
    result = p(model)
    assert not result.modified and p.stats["failed"] == 1
    assert [v.name for v in model.graph.inputs] == ["x"]
    assert list(model.graph.initializers) == ["w"]
    assert model.graph.initializers["w"].const_value is w
