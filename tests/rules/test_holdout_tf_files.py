"""Hold-out 8B's exports as the exporters wrote them (tools/export_tf.py --small, tests/data/holdout_tf):
Keras 3 MultiHeadAttention encoders through tf2onnx (bert_mha: padding mask, post-norm, exact GELU via
erf; vit_nhwc: NHWC Conv patches, class token, pre-norm; gpt_causal: a causal mask only), keras-hub's
GPT2Backbone (kh_gpt2) through tf2onnx, and a Flax nnx block through jax2onnx. The helper-built tests
(test_holdout8b_idioms.py) hold each idiom; these check the whole graphs end to end (every glue op the
exporters add), at each target, against the original in ONNX Runtime."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import onnx_fuse

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests/data/holdout_tf"
sys.path.insert(0, str(ROOT / "tools"))
from coverage import count_ops  # noqa: E402

# per file: (attention layers, norms) every target must reach
EXPECTED = {"bert_mha__tf2onnx.onnx": (1, 3), "vit_nhwc__tf2onnx.onnx": (1, 3), "flax_block__jax2onnx.onnx": (1, 2),
            # causal-only (no mask input): Slice ends 1e9, tf.slice sizes, float arange (test_slice_to_end.py,
            # test_tf_slice_sizes.py)
            "gpt_causal__tf2onnx.onnx": (1, 3), "kh_gpt2__tf2onnx.onnx": (1, 3)}


def test_manifest_lists_the_files():
    files = json.loads((DATA / "manifest.json").read_text())["files"]
    assert set(files) == set(EXPECTED)
    for name, entry in files.items():
        assert (DATA / name).stat().st_size == entry["bytes"] < 300_000


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_export_fuses_and_verifies(name, target, level):
    result = onnx_fuse.optimize(str(DATA / name), level=level, target=target, verify=True)
    assert result.report.verify["passed"], result.report.verify
    counts = count_ops(result.report.ops_after)
    attn, norms = EXPECTED[name]
    assert (counts["attn"], counts["norm"]) == (attn, norms), (counts, result.report.ops_after)
