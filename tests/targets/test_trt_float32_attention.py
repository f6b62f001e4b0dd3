"""-O4 trt on float32 attention without --precision: the plugin ops' kernels take fp16 / bf16 only
(docs/tensorrt.md), so the plugin rules leave float32 matches to TensorRT's own ops (Attention-23,
the contiguous KV cache, as at -O3) and the report says how many and why; --precision lowers them to
the plugins with 16-bit inputs, and ``float32_plugins=True`` asks for the float32 plugin form (the
NumPy reference runs it, TensorRT cannot build it). A float16 export needs neither: the rules fire
on it as they are (tests/rules/test_half_precision_masks.py::test_float16_export_gets_fused_attention_at_o4)."""

from __future__ import annotations

import collections
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.cli.main import main
from onnx_fuse.errors import UserError
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN
from onnx_fuse.plugins.check_trt import check_model
from tests.rewrite.rw_testing import model_from_text, rules_from_yaml

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
SDPA, KV = MODELS / "llama64_sdpa_dynamo.onnx", MODELS / "llama64_kv_dynamo.onnx"
LOW = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
#: float32 inputs of the plugin contracts: PagedAttention's k_scale, v_scale and sinks
FLOAT32_BY_CONTRACT = {"PagedAttention": {7, 8, 9}}


def _ops(model: ir.Model) -> collections.Counter:
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type
                               for n in model.graph.all_nodes())


def _plugin_nodes(model: ir.Model) -> list[ir.Node]:
    return [n for n in model.graph.all_nodes() if n.domain == PLUGIN_DOMAIN]


def _kept_notes(result) -> list[str]:
    return [w for w in result.report.warnings if "kept TensorRT's own ops" in w]


def _unbuildable(result) -> list[str]:
    return [w for w in result.report.warnings if "TensorRT cannot build them" in w]


def _float_input_types(node: ir.Node) -> set:
    skip = FLOAT32_BY_CONTRACT.get(node.op_type, set())
    return {v.dtype for i, v in enumerate(node.inputs) if v is not None and i not in skip
            and v.dtype not in (ir.DataType.INT32, ir.DataType.INT64)}


@pytest.fixture(scope="module")
def sdpa_default():
    return onnx_fuse.optimize(SDPA, level=4, target="trt", verify=True)


def test_float32_attention_keeps_tensorrts_attention(sdpa_default):
    """The old default emitted two float32 FusedAttention that TensorRT cannot build."""
    result = sdpa_default
    assert not _plugin_nodes(result.model), _ops(result.model)
    ops = _ops(result.model)
    assert ops["Attention"] == 2 and "Softmax" not in ops
    o3 = onnx_fuse.optimize(SDPA, level=3, target="trt")
    assert ops == _ops(o3.model)   # what TensorRT builds at -O3: nothing of the plugin level left
    verdict = check_model(result.to_proto())
    assert verdict.supported and not verdict.issues, [str(i) for i in verdict.issues]
    assert result.report.status == "PASSED"
    assert _kept_notes(result) == [
        "2 matches kept TensorRT's own ops instead of FusedAttention, whose kernels take fp16 / bf16, "
        "not float32 (fused-attention-trt-probed); "
        "--precision fp16 or bf16 lowers them to the plugin"]
    # (attention-trt rebuilds the export's causal + padding bias, causal-key-padding-bias: the probed
    # rule is the one that would take it; the structural fused-attention-trt-causal no longer sees it)
    assert _unbuildable(result) == [] and result.report.rule_fires.get("fused-attention-trt-probed") is None


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_with_a_precision_every_plugin_op_takes_16_bit_inputs(precision):
    result = onnx_fuse.optimize(SDPA, level=4, target="trt", precision=precision)
    nodes = _plugin_nodes(result.model)
    assert [n.op_type for n in nodes] == ["FusedAttention"] * 2
    assert all(_float_input_types(n) == {LOW[precision]} for n in nodes), \
        [(n.name, _float_input_types(n)) for n in nodes]
    assert _kept_notes(result) == [] and _unbuildable(result) == []


def test_float32_plugins_asks_for_the_reference_form():
    result = onnx_fuse.optimize(SDPA, level=4, target="trt", float32_plugins=True, verify=True)
    nodes = _plugin_nodes(result.model)
    assert [n.op_type for n in nodes] == ["FusedAttention"] * 2
    assert all(_float_input_types(n) == {ir.DataType.FLOAT} for n in nodes)
    assert result.report.status == "PASSED" and _kept_notes(result) == []
    assert _unbuildable(result) == [
        "2 FusedAttention with float32 inputs: TensorRT cannot build them (the plugin kernels take fp16 / "
        "bf16); optimize with --precision fp16 or bf16"]
    assert not check_model(result.to_proto()).supported
    with pytest.raises(UserError, match="float32_plugins must be True or False"):
        onnx_fuse.optimize(SDPA, level=4, target="trt", float32_plugins="yes")


