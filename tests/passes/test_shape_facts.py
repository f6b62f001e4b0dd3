"""Shape facts inference attaches where onnx alone leaves them out (passes/_op_shapes.py and the
Concat sums of passes/_dim_source.py): our plugin ops' outputs, a present's P + S length."""

from __future__ import annotations

import onnx
import onnx.parser
import onnx_ir as ir

from onnx_fuse.passes.shape_inference import ShapeInferencePass

HEADER = '<ir_version: 10, opset_import: ["" : 18, "onnx_fuse" : 1]>'


def _model(text: str) -> ir.Model:
    return ir.from_proto(onnx.parser.parse_model(HEADER + text))


def _dims(model: ir.Model, name: str) -> list:
    v = next(o for n in model.graph for o in n.outputs if o.name == name)
    return [d if isinstance(d, int) else d.value for d in v.shape]


def test_plugin_op_outputs_take_their_inputs_shapes_through_layers():
    """Two PagedAttention layers whose outputs still carry a stale symbolic S (as the lowering
    rule shaped them): inference through the ops proves S = 1 for both, and for what follows."""
    model = _model('''
    g (float[B, 1, 128] x, float[N, 4, 2, 64] kc0, float[N, 4, 2, 64] vc0, float[N, 4, 2, 64] kc1,
       float[N, 4, 2, 64] vc1, int32[B, M] bt, int32[B] sl)
      => (float[B, S, 128] y, float[N, 4, 2, 64] kc0o, float[N, 4, 2, 64] vc1o)
    {
        o0, kc0o, vc0o = onnx_fuse.PagedAttention<num_heads = 2, kv_num_heads = 2>(x, x, x, kc0, vc0, bt, sl)
        h = Relu(o0)
        o1, kc1o, vc1o = onnx_fuse.PagedAttention<num_heads = 2, kv_num_heads = 2>(h, h, h, kc1, vc1, bt, sl)
        f = onnx_fuse.FusedAttention<num_heads = 2>(o1, o1, o1)
        y = Relu(f)
    }''')
    for n in model.graph:   # the stale shapes a rule gave
        for o in n.outputs:
            if o.name in ("o0", "o1", "f", "h"):
                o.shape, o.type = ir.Shape(["B", "S", 128]), ir.TensorType(ir.DataType.FLOAT)
    assert ShapeInferencePass()(model).modified
    for name in ("o0", "h", "o1", "f", "y"):
        assert _dims(model, name) == ["B", 1, 128], name
    assert _dims(model, "vc1o") == ["N", 4, 2, 64]
    assert [n.op_type for n in model.graph] == ["PagedAttention", "Relu", "PagedAttention",
                                                 "FusedAttention", "Relu"]   # only the copy had stand-ins
