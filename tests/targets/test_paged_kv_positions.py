"""RoPE positions the paged-KV readers hook (optimizer/targets/trt_paged_kv.py) re-derives from
seq_lens, in the forms the differential fuzzer's decoder steps (tools/fuzz_decoder.py) write them:
one row ``Range(P, P + S)`` [S] unsqueezed to [1, S, 1] and cast to float32 before the inv_freq
Mul, with S's symbol on the hidden state only (shape inference names the Range's length afresh),
static or symbolic S, either dim naming. Each is paged at -O4 --target trt and its outputs match
the contiguous original through the shared harness (targets/paged_kv_feeds.py: shuffled pool
blocks, presents read back from the pools), also for a ragged pair of sequences run one by one."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import paged_feeds, paired_outputs, run_paged, total_length
from onnx_fuse.verify import make_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from fuzz_motifs import make_decoder_case  # noqa: E402

SPEC = dict(head=64, heads=2, kv_heads=2, layers=2, window=0, sinks=False, upcast=False,
            positions="range", padded=False, repeat="static", present_dims=True, kv_fp8=False)


def _paged(case) -> onnx.ModelProto:
    result = onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True)
    assert result.report.rule_fires.get("trt-paged-kv") == case.spec["layers"], result.report.warnings
    return ir.to_proto(result.model)


def _compare(case, optimized, tol=2e-4):
    names = [o.name for o in case.model.graph.output]
    ref_out = make_session(case.model).run(names, case.feeds)
    total = total_length(optimized, ref_out)
    ref_feeds, run = paged_feeds(case.model, optimized, case.feeds, total=total, seed=3)
    ref_out = make_session(case.model).run(names, ref_feeds)
    got = run_paged(make_session(optimized), optimized, run)
    for name, r, g in zip(*paired_outputs(case.model, optimized, ref_out, got, run, total)):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("decode, dim_names, fp16", [
    (False, "optimum", False), (False, "short", False), (True, "optimum", False), (False, "optimum", True),
])
def test_range_positions_cast_before_inv_freq_are_paged(decode, dim_names, fp16):
    case = make_decoder_case(5, **SPEC, decode=decode, dim_names=dim_names, fp16=fp16)
    optimized = _paged(case)
    assert not any(i.name.startswith("past_key_values") for i in optimized.graph.input)
    # nothing reads the retired past any more, and the positions come from seq_lens
    assert not [n for n in optimized.graph.node if n.op_type == "Shape" and n.input[0].startswith("past")]
    _compare(case, optimized, tol=1e-2 if fp16 else 2e-4)


def test_range_positions_are_per_sequence_in_a_ragged_batch():
    """Two sequences of different lengths in one paged batch: each new token's RoPE angle is its
    own seq_lens[b] - S + i, as the original computes it for that sequence alone."""
    case = make_decoder_case(6, **SPEC, decode=True, dim_names="optimum", fp16=False)
    optimized = _paged(case)
    from onnx_fuse.targets.paged_kv_feeds import paged_inputs_from_contiguous, gather_pool

    feeds = dict(case.feeds)
    B, P = feeds["past_key_values.0.key"].shape[0], feeds["past_key_values.0.key"].shape[2]
    if B < 2:
        feeds = {k: np.concatenate([v, v], 0) if k != "attention_mask" else np.ones((2, P + 1), np.int64)
                 for k, v in feeds.items()}
    lens = [P, max(P - 2, 0)]
    rng = np.random.default_rng(1)
    for k in [k for k in feeds if k.startswith("past_key_values.")]:
        feeds[k] = rng.standard_normal(feeds[k].shape).astype(np.float32)
    run = paged_inputs_from_contiguous(feeds, 4, past_lens=lens, new_tokens=1, seed=2)
    wanted = {i.name for i in optimized.graph.input}
    got = run_paged(make_session(optimized), optimized, {k: v for k, v in run.items() if k in wanted})
    sess = make_session(case.model)
    names = [o.name for o in case.model.graph.output]
    for b, L in enumerate(lens):
        one = {k: v[b:b + 1] for k, v in feeds.items()}
        one.update({k: v[b:b + 1, :, :L] for k, v in feeds.items() if k.startswith("past_key_values.")})
        one["attention_mask"] = np.ones((1, L + 1), np.int64)
        ref = dict(zip(names, sess.run(names, one)))
        hidden = next(n for n in names if not n.startswith("present."))
        np.testing.assert_allclose(got[hidden][b], ref[hidden][0], rtol=2e-4, atol=2e-4)
        k_back = gather_pool(got["kv_pool_k_out.0"], run["block_tables"][b], L + 1)
        np.testing.assert_allclose(k_back, ref["present.0.key"][0], rtol=2e-4, atol=2e-4)


def _matmul_rope(case):
    """The case's RoPE angles as HF writes them: inv_freq [1, D/2, 1] @ positions [1, 1, S] (one
    Unsqueeze [0, 1] of the Range row, as the dynamo export of transformers 4.53 merges its two), then
    Transpose [0, 2, 1], in place of the row's Unsqueeze [0, 2] and the Mul by inv_freq [D/2]."""
    from onnx import helper, numpy_helper

    g = case.model.graph
    inits = {t.name: t for t in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    mul = next(n for n in g.node if n.op_type == "Mul" and any(i.startswith("inv_freq") for i in n.input))
    inv_name = next(i for i in mul.input if i.startswith("inv_freq"))
    cast = prod[next(i for i in mul.input if i != inv_name)]
    unsq = prod[cast.input[0]]
    assert unsq.op_type == "Unsqueeze" and list(numpy_helper.to_array(inits[unsq.input[1]])) == [0, 2]
    inv = numpy_helper.to_array(inits[inv_name])
    g.initializer.extend([numpy_helper.from_array(np.array([0, 1], np.int64), "row_axes_01"),
                          numpy_helper.from_array(inv.reshape(1, -1, 1), "inv_freq_col")])
    unsq.input[1] = "row_axes_01"
    at = list(g.node).index(mul)
    new = [helper.make_node("MatMul", ["inv_freq_col", cast.output[0]], ["freqs_t"], name="rope_matmul"),
           helper.make_node("Transpose", ["freqs_t"], [mul.output[0]], perm=[0, 2, 1], name="rope_transpose")]
    g.node.remove(mul)
    for k, n in enumerate(new):
        g.node.insert(at + k, n)
    onnx.checker.check_model(case.model, full_check=True)
    return case


@pytest.mark.parametrize("decode", [False, True])
def test_range_row_unsqueezed_to_one_one_s_for_the_inv_freq_matmul_is_paged(decode):
    """transformers 4.53 under the dynamo exporter: the position row reaches HF's inv_freq MatMul as
    [1, 1, S] through one Unsqueeze [0, 1]; paged at -O4 (was refused: 'the past length feeds Cast')
    and per sequence as the contiguous original."""
    case = _matmul_rope(make_decoder_case(5, **SPEC, decode=decode, dim_names="optimum", fp16=False))
    optimized = _paged(case)
    assert not [n for n in optimized.graph.node if n.op_type == "Shape" and n.input[0].startswith("past")]
    _compare(case, optimized)