def test_float32_kv_cache_stays_contiguous_and_verifies():
    """trt-paged-kv's PagedAttention takes fp16 / bf16 query and pools: a float32 decoder keeps its
    past inputs and present outputs (Attention-23 with the cache), so verify runs on it as is."""
    original = onnx.load(str(KV), load_external_data=False)
    result = onnx_fuse.optimize(KV, level=4, target="trt", verify=True)
    assert not _plugin_nodes(result.model) and _ops(result.model)["Attention"] == 2
    assert [v.name for v in result.model.graph.inputs] == [v.name for v in original.graph.input]
    assert [v.name for v in result.model.graph.outputs] == [v.name for v in original.graph.output]
    assert result.report.status == "PASSED"
    assert check_model(result.to_proto()).supported
    assert _kept_notes(result) == [
        "2 matches kept TensorRT's own ops instead of PagedAttention, whose kernels take fp16 / bf16, "
        "not float32 (trt-paged-kv); --precision fp16 or bf16 lowers them to the plugin"]
    assert not [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    paged = onnx_fuse.optimize(KV, level=4, target="trt", precision="fp16")
    nodes = _plugin_nodes(paged.model)
    assert [n.op_type for n in nodes] == ["PagedAttention"] * 2
    assert all(_float_input_types(n) == {ir.DataType.FLOAT16} for n in nodes)


def test_fp8_pools_of_a_float32_model_ask_for_a_precision():
    with pytest.raises(UserError, match="its attention is float32.*--precision fp16 or bf16"):
        onnx_fuse.optimize(KV, level=4, target="trt", kv_cache_dtype="fp8", shapes={"sequence": (1,)})


def test_cli_flag(tmp_path, capsys):
    plain, asked = tmp_path / "plain.onnx", tmp_path / "asked.onnx"
    assert main(["optimize", str(SDPA), "-o", str(plain), "-O", "4", "--target", "trt", "-q"]) == 0
    assert main(["optimize", str(SDPA), "-o", str(asked), "-O", "4", "--target", "trt", "-q",
                 "--float32-plugins"]) == 0
    count = lambda p: sum(n.domain == PLUGIN_DOMAIN for n in onnx.load(str(p)).graph.node)  # noqa: E731
    assert (count(plain), count(asked)) == (0, 2)


# The engine's guard, on any rule that emits a plugin op: refused on float32 (counted, not a
# validation rejection), so a lower-priority rule lowers the match; made on float16, and on float32
# where the pass allows it (RewritePass's default: the pipeline decides, build_stages).
MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g ({T}[N, 4] x) => ({T}[N, 4] y) {{
  y = Relu(x)
}}
"""
RULES = """
rules:
  - name: relu-plugin
    doc: Relu(x) -> onnx_fuse::FusedAttention(x, x, x)
    targets: [trt]
    priority: 10
    domains: {onnx_fuse: 1}
    match: |
      y = Relu(x)
    rewrite: |
      y = onnx_fuse::FusedAttention(x, x, x, num_heads=1) : like(x)
  - name: relu-native
    doc: Relu(x) -> Max(x, 0)
    targets: [trt]
    priority: 5
    match: |
      y = Relu(x)
    rewrite: |
      zero = initializer(array([0.0], dtype(x)))
      y = Max(x, zero)
"""


@pytest.mark.parametrize("elem, float32_plugins, made", [
    ("float", False, "Max"), ("float", True, "FusedAttention"), ("float16", False, "FusedAttention")])
def test_rewrite_pass_guard(elem, float32_plugins, made):
    from onnx_fuse.rewrite import RewritePass

    model = ir.from_proto(model_from_text(MODEL.format(T=elem)))
    p = RewritePass(rules_from_yaml(RULES), float32_plugins=float32_plugins)
    p(model)
    assert [n.op_type for n in model.graph] == [made]
    assert p.rejected == []
    kept = made == "Max"
    assert p.plugin_notes == ([
        "1 match kept TensorRT's own ops instead of FusedAttention, whose kernels take fp16 / bf16, "
        "not float32 (relu-plugin); --precision fp16 or bf16 lowers them to the plugin"] if kept else [])
