"""recognize.yaml attention-sinks: GPT-OSS's attention sinks, softmax(concat(scale q k^T + mask,
sink) - max)[..., :-1] v, become the canonical Attention over one zero key/value row whose mask
column is the sink (then the target's attention op); before, nothing matched the Softmax.
The sink column is expanded from the inputs' shapes (GPT-OSS's export) or to Shape(scores)[0:3]
+ [1] (that Shape read of the scores made them escape the match: the differential fuzzer's
`sink_shape="scores"` decoders fused nothing)."""

from __future__ import annotations

import numpy as np
import pytest

H, D = 2, 8
BIG = np.iinfo(np.int64).max


def _graph(h, *, drop_first=False, sink_shape="inputs", named=True, div_scale=False):
    n = h.node
    if sink_shape == "inputs":
        expand = [n("Shape", ["q"], ["b1"], start=0, end=1), n("Shape", ["q"], ["s1"], start=2, end=3),
                  n("Concat", ["b1", "one", "s1", "one"], ["sshape"], axis=0)]
    else:   # Shape(scores)[0:3] + [1]
        expand = [n("Shape", ["sm"], ["bhs"], start=0, end=3), n("Concat", ["bhs", "one"], ["sshape"], axis=0)]
    nodes = [
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["qk"]), n("Div" if div_scale else "Mul", ["qk", "scale"], ["sc"]),
        n("Add", ["sc", "mask"], ["sm"]),
        *expand,
        n("Expand", ["sinks", "sshape"], ["sink"]),                     # [B, H, S, 1]
        n("Concat", ["sm", "sink"], ["cat"], axis=-1),
        n("ReduceMax", ["cat", "last"], ["mx"], keepdims=1),
        n("Sub", ["cat", "mx"], ["sb"]),
        n("Softmax", ["sb"], ["p"], axis=-1),
        n("Slice", ["p", "one" if drop_first else "zero", "big" if drop_first else "last", "last"], ["ps"]),
        n("MatMul", ["ps", "v"], ["o"]),
    ]
    inits = {"one": np.array([1], np.int64), "zero": np.array([0], np.int64), "last": np.array([-1], np.int64),
             "big": np.array([BIG], np.int64),
             "scale": np.array(D ** 0.5 if div_scale else D ** -0.5, np.float32),
             "sinks": np.array([0.7, -0.3], np.float32).reshape(1, H, 1, 1)}
    # unnamed batch and length: the Shape(scores) read is not a read of named dims that shape-cse
    # (passes/shape_cse.py) could take from q instead
    b, s = ("b", "s") if named else (None, None)
    inputs = [h.vi(x, [b, H, s, D]) for x in ("q", "k", "v")] + [h.vi("mask", [b, 1, s, s])]
    return h.make_model(nodes, inputs, [h.vi("o", [b, H, s, D])], inits)


def _feeds(h):
    b, s = 2, 5
    f = {x: h.rng.standard_normal((b, H, s, D)).astype(np.float32) for x in ("q", "k", "v")}
    f["mask"] = np.triu(np.full((s, s), -3.4e38, np.float32), k=1)[None, None].repeat(b, 0)
    return f


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 3), ("trt", 4)])
def test_attention_sinks_fuse(h, target, level):
    model = _graph(h)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops and (ops["Attention"] + ops["com.microsoft::MultiHeadAttention"]) == 1, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_attention_sinks_expanded_to_the_scores_shape_fuse(h, target, level):
    """Refused before: the Shape(scores) read escaped the match."""
    model = _graph(h, sink_shape="scores", named=False)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    assert (ops["Attention"] + ops["com.microsoft::MultiHeadAttention"]) == 1, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_attention_sinks_with_a_divided_scale_fuse(h, target, level):
    """scores / sqrt(D) instead of scores * D^-0.5 (the differential fuzzer's sinks motif, sweep
    seeds 2, 3, 7 at 38419ee): nothing matched the Softmax before."""
    model = _graph(h, div_scale=True)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops and (ops["Attention"] + ops["com.microsoft::MultiHeadAttention"]) == 1, ops
    h.assert_close(model, out, _feeds(h))


def test_dropping_another_column_is_not_a_sink(h):
    model = _graph(h, drop_first=True)
    out = h.fuse(model, "onnx")
    assert "Softmax" in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_sinks_over_a_kv_cache_stay_contiguous_where_not_paged(target):
    """rules/attention/sinks.yaml: over Concat(past, new) the sinks make a canonical AttentionKV with
    sinks (attention-kv-cache); where nothing pages it (level 3, every target) attention-kv-sinks
    and attention-sinks-zero-key lower it back to the zero key/value row, present outputs kept,
    checked against the original (GQA through attention-repeat-kv, the sink column as GPT-OSS's
    export writes it)."""
    import sys
    from pathlib import Path

    import onnx_fuse

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from fuzz_motifs import make_decoder_case

    case = make_decoder_case(5, head=16, heads=4, kv_heads=2, layers=1, window=0, sinks=True, sink_shape="export",
                             fp16=False, upcast=False, decode=False, positions="offset", padded=False,
                             dim_names="optimum", repeat="shape", present_dims=True, kv_fp8=False, merged=False)
    result = onnx_fuse.optimize(case.model, level=3, target=target, verify=True)
    fires = result.report.rule_fires
    assert fires.get("attention-sinks") == fires.get("attention-kv-cache") == 1, fires
    assert fires.get("attention-kv-sinks") == fires.get("attention-sinks-zero-key") == 1, fires
    assert "Softmax" not in [n.op_type for n in result.model.graph]
    assert result.report.status == "PASSED", result.report.status_reason
