"""No pass leaves a reader outside the graph: an ir.Node made by a rewrite that then refuses still
counts as a use of its inputs (onnx-ir registers uses at construction), which keeps their producers
alive through dead-code elimination and makes graph_io rules see readers that are not there
(size-one-axes did so on the sdpa K^T views of dynamo exports: GPT-2's static decode lost its paged KV
at -O4 trt). Checked after every pipeline pass on exports that exercise size-one-axes and paging."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import onnx_fuse
import onnx_fuse.api as api
from tests.decode_models import static_decode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stale_readers(monkeypatch):
    found: collections.Counter = collections.Counter()
    original = api.run_pass

    def run_pass(p, model):
        record = original(p, model)
        name = getattr(p, "display_name", type(p).__name__)
        for g in model.graphs():
            for v in [*(o for n in g for o in n.outputs), *g.inputs, *g.initializers.values()]:
                found.update((name, u.op_type) for u, _ in v.uses() if u.graph is None)
        return record

    monkeypatch.setattr(api, "run_pass", run_pass)
    return found


@pytest.mark.parametrize("name", ["gpt264_kv_dynamo", "opt_hd64__kv__trained"])
def test_static_decode_passes_leave_no_stale_reader(name, stale_readers):
    onnx_fuse.optimize(static_decode(name), level=4, target="trt", precision="fp16")
    assert not stale_readers, dict(stale_readers)


@pytest.mark.parametrize("target,level", [("ort", 3), ("trt", 4)])
def test_tf2onnx_passes_leave_no_stale_reader(target, level, stale_readers):
    onnx_fuse.optimize(str(ROOT / "tests/data/holdout_tf/bert_mha__tf2onnx.onnx"), level=level, target=target)
    assert not stale_readers, dict(stale_readers)
