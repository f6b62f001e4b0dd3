"""tools/*.py scripts (not a package) imported by path for the tests of their pure parts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(stem: str, alias: str) -> ModuleType:
    """tools/<stem>.py executed as a fresh module named `alias` (a name of its own per test module,
    so one module's state cannot leak into another's)."""
    spec = importlib.util.spec_from_file_location(alias, TOOLS / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def identity_model(path, shape) -> None:
    """A one-Identity int64 model at ``path``: the file a manifest entry is made for, without an export."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)


def plan_new_set(ec: ModuleType, number: int, new, monkeypatch, key=lambda spec: spec["model_type"]) -> list:
    """Hold-out ``number``'s architectures ``new`` have keys (model types, or what ``key`` reads of a spec)
    no earlier set and no corpus spec has, and its plan (returned) exports cache styles of decoders only;
    ``ec`` = export_corpus loaded by load_tool."""
    hs = ec.HOLDOUT_SETS[number]
    earlier = {key(spec) for n, s in ec.HOLDOUT_SETS.items() if n < number for spec in s.values()}
    earlier |= {key(spec) for spec in ec.SPECS.values()}
    assert not {key(hs[a]) for a in new} & earlier
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(new), None, number))
    for arch, style, _ in todo:
        if style in ec.KV_STYLES:
            assert ec.SPECS[arch]["kind"] == "decoder", arch
    return todo


#: the graphs of the tests' ``fuzz_differential.fuzz(count, seed)`` runs, as (seed, count)
FUZZ_RUNS = ((11, 40), (12, 20), (5, 25), (21, 4), (22, 2), (31, 2), (17, 3), (23, 50))
#: the seeds tests pass to ``fuzz_motifs.make_case`` themselves
FUZZ_NAMED_SEEDS = (3, 4, 5, 6, 7, 10, 13, 16, 58, 77, 130, 2019, 14525077, 211629190, 567340412, 875106632,
                    876935673, 914902902, 1118843654, 1332654939, 1356464380, 1436930359, 1448915198, 2004176908,
                    2159279219, 2319539263, 2319559700, 2500259774, 2766378798, 2952367057, 3122327281, 3201138260,
                    3310816760, 3528835259, 3678026147, 3750698633)


def pinned_fuzz_seeds() -> list[int]:
    """Every make_case seed a test depends on: a fuzz family drawn from a side stream of its own (fuzz_s25 /
    s28 / s34) must turn none of them into its cases, or those tests would check other graphs."""
    from fuzz_differential import case_seed   # tools/ on sys.path (the fuzz tests put it there)

    return [case_seed(s, i) for s, n in FUZZ_RUNS for i in range(n)] + list(FUZZ_NAMED_SEEDS)


def check_own_stream(names, low: float, high: float, graphs: int = 300) -> None:
    """A fuzz family drawn from a side stream of its own: between ``low`` and ``high`` of the first ``graphs``
    make_case seeds are its cases (a motif named in ``names``), and none of the pinned_fuzz_seeds is."""
    from fuzz_motifs import make_case

    drawn = sum(any(m in names for m in make_case(seed).motifs) for seed in range(graphs))
    assert low < drawn < high, drawn
    for seed in pinned_fuzz_seeds():
        assert not any(m in names for m in make_case(seed).motifs), seed


def first_case(make, want=frozenset(), plain_off=None, tries: int = 400):
    """The first ``make(seed)`` (seed < ``tries``) whose traps include ``want``; with ``plain_off`` (a set of traps)
    also none of those and no near miss (a ``near-`` trap): the fuzz families' tests pick their cases so."""
    for seed in range(tries):
        case = make(seed)
        traps = set(case.traps)
        if not want <= traps:
            continue
        if plain_off is not None and (traps & plain_off or any(t.startswith("near-") for t in traps)):
            continue
        return case
    raise AssertionError(f"no case with {set(want)} in {tries} seeds")


#: the traps a plain case of a one-motif fuzz family (fuzz_s37 / s38) has none of: float16, a piece of the pattern
#: exposed or read elsewhere, an overridable weight
PLAIN_OFF = frozenset({"fp16", "intermediate-is-output", "intermediate-multi-consumer", "initializer-is-input"})


def motif_case(make, motif: str, want=frozenset(), plain: bool = False, tries: int = 600):
    """The first ``make(seed, motif)`` with the traps ``want`` (``plain``: also no near miss and none of PLAIN_OFF)."""
    return first_case(lambda seed: make(seed, motif), want, PLAIN_OFF if plain else None, tries)


def op_counts(model, level: int = 3, target: str = "onnx"):
    """The op types of ``model`` optimized at ``level`` for ``target``, counted."""
    import collections

    import onnx_fuse

    return collections.Counter(n.op_type for n in onnx_fuse.optimize(model, level=level, target=target)
                               .to_proto().graph.node)


def assert_plain_motifs_ok(make, motifs, precision: str) -> None:
    """The first plain case of each motif of ``make`` (make_s37_case ...) matches at O3 ort / onnx after conversion
    to ``precision`` (fp16 / bf16)."""
    from fuzz_differential import fuzz_case   # tools/ on sys.path (the fuzz tests put it there)

    for motif in motifs:
        results, _, _ = fuzz_case(motif_case(make, motif, plain=True), [3], ["ort", "onnx"], precision=precision)
        assert all(r["cls"] == "ok" for r in results), [(motif, r["cls"], r["detail"][:200]) for r in results]


def assert_fuzz_ok(case, levels, targets=("ort", "onnx", "trt")) -> None:
    """Every run of fuzz_differential.fuzz_case(case, levels, targets) is ok; the others listed when not."""
    from fuzz_differential import fuzz_case   # tools/ on sys.path (the fuzz tests put it there)

    results, _, _ = fuzz_case(case, levels, list(targets))
    assert all(r["cls"] == "ok" for r in results), \
        [(case.seed, r["level"], r["target"], r["cls"], r["detail"][:200]) for r in results]


def assert_same_case(a, b) -> None:
    """Two fuzz cases made from one seed are the same case: the model's bytes, its feeds (names and values) and
    every other-shape feed set."""
    import numpy as np

    assert a.model.SerializeToString() == b.model.SerializeToString()
    assert a.feeds.keys() == b.feeds.keys() and all(np.array_equal(a.feeds[k], b.feeds[k]) for k in a.feeds)
    assert len(a.alt_feeds) == len(b.alt_feeds)
    for x, y in zip(a.alt_feeds, b.alt_feeds):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
