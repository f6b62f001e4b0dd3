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


def test_plugin_op_stand_ins_reach_if_branches():
    """The same layers inside an If branch (an Optimum merged decoder holds every layer there):
    the stand-ins reach the branch, so S = 1 is proven after each op there too."""
    model = _model('''
    g (bool c, float[B, 1, 128] x, float[N, 4, 2, 64] kc0, float[N, 4, 2, 64] vc0, float[N, 4, 2, 64] kc1,
       float[N, 4, 2, 64] vc1, int32[B, M] bt, int32[B] sl) => (float[B, S, 128] y)
    {
        y = If(c) <then_branch = then_g () => (float[B, S, 128] yt) {
            o0, kc0o, vc0o = onnx_fuse.PagedAttention<num_heads = 2, kv_num_heads = 2>(x, x, x, kc0, vc0, bt, sl)
            h = Relu(o0)
            o1, kc1o, vc1o = onnx_fuse.PagedAttention<num_heads = 2, kv_num_heads = 2>(h, h, h, kc1, vc1, bt, sl)
            f = onnx_fuse.FusedAttention<num_heads = 2>(o1, o1, o1)
            yt = Relu(f)
        }, else_branch = else_g () => (float[B, S, 128] ye) {
            ye = Relu(x)
        }>
    }''')
    branch = model.graph.node(0).attributes["then_branch"].value
    for n in branch:   # the stale shapes a rule gave
        for o in n.outputs:
            if o.name in ("o0", "o1", "f", "h"):
                o.shape, o.type = ir.Shape(["B", "S", 128]), ir.TensorType(ir.DataType.FLOAT)
    assert ShapeInferencePass()(model).modified
    for name in ("o0", "h", "o1", "f", "yt"):
        v = next(o for n in branch for o in n.outputs if o.name == name)
        assert [d if isinstance(d, int) else d.value for d in v.shape] == ["B", 1, 128], name
    assert [n.op_type for n in branch] == ["PagedAttention", "Relu", "PagedAttention",
                                           "FusedAttention", "Relu"]   # only the copy had stand-ins


def test_contrib_attention_outputs_are_inferred():
    """ORT's contrib attention ops, as the ort lowering writes them: MultiHeadAttention's output is
    [B, S, v_hidden] (q's batch and length, v's hidden size: 48 here, not q's 32), also beside the
    presents it keeps (left unknown); GroupQueryAttention's is q's shape. What reads them learns
    it; the 4-D value form is left alone."""
    model = ir.from_proto(onnx.parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18, "com.microsoft" : 1]>' + '''
    g (float[B, S, 32] q, float[B, T, 32] k, float[B, T, 48] v, float[B, 2, P, 16] pk, float[B, 2, P, 24] pv,
       float[B, 1, T, 16] k4, int32[B] sl, int32 tot) => (float[B, S2, C2] o)
    {
        y = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v)
        z = Relu(y)
        y2, pko, pvo = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v, , , , pk, pv)
        g1 = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1>(q, k4, k4, , , sl, tot)
        y4 = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k4, k4)
        w = Relu(g1)
        o = Concat<axis = 2>(z, y2, w)
    }'''))
    assert ShapeInferencePass()(model).modified
    assert _dims(model, "y") == _dims(model, "z") == _dims(model, "y2") == ["B", "S", 48]
    assert _dims(model, "g1") == _dims(model, "w") == ["B", "S", 32]
    out = {o.name: o for n in model.graph for o in n.outputs}
    assert out["pko"].shape is None and out["y4"].shape is None
    assert [n.op_type for n in model.graph] == ["MultiHeadAttention", "Relu", "MultiHeadAttention",
                                                 "GroupQueryAttention", "MultiHeadAttention", "Relu", "Concat"]


def test_a_concat_length_is_named_as_the_sum_of_its_parts():
    """present = Concat(past [.., p, ..], new [.., s, ..]) undeclared: onnx leaves its length
    unknown (a fresh unk__N per value); now it is ``p + s`` (sorted terms, ints last), and a
    Range(p, p + s) table has s rows."""
    model = _model('''
    g (float[b, 1, p, 8] past, float[b, 1, s, 8] new, float[b, 1, p, 8] past2, float[b, 1, 1, 8] one)
      => (float[b, 1, ?, 8] present, float[b, 1, ?, 8] present2, int64[?] r)
    {
        present = Concat<axis = 2>(past, new)
        present2 = Concat<axis = -2>(one, past2)
        t = Transpose<perm = [0, 1, 3, 2]>(present)
        ps = Shape<start = 2, end = 3>(past)
        ss = Shape<start = 2, end = 3>(new)
        ts = Add(ps, ss)
        p0 = Squeeze(ps)
        t0 = Squeeze(ts)
        r = Range(p0, t0, c1)
        c1 = Constant<value = int64 {1}>()
    }''')
    ShapeInferencePass()(model)
    assert _dims(model, "present") == ["b", 1, "p + s", 8]
    assert _dims(model, "t") == ["b", 1, 8, "p + s"]
    assert _dims(model, "present2") == ["b", 1, "p + 1", 8]
    assert _dims(model, "r") == ["s"]


def test_gqa_static_repeat_without_declared_present_dims_is_paged():
    """The fuzzer's last GQA refusals (PERF.md, run 17): repeat_kv written with constant shapes
    over a present whose length nothing declares. With the present named p + s the repeat is
    proven and the cache paged; verify passes (paged feeds, docs/paged_kv.md)."""
    import sys
    from pathlib import Path

    import onnx_fuse
    from onnx_fuse.verify import verify

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from fuzz_motifs import make_decoder_case

    for fp16, names, decode in ((False, "short", True), (True, "optimum", False)):
        case = make_decoder_case(7, head=64, heads=2, kv_heads=1, layers=1, window=0, sinks=False,
                                 upcast=False, padded=False, kv_fp8=False, fp16=fp16, decode=decode,
                                 positions="range", repeat="static", present_dims=False, dim_names=names)
        result = onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True)
        assert result.report.rule_fires.get("attention-repeat-kv") == 1
        assert result.report.rule_fires.get("trt-paged-kv") == 1, result.report.warnings
        got = verify(case.model, result.model, shapes={k: tuple(a.shape) for k, a in case.feeds.items()})
        assert got["passed"], got["outputs"]
