"""Seventh sweep, part B (docs/holdout.md): corpus exports that another tool rewrote first. Here ONNX
Runtime's own offline optimization (SessionOptions.optimized_model_filepath at EXTENDED), which
writes FusedMatMul for the attention scores (q k^T with the scale as alpha) and
SkipLayerNormalization / BiasGelu between the layers: attention must still fuse, and verify."""

from __future__ import annotations

import collections
from pathlib import Path

import onnx
import onnx.parser
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.passes.shape_inference import ShapeInferencePass

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
ATTENTION = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedAttention"}


def _ort_extended(src: Path, dst: Path) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("stem", ["bert__dyn_mask__trained", "distilbert__torchscript__trained"])
@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_attention_fuses_after_ort_offline_optimization(stem, target, tmp_path):
    src = CORPUS / f"{stem}.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not in the corpus")
    pre = tmp_path / "pre.onnx"
    _ort_extended(src, pre)
    before = collections.Counter(n.op_type for n in onnx.load(str(pre)).graph.node)
    assert before["FusedMatMul"] == 2, before  # what ORT wrote (the scores, scale as alpha)
    result = onnx_fuse.optimize(str(pre), level=3, target=target, verify=True)
    counts = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert sum(counts[op] for op in ATTENTION) == 2, counts
    assert "FusedMatMul" not in counts and result.report.verify["passed"]


