"""split-rotate-half: ONNX Runtime's Split of rotate_half's two Slices (GatherSliceToSplitFusion) back
into the Slices the RoPE rules read; other two-way Splits stay. Exact (same elements), checked in ORT."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort
import pytest

import onnx_fuse
from onnx_fuse.passes.split_rotate_half import SplitRotateHalfPass

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


def _model(body: str, split_in: str = ", sizes") -> onnx.ModelProto:
    return onnx.parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>' + f'''
    g (float[2, 3, 4, 8] x) => (float[2, 3, 4, 8] y)
    <int64[2] sizes = {{4, 4}}>
    {{
        a, b = Split<axis = -1>(x{split_in})
        {body}
    }}''')


ROTATE_HALF = "n = Neg(b)\n        y = Concat<axis = -1>(n, a)"


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _apply(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, collections.Counter]:
    model = ir.from_proto(proto)
    SplitRotateHalfPass()(model)
    out = ir.to_proto(model)
    return out, collections.Counter(n.op_type for n in out.graph.node)


def test_rotate_half_split_becomes_two_slices_with_the_same_numbers():
    proto = _model(ROTATE_HALF)
    out, ops = _apply(proto)
    assert ops["Split"] == 0 and ops["Slice"] == 2 and ops["Neg"] == 1 and ops["Concat"] == 1
    onnx.checker.check_model(out)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(_run(out, x), _run(proto, x))


@pytest.mark.parametrize("body", [
    "n = Neg(a)\n        y = Concat<axis = -1>(n, b)",              # the first half negated: not rotate_half
    "n = Neg(b)\n        y = Concat<axis = -1>(a, n)",              # halves in their own order
    "n = Neg(b)\n        c = Concat<axis = -1>(n, a)\n        y = Add(c, a)",  # a read twice
    "n = Neg(b)\n        y = Concat<axis = 2>(n, a)",               # another axis (shape [2,3,8,4]... refused)
], ids=["neg-first", "order", "shared-half", "axis"])
def test_other_two_way_splits_stay(body):
    proto = _model(body)
    _, ops = _apply(proto)
    assert ops["Split"] == 1 and ops["Slice"] == 0


def test_split_without_known_sizes_stays():
    proto = onnx.parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>' + '''
    g (float[2, 3, 4, 8] x, int64[2] sizes) => (float[2, 3, 4, 8] y)
    {
        a, b = Split<axis = -1>(x, sizes)
        n = Neg(b)
        y = Concat<axis = -1>(n, a)
    }''')
    _, ops = _apply(proto)
    assert ops["Split"] == 1


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rope_fuses_after_ort_offline_optimization(target, tmp_path):
    """LLaMA with a KV cache after ONNX Runtime's EXTENDED offline optimization: its rotate_half
    Slices became Splits; RoPE fuses again (0 -> 4) and the model verifies."""
    src = CORPUS / "llama__kv__trained.onnx"
    if not src.exists():
        pytest.skip(f"{src.name} not in the corpus")
    pre = tmp_path / "pre.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(pre)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    splits = [n for n in onnx.load(str(pre)).graph.node if n.op_type == "Split"]
    assert len(splits) >= 4  # what ORT wrote for the rotate_half halves
    result = onnx_fuse.optimize(str(pre), level=3, target=target, verify=True)
    ops = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert ops["RotaryEmbedding"] == 4 and result.report.verify["passed"], ops
