"""Paged KV (trt-O4) over position ids counted from 1: PaliGemma's decoder computes
``position_ids = cache_position[None] + 1`` before RoPE, so the readers hook
(optimizer/targets/trt_paged_kv.py) meets ``Unsqueeze(cache_position, [0]) -> Add(1)`` on the way to
the rotary tables. The offset keeps one value per token, so the [1, S] ids may become per-sequence
[B, S] ones; before, the hook refused ("position ids feed Add ..., not a position embedding") and the
model kept its contiguous cache (tools/holdout_specs.py HOLDOUT10C, paligemma_kv_hd64). The paged
model's outputs match the contiguous original through the shared harness (targets/paged_kv_feeds.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import paged_feeds, paired_outputs, run_paged, total_length
from onnx_fuse.verify import make_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from fuzz_motifs import make_decoder_case  # noqa: E402

SPEC = dict(head=64, heads=2, kv_heads=2, layers=2, window=0, sinks=False, upcast=False,
            positions="offset", padded=False, repeat="static", present_dims=True, kv_fp8=False)


def _one_based(model: onnx.ModelProto, offset: int, op: str = "Add") -> onnx.ModelProto:
    """Unsqueeze(cache_position, [0, 2]) -> Unsqueeze(.., [0]), op(.., offset), Unsqueeze(.., [2])."""
    g = model.graph
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in g.node if n.op_type == "Constant"}
    consts.update({i.name: onnx.numpy_helper.to_array(i) for i in g.initializer})
    at = next(i for i, n in enumerate(g.node) if n.op_type == "Unsqueeze"
              and consts.get(n.input[1]) is not None and consts[n.input[1]].tolist() == [0, 2])
    node = g.node[at]
    g.initializer.extend([onnx.numpy_helper.from_array(np.array([0], np.int64), "pos_ax0"),
                          onnx.numpy_helper.from_array(np.array([2], np.int64), "pos_ax2"),
                          onnx.numpy_helper.from_array(np.array(offset, np.int64), "pos_offset")])
    new = [helper.make_node("Unsqueeze", [node.input[0], "pos_ax0"], ["pos_row"], name="pos_row"),
           helper.make_node(op, ["pos_row", "pos_offset"], ["pos_shifted"], name="pos_shift"),
           helper.make_node("Unsqueeze", ["pos_shifted", "pos_ax2"], [node.output[0]], name="pos_col")]
    del g.node[at]
    for i, n in enumerate(new):
        g.node.insert(at + i, n)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("decode, op, offset", [(False, "Add", 1), (True, "Add", 1), (False, "Sub", 2)])
def test_offset_position_ids_are_paged(decode, op, offset):
    case = make_decoder_case(5, **SPEC, decode=decode, dim_names="optimum", fp16=False)
    model = _one_based(case.model, offset, op)
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    assert result.report.rule_fires.get("trt-paged-kv") == 2, result.report.warnings
    optimized = ir.to_proto(result.model)
    assert not any(i.name.startswith("past_key_values") for i in optimized.graph.input)
    names = [o.name for o in model.graph.output]
    ref_out = make_session(model).run(names, case.feeds)
    total = total_length(optimized, ref_out)
    ref_feeds, run = paged_feeds(model, optimized, case.feeds, total=total, seed=3)
    ref_out = make_session(model).run(names, ref_feeds)
    got = run_paged(make_session(optimized), optimized, run)
    for name, r, g in zip(*paired_outputs(model, optimized, ref_out, got, run, total)):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-4, err_msg=name)


def test_offset_from_a_graph_input_is_refused():
    """ids + x with x not a constant (a per-request shift the hook cannot prove per token): refused."""
    case = make_decoder_case(5, **SPEC, decode=False, dim_names="optimum", fp16=False)
    model = _one_based(case.model, 1)
    g = model.graph
    g.initializer.remove(next(i for i in g.initializer if i.name == "pos_offset"))
    g.input.append(helper.make_tensor_value_info("pos_offset", onnx.TensorProto.INT64, []))
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    assert not result.report.rule_fires.get("trt-paged-kv")
    assert any("trt-paged-kv: not rewritten" in w for w in result.report.warnings), result.report.warnings