def test_ort_elementwise_fusions_keep_their_input_shape():
    """SkipLayerNormalization's output (and its sum output) and a GELU's are shaped like the input,
    so a head split after them is proven; mean / inv_std_var stay unknown. Default-domain
    SimplifiedLayerNormalization (ORT registers it there) too."""
    model = ir.from_proto(onnx.parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18, "com.microsoft" : 1]>' + '''
    g (float[B, S, 32] x, float[B, S, 32] skip, float[32] gamma, float[32] beta, float[32] bias) => (float[?, ?, ?] o)
    {
        y, mean, inv, sum = com.microsoft.SkipLayerNormalization<epsilon = 1e-5>(x, skip, gamma, beta)
        a = com.microsoft.BiasGelu(y, bias)
        b = com.microsoft.FastGelu(a)
        r = SimplifiedLayerNormalization<epsilon = 1e-5>(b, gamma)
        o = Relu(r)
        s2 = Relu(sum)
    }'''))
    ShapeInferencePass()(model)
    out = {o.name: o for n in model.graph for o in n.outputs}
    for name in ("y", "sum", "a", "b", "r", "o", "s2"):
        assert out[name].shape is not None and [d if isinstance(d, int) else d.value for d in out[name].shape] \
            == ["B", "S", 32], name
    assert [n.op_type for n in model.graph] == ["SkipLayerNormalization", "BiasGelu", "FastGelu",
                                                 "SimplifiedLayerNormalization", "Relu", "Relu"]


def test_ort_extended_rmsnorm_is_loaded_and_refused_by_nothing(tmp_path):
    """ORT writes RMSNorm as SimplifiedLayerNormalization in the default domain (no onnx schema):
    it was refused at load ('No Op registered'); now it loads, and at O2+ it is expanded so the norm
    rules fuse it for the target (RMSNormalization at onnx, all 5 norms); O1 keeps it as it is."""
    src = CORPUS / "mistral__torchscript__trained.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not in the corpus")
    pre = tmp_path / "pre.onnx"
    _ort_extended(src, pre)
    assert collections.Counter(n.op_type for n in onnx.load(str(pre)).graph.node)["SimplifiedLayerNormalization"]
    result = onnx_fuse.optimize(str(pre), level=2, target="onnx", verify=True)
    counts = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert counts["RMSNormalization"] == 5 and "SimplifiedLayerNormalization" not in counts, counts
    assert result.report.verify["passed"]
    kept = onnx_fuse.optimize(str(pre), level=1, target="onnx", verify=True)
    assert kept.report.verify["passed"]


HALF_HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


@pytest.mark.parametrize("dtype", ["float", "float16"])
def test_simplified_layer_norm_expansion_matches_ort(dtype):
    proto = onnx.parser.parse_model(HALF_HEADER + f'''
    g ({dtype}[B, S, 16] x, {dtype}[16] w) => ({dtype}[B, S, 16] y)
    {{
        n = SimplifiedLayerNormalization<epsilon = 1e-5, axis = -1>(x, w)
        y = Relu(n)
    }}''')
    from onnx_fuse.passes.ort_contrib import ExpandSimplifiedLayerNormPass

    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert ExpandSimplifiedLayerNormPass()(model).modified
    ops = [n.op_type for n in model.graph]
    assert "SimplifiedLayerNormalization" not in ops and ops.count("Cast") == (2 if dtype == "float16" else 0)
    from onnx_fuse.verify import verify

    out = ir.to_proto(model)
    onnx.checker.check_model(out, full_check=True)
    assert verify(proto, out, precision="fp16" if dtype == "float16" else None)["passed"]


def test_nodes_out_of_order_are_sorted_on_load():
    """onnxruntime.transformers' float16 converter appends the input Casts after their readers:
    ORT sorts, the checker refuses; load sorts (stably). A cycle is still refused."""
    from onnx_fuse.errors import UserError
    from onnx_fuse.model_io import load_model

    proto = onnx.parser.parse_model(HALF_HEADER + '''
    g (float[2, 4] x) => (float[2, 4] y)
    {
        a = Relu(xc)
        y = Neg(a)
        xc = Abs(x)
    }''')
    model = load_model(proto)
    assert [n.op_type for n in model.graph] == ["Abs", "Relu", "Neg"]
    assert [n.op_type for n in proto.graph.node] == ["Relu", "Neg", "Abs"]  # the caller's proto untouched
    cyclic = onnx.parser.parse_model(HALF_HEADER + '''
    g (float[2, 4] x) => (float[2, 4] y)
    {
        a = Add(x, b)
        b = Relu(a)
        y = Neg(b)
    }''')
    with pytest.raises(UserError, match="topologically sorted"):
        load_model(cyclic)


@pytest.mark.parametrize("dtype", ["float", "float16"])
@pytest.mark.parametrize("body, gone", [
    ("n, m1, v1, s = com.microsoft.SkipLayerNormalization<epsilon = 1e-5>(x, skip, w, b, b)\n y = Add(n, s)",
     "SkipLayerNormalization"),
    ("n, m1, v1, s = com.microsoft.SkipSimplifiedLayerNormalization<epsilon = 1e-6>(x, skip, w)\n y = Add(n, s)",
     "SkipSimplifiedLayerNormalization"),
    ("y = com.microsoft.BiasGelu(x, b)", "BiasGelu"),
    ("y = com.microsoft.FastGelu(x, b)", "FastGelu"),
    ("y = com.microsoft.QuickGelu<alpha = 1.702>(x)", "QuickGelu"),
])
def test_ort_fusions_expand_to_what_ort_computes(body, gone, dtype):
    from onnx_fuse.passes.ort_contrib import ExpandOrtFusionsPass
    from onnx_fuse.verify import verify

    proto = onnx.parser.parse_model('<ir_version: 9, opset_import: ["" : 18, "com.microsoft" : 1]>' + f'''
    g ({dtype}[B, S, 16] x, {dtype}[B, S, 16] skip, {dtype}[16] w, {dtype}[16] b) => ({dtype}[B, S, 16] y)
    {{
        {body}
    }}''')
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert ExpandOrtFusionsPass()(model).modified
    out = ir.to_proto(model)
    assert all(n.domain in ("", "ai.onnx") for n in out.graph.node), [n.op_type for n in out.graph.node]
    onnx.checker.check_model(out, full_check=True)
    assert verify(proto, out, precision="fp16" if dtype == "float16" else None)["passed"]


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_onnx_and_trt_targets_re_express_ort_fusions(target, tmp_path):
    """ORT EXTENDED's SkipLayerNormalization / BiasGelu / FusedMatMul on BERT: the onnx and trt
    targets cannot run them; they come back as LayerNormalization-17 / Gelu-20 / Attention."""
    src = CORPUS / "bert__dyn_mask__trained.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not in the corpus")
    pre = tmp_path / "pre.onnx"
    _ort_extended(src, pre)
    result = onnx_fuse.optimize(str(pre), level=3, target=target, verify=True)
    proto = result.to_proto()
    assert not [n.op_type for n in proto.graph.node if n.domain == "com.microsoft"]
    counts = collections.Counter(n.op_type for n in proto.graph.node)
    assert counts["LayerNormalization"] == 5 and counts["Gelu"] == 2 and counts["Attention"] == 2, counts
    assert result.report.verify["passed"]


def test_shape_split_reads_as_gathers():
    """ORT's GatherSliceToSplitFusion: a shape's dim reads as one Split into parts of 1 and a Squeeze
    each; they come back as Gather(shape, i), what the shape facts read. A float Split, or parts
    longer than 1, stay."""
    from onnx_fuse.passes.ort_contrib import ShapeSplitToGatherPass
    from onnx_fuse.verify import verify

    proto = onnx.parser.parse_model('<ir_version: 9, opset_import: ["" : 18]>' + '''
    g (float[B, S, 8] x) => (float[?, ?] y, int64[?] p, float[B, S, 4] h)
      <int64[3] ones = {1, 1, 1}, int64[1] z = {0}, int64[2] halves = {4, 4}>
    {
        s = Shape(x)
        a, b, c = Split<axis = 0>(s, ones)
        b0 = Squeeze(b, z)
        a0 = Squeeze(a, z)
        m = Mul(a0, b0)
        t = Unsqueeze(m, z)
        c1 = Concat<axis = 0>(t, c)
        y = Reshape(x, c1)
        p = Identity(c)
        h, h2 = Split<axis = -1>(x, halves)
    }''')
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert ShapeSplitToGatherPass()(model).modified
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

    DeadCodeEliminationPass()(model)
    ops = collections.Counter(n.op_type for n in model.graph)
    assert ops["Split"] == 1 and ops["Gather"] == 3 and ops["Squeeze"] == 0, ops  # the float Split stays
    out = ir.to_proto(model)
    onnx.checker.check_model(out, full_check=True)
    assert verify(proto, out)["passed"]


def test_mistral_gqa_after_ort_extended_fuses(tmp_path):
    """Mistral TorchScript after ORT EXTENDED: its repeat_kv shape reads came as a Split of the shape
    (GatherSliceToSplitFusion), the V repeat's dims were unknown, attention 0/2."""
    src = CORPUS / "mistral__torchscript__trained.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not in the corpus")
    pre = tmp_path / "pre.onnx"
    _ort_extended(src, pre)
    result = onnx_fuse.optimize(str(pre), level=3, target="onnx", verify=True)
    counts = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert counts["Attention"] == 2 and counts["RotaryEmbedding"] == 4, counts
    assert result.report.verify["passed"]
