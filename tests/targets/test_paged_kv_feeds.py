"""The paged-KV harness shared by verify and the differential fuzzer
(optimizer/targets/paged_kv_feeds.py): pool names of both naming forms map back to the past they
replace, the paged run takes its feeds from the graph's inputs (an initializer that is also an
input keeps the user's feed), and the fp8 tolerance verify and the fuzzer both apply."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import (FP8_TOL, fp8_tolerance, gather_pool, paged_feeds, paired_outputs,
                                              past_input, pool_name, run_paged, total_length)
from onnx_fuse.verify import make_inputs, make_session

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "data" / "models" / "gpt264_kv_dynamo.onnx"


@pytest.mark.parametrize("past, tag, pool", [
    ("past_key_values.3.key", "k", "kv_pool_k.3"),
    ("past_key_values.3.value", "v", "kv_pool_v.3"),
    ("past.0.value", "v", "kv_pool_v.0"),
    ("past_key_0", "k", "kv_pool_k.past_key_0"),
    ("cache_v", "v", "kv_pool_v.cache_v"),
])
def test_pool_names_map_back_to_their_past(past, tag, pool):
    others = ["input_ids", "past.0.key", "past.0.value", "past_value_0", "past_key_values.3.key",
              "past_key_values.3.value", "past_key_0", "cache_v"]
    assert pool_name(past, tag) == pool
    assert past_input(pool, others) == past


def _with_weight_input(proto: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """``proto`` with initializer ``name`` also a graph input (a weight the user may override)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    init = next(t for t in out.graph.initializer if t.name == name)
    out.graph.input.append(oh.make_tensor_value_info(name, init.data_type, list(init.dims)))
    return out


def test_paged_run_feeds_an_overridden_initializer_input():
    """ORT's get_inputs() leaves out initializers that are also graph inputs; the paged feeds come
    from graph.input, so the user's value of such a weight reaches the paged model too."""
    weight = "m.lm_head.weight"
    original = _with_weight_input(onnx.load(str(MODEL)), weight)
    optimized = ir.to_proto(onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True).model)
    assert weight in {i.name for i in optimized.graph.input}
    assert any(n.op_type == "PagedAttention" for n in optimized.graph.node)
    feeds = make_inputs(original, pad_masks=False, seed=3)
    lm = next(t for t in original.graph.initializer if t.name == weight)
    feeds[weight] = -2.0 * onnx.numpy_helper.to_array(lm)
    names = [o.name for o in original.graph.output]
    ref_out = make_session(original).run(names, feeds)
    total = total_length(optimized, ref_out)
    ref_feeds, run_feeds = paged_feeds(original, optimized, feeds, total=total, seed=1)
    assert run_feeds[weight] is feeds[weight]
    got = run_paged(make_session(optimized), optimized, run_feeds)
    pnames, refs, gots = paired_outputs(original, optimized, ref_out, got, run_feeds, total)
    assert pnames == names
    for n, r, g in zip(pnames, refs, gots):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=n)


def test_pools_hold_the_past_in_shuffled_blocks_and_nan_elsewhere():
    original = onnx.load(str(MODEL))
    optimized = ir.to_proto(onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True).model)
    feeds = make_inputs(original, pad_masks=False, seed=0)
    P = feeds["past_key_values.1.value"].shape[2]
    _, run = paged_feeds(original, optimized, feeds, total=P + 1, block_size=4, seed=2)
    pool, tables = run["kv_pool_v.1"], run["block_tables"]
    for b, row in enumerate(tables):
        np.testing.assert_array_equal(gather_pool(pool, row, P), feeds["past_key_values.1.value"][b])
    used = np.zeros(pool.shape[:2], bool)
    for row in tables:
        for pos in range(P):
            used[row[pos // 4], pos % 4] = True
    assert np.isnan(pool[~used]).all() and not np.isnan(pool[used]).any()
    assert list(run["seq_lens"]) == [P + 1] * len(tables)
    assert not (np.diff(tables.reshape(-1)) == 1).all()   # not one contiguous run of blocks


def test_fp8_tolerance_is_one_bound_for_verify_and_the_fuzzer():
    """fp8_tolerance(ref) is e4m3's bound (FP8_TOL, the absolute part scaled by the output's
    largest finite |value|, at least 1); verify's compare and the fuzzer's compare_fp8 both apply
    it: an error just inside passes both, just outside fails both."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import fuzz_paged
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from onnx_fuse.verify import compare_arrays

    ref = np.array([[-30.0, 2.0, np.inf], [0.5, 0.0, 12.0]], np.float32)
    atol, rtol = fp8_tolerance(ref)
    assert (atol, rtol) == pytest.approx((FP8_TOL[1] * 30.0, FP8_TOL[0]))
    assert fp8_tolerance(np.array([0.25, -0.5]))[0] == pytest.approx(FP8_TOL[1])   # magnitude >= 1
    bound = atol + rtol * 2.0
    for step, ok in ((0.99, True), (1.01, False)):
        got = ref.copy()
        got[0, 1] += step * bound
        assert compare_arrays("y", ref, got, atol, rtol).passed is ok
        assert fuzz_paged.compare_fp8(["y"], [ref], [got])[0] == ("ok" if ok else "wrong")


def test_the_paged_rewrite_is_left_to_the_whole_model_check():
    """trt-paged-kv adds graph inputs (pools, block tables) that no cut-out of the per-rewrite
    check has: it is counted unchecked with that reason (it crashed there with a KeyError before)
    and the whole-model check compares the paged model."""
    result = onnx_fuse.optimize(onnx.load(str(MODEL)), level=4, target="trt", float32_plugins=True,
                                verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    reasons = result.report.verify["rewrites"]["unchecked_reasons"]
    assert not [r for r in reasons if "crashed" in r], reasons
    assert reasons.get("trt-paged-kv: changes the model's inputs and outputs (graph_io); "
                       "the whole-model check compares it") == 2, reasons
