"""The fuzzer's control-flow graphs (fuzz_motifs.add_control_flow): an If on a scalar bool input
whose branches read an intermediate of the motifs from the outer scope, or hold a motif built on
the hidden state. They come from a side stream of the seed, so every other part of the graph, and
every graph without them, is what it was."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
import fuzz_motifs  # noqa: E402
from fuzz_motifs import make_case  # noqa: E402


def _subgraph_ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for node in model.graph.node if node.op_type == "If"
                               for a in node.attribute for n in a.g.node)


def test_a_quarter_of_the_motif_graphs_get_an_if():
    kinds = collections.Counter()
    for seed in range(120):
        kinds.update(m.split("_")[0] if m.startswith("if_") and m != "if_reads" else m
                     for m in make_case(seed).motifs if m.startswith("if"))
    assert kinds["if_reads"] >= 8 and kinds["if"] >= 8, kinds


def test_the_rest_of_the_graph_stays_what_it_was(monkeypatch):
    """Seed 10 gets both traps; without control flow the same seed builds the same main graph
    (names after the If shift, op types do not)."""
    with_cf = make_case(10)
    assert {"if_reads", "if_layer_norm"} <= set(with_cf.motifs)
    monkeypatch.setattr(fuzz_motifs, "CONTROL_FLOW_SHARE", 0.0)
    without = make_case(10)
    assert not any(m.startswith("if") for m in without.motifs)
    ops = [n.op_type for n in with_cf.model.graph.node if n.op_type != "If"]
    assert ops == [n.op_type for n in without.model.graph.node]
    extra = {i.name for i in with_cf.model.graph.input} - {i.name for i in without.model.graph.input}
    assert len(extra) == 1 and with_cf.feeds[extra.pop()].shape == ()


@pytest.mark.parametrize("level, target", [(2, "ort"), (3, "onnx")])
def test_a_layer_norm_inside_a_branch_is_fused_and_verified(level, target):
    """Seed 10: a LayerNorm motif inside a branch is fused there, and the attention's
    intermediate read by the other If stays: the fuzzer's run is ok."""
    case = make_case(10)
    runs = fd.fuzz_case(case, [level], [target])[0]
    assert [r["cls"] for r in runs] == ["ok"], runs
    import onnx_fuse

    optimized = onnx_fuse.optimize(case.model, level=level, target=target).to_proto()
    assert _subgraph_ops(optimized)["LayerNormalization"] == 1


def test_a_kv_cache_attention_inside_a_branch_runs_at_the_onnx_target():
    """Seed 2019: the branch's attention reads a past but returns no present; dead-code dropped
    the Attention-23's unused present outputs, which ORT refuses with a past (ort-refused at
    O3 / O4 onnx)."""
    runs = fd.fuzz_case(make_case(2019), [3, 4], ["onnx"])[0]
    assert [r["cls"] for r in runs] == ["ok", "ok"], runs


def test_branch_values_named_as_our_passes_name_theirs():
    """Seed 10's branches name their values val_0, val_1... (fuzz_motifs.name_branches_like_ours),
    the names onnx-ir gives values a pass adds to the main graph: the checker refused the
    optimized model at O3 / O4 every target ('val_0' used as output names multiple times)."""
    case = make_case(10)
    assert "branch-names-like-ours" in case.traps
    runs = fd.fuzz_case(case, [3], ["ort", "trt"])[0]
    assert runs and all(r["cls"] == "ok" for r in runs), runs
