"""attention-kv-trt rebuilds a causal mask over the cache (cache-causal-bias) where net_nodes says the graph
gets smaller (rules/attention/paged_trt.yaml), not past a hand-written freed_ops count: the decision must be
the leaner of the two graphs, whichever way it goes. Each model is optimized three times at trt-O4: as the
rule decides, with the rebuild forced and with the export's mask forced (net_nodes patched to -1 / 1).

- tie: Whisper's case (13 die; the positions the rebuild reads are a graph output, so shared): rebuilt;
- owned: the same with nothing else reading the positions (19 die, the rebuild reads what it needs of them);
- long: more always-true glue in the mask: rebuilt;
- plain: 11 die, the rebuild plus attention-trt's broadcast adds more: kept."""

from __future__ import annotations

import pytest

from test_causal_only import _check, _model
from onnx_fuse.rewrite import _expr


def _owned(h):
    model = _model(h, past=True, kind="tie")
    del model.graph.output[-1]
    model.graph.node.remove([n for n in model.graph.node if list(n.output) == ["cache_position"]][0])
    return model


@pytest.mark.parametrize("kind, rebuilt", [("tie", True), ("owned", True), ("long", True), ("plain", False)])
def test_the_decision_is_the_leaner_graph(h, monkeypatch, kind, rebuilt):
    model = _owned(h) if kind == "owned" else _model(h, past=True, kind=kind)
    real = _expr._net_nodes
    counts = {}
    for mode in ("computed", -1, 1):
        monkeypatch.setattr(_expr, "_net_nodes", real if mode == "computed" else (lambda ctx, *a, m=mode: m))
        fused = h.fuse(model, "trt", level=4)
        counts[mode] = len(fused.graph.node)
        if mode == "computed":
            _check(h, model, fused, past=True)
    assert counts[-1] != counts[1], counts   # the two graphs differ: the test decides something
    assert counts["computed"] == min(counts[-1], counts[1]), counts
    assert (counts["computed"] == counts[-1]) == rebuilt, counts
