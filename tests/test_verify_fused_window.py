"""verify on a prefill model whose attention became FusedAttention(window=W): its default 8 new
tokens never exceed a window of 8 or more, so a wrong W would pass. When the optimized graph
carries a window attribute, verify also runs W + 3 new tokens (up to a cap) and says so."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse import verify as V
from tests.sliding_band import with_band

MODEL = Path(__file__).resolve().parent / "data" / "models" / "llama64_sdpa_dynamo.onnx"
WINDOW = 12   # above the 8 new tokens verify feeds by default


def _fused(window: int) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    original = with_band(onnx.load(str(MODEL)), window)
    fused = ir.to_proto(onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True).model)
    attrs = [a for n in fused.graph.node if n.op_type == "FusedAttention" for a in n.attribute if a.name == "window"]
    assert attrs and all(a.i == window for a in attrs)
    return original, fused


def _set_window(model: onnx.ModelProto, window: int) -> None:
    for n in model.graph.node:
        for a in n.attribute:
            if n.op_type == "FusedAttention" and a.name == "window":
                a.i = window


def test_right_window_passes_on_a_prefill_longer_than_it():
    original, fused = _fused(WINDOW)
    assert V.window_attribute(fused) == WINDOW
    r = V.verify(original, fused)
    assert r["passed"], r
    assert [o["name"] for o in r["outputs"]] == ["logits", f"logits [sequence={WINDOW + 3}]"]
    assert any(f"also verified on {WINDOW + 3} new tokens" in n for n in r["notes"]), r["notes"]


@pytest.mark.parametrize("wrong", [WINDOW + 1, 0])
def test_wrong_window_fails(wrong):
    """W + 1 and no window at all agree with W on 8 tokens (the old verify passed both); with no
    window attribute left, the original's window constant sets the long case."""
    original, fused = _fused(WINDOW)
    _set_window(fused, wrong)
    r = V.verify(original, fused)
    assert not r["passed"]
    assert [o["passed"] for o in r["outputs"]] == [True, False], r["outputs"]


def test_window_above_the_cap_is_named_not_run():
    original, fused = _fused(WINDOW)
    _set_window(fused, V._LONG_PREFILL_CAP)
    r = V.verify(original, fused)
    assert [o["name"] for o in r["outputs"]] == ["logits"]
    assert any("cap" in n and "not exercised" in n for n in r["notes"]), r["notes"]


def test_a_window_the_default_tokens_exceed_adds_no_case():
    original, fused = _fused(4)
    r = V.verify(original, fused)
    assert r["passed"] and [o["name"] for o in r["outputs"]] == ["logits"], r
