"""trt-paged-kv with attention sinks (GPT-OSS): the canonical AttentionKV's sinks (recognize.yaml
attention-sinks, then attention-kv-cache) become PagedAttention's float32 [Hq] sinks input, inputs
7 and 8 (the fp8 scales) left empty. Before, the sink form's zero key row (a Pad of
Concat(past, new)) kept every such decoder contiguous.

Decoders from tools/fuzz_decoder.py (head size 64, the kernels' size): MHA / GQA, the sink column
expanded as GPT-OSS's export writes it or to Shape(scores), decode (S = 1) and prefill shapes,
with and without a sliding window. Each is compared with its original in ONNX Runtime through the
NumPy reference (verify, and here the pools' tokens and the output), and the same comparison
fails once the sinks are dropped (set to -inf).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import paged_feeds, paired_outputs, run_paged, total_length
from onnx_fuse.verify import make_session, to_proto

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from fuzz_motifs import make_decoder_case  # noqa: E402

BASE = dict(head=64, layers=1, sinks=True, fp16=False, upcast=False, positions="offset", padded=False,
            dim_names="optimum", repeat="static", present_dims=True, kv_fp8=False)
CASES = [
    dict(heads=2, kv_heads=2, window=0, sink_shape="export", decode=True),
    dict(heads=4, kv_heads=2, window=0, sink_shape="scores", decode=False),
    dict(heads=2, kv_heads=1, window=3, sink_shape="export", decode=True),
    dict(heads=4, kv_heads=2, window=2, sink_shape="scores", decode=False, repeat="shape"),
]


def _paged(kw):
    case = make_decoder_case(11, **{**BASE, **kw})
    return case, onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True, verify=True)


def _sink_consts(model: onnx.ModelProto) -> np.ndarray:
    """The decoder's sink logits (the constant named sinks*, an initializer or a Constant node)."""
    for t in model.graph.initializer:
        if t.name.startswith("sinks"):
            return numpy_helper.to_array(t).reshape(-1)
    node = next(n for n in model.graph.node if n.op_type == "Constant" and n.output[0].startswith("sinks"))
    return numpy_helper.to_array(node.attribute[0].t).reshape(-1)


def _compare(original: onnx.ModelProto, paged: onnx.ModelProto, feeds: dict) -> float:
    """Largest difference, output slot by output slot, of the paged model (pools of shuffled
    blocks) against the original on the same past; pools read back as the present outputs."""
    ref = make_session(original).run(None, feeds)
    total = total_length(paged, ref)
    ref_feeds, run_feeds = paged_feeds(original, paged, feeds, total=total, block_size=4, seed=1)
    ref = make_session(original).run(None, ref_feeds)
    got = run_paged(make_session(paged), paged, run_feeds)
    paired = paired_outputs(original, paged, ref, got, run_feeds, total)
    assert not isinstance(paired, str), paired
    return max(float(np.abs(np.asarray(r, np.float64) - g).max()) for _, r, g in zip(*paired))


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: f"h{kw['heads']}kv{kw['kv_heads']}_w{kw['window']}_{kw['sink_shape']}"
                         f"_{'decode' if kw['decode'] else 'prefill'}")
def test_sinks_decoder_is_paged_with_its_sinks(kw):
    case, result = _paged(kw)
    assert result.report.rule_fires.get("trt-paged-kv") == 1, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
    proto = to_proto(result.model)
    node = next(n for n in proto.graph.node if n.op_type == "PagedAttention")
    assert len(node.input) == 10 and node.input[7] == "" and node.input[8] == "" and node.input[9]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["window"] == kw["window"]
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    sinks = inits[node.input[9]]   # folded to one float32 [Hq] initializer
    assert sinks.dtype == np.float32 and sinks.shape == (kw["heads"],)
    np.testing.assert_array_equal(sinks, _sink_consts(case.model).astype(np.float32)[:kw["heads"]])
    assert _compare(case.model, proto, case.feeds) < 1e-4


def test_dropping_the_sinks_changes_the_numbers():
    """The comparison can fail: the paged model with its sinks at -inf (no sink) differs."""
    case, result = _paged(CASES[0])
    proto = to_proto(result.model)
    node = next(n for n in proto.graph.node if n.op_type == "PagedAttention")
    init = next(t for t in proto.graph.initializer if t.name == node.input[9])
    init.CopyFrom(numpy_helper.from_array(np.full(CASES[0]["heads"], -np.inf, np.float32), init.name))
    assert _compare(case.model, proto, case.feeds) > 1e-3


def test_sinks_of_several_values_per_head_are_not_paged():
    """A sink column that differs across the batch (not one logit per head) keeps the contiguous
    cache, with the reason in the report."""
    case = make_decoder_case(11, **{**BASE, **CASES[0]})
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    arr = _sink_consts(model).reshape(1, -1, 1, 1)
    if case.feeds["attention_mask"].shape[0] != 2:
        pytest.skip("needs a batch of 2")
    # one sink per (batch row, head): a [2, H, 1, 1] column no longer the per-head [1, H, 1, 1]
    two = numpy_helper.from_array(np.concatenate([arr, arr + 1.0]).astype(arr.dtype))
    for t in model.graph.initializer:
        if t.name.startswith("sinks"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(two), t.name))
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output[0].startswith("sinks"):
            n.attribute[0].t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(two), n.output[0]))
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and "one logit per query head" in notes[0], result.report.warnings


def test_fp8_pools_keep_the_sinks():
    """--kv-cache-dtype fp8 on a node with sinks: the scales go to inputs 7 and 8, the sinks stay
    input 9; verified against the original on the rounded past (the 10-input fp8 reference)."""
    case = make_decoder_case(11, **{**BASE, **CASES[2], "heads": 4, "kv_heads": 2})
    result = onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True,
                                kv_cache_dtype="fp8", verify=True)
    node = next(n for n in to_proto(result.model).graph.node if n.op_type == "PagedAttention")
    assert list(node.input[7:9]) == ["kv_scale_k.0", "kv_scale_v.0"] and node.input[9], list(node.input)
    assert result.report.status == "PASSED", result.report.status_reason
