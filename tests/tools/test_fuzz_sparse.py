"""The fuzzer's sparse initializers (fuzz_motifs.add_sparse_initializers): a side stream of the
seed moves some weights of a motif or idiom graph into graph.sparse_initializer, which onnx-ir
does not read (every level crashed on them before optimizer/sparse_initializers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
import fuzz_motifs  # noqa: E402
from fuzz_motifs import make_case  # noqa: E402


def test_some_graphs_keep_weights_sparse_and_never_an_overridable_one():
    cases = [make_case(seed) for seed in range(80)]
    sparse = [c for c in cases if "sparse-initializer" in c.traps]
    assert 4 <= len(sparse) <= 24, len(sparse)
    for c in sparse:
        names = {s.values.name for s in c.model.graph.sparse_initializer}
        assert names and not names & {vi.name for vi in c.model.graph.input}
        assert not names & {t.name for t in c.model.graph.initializer}


def test_the_rest_of_the_graph_stays_what_it_was(monkeypatch):
    with_sparse = make_case(6)
    assert "sparse-initializer" in with_sparse.traps
    monkeypatch.setattr(fuzz_motifs, "SPARSE_SHARE", 0.0)
    without = make_case(6)
    assert with_sparse.model.graph.node == without.model.graph.node
    moved = {s.values.name for s in with_sparse.model.graph.sparse_initializer}
    assert {t.name for t in without.model.graph.initializer} == \
        {t.name for t in with_sparse.model.graph.initializer} | moved


def test_a_graph_with_sparse_weights_is_optimized_and_verified():
    """Seed 6: every level crashed ("fails the ONNX checker": the sparse weight had no producer)."""
    runs = fd.fuzz_case(make_case(6), [1, 3], ["ort", "onnx"])[0]
    assert runs and all(r["cls"] == "ok" for r in runs), runs
