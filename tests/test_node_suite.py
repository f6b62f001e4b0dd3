"""The ONNX backend node tests (shipped with the onnx package) still pass after optimization.

Every case that ONNX Runtime passes on the unoptimized model (graph optimizations off) must pass
after ``onnx_fuse.optimize`` at O1, and at O2 and O3 for each target, with the optimized model run
the way users run it: ORT with its DEFAULT graph optimizations on. (A failure there counts only
when ORT's default optimizations pass the original too.) The ORT baseline runs once per case and
is reused. Cases ORT itself fails (unsupported ops, known ORT deviations, random ops) are excluded
automatically; the ones excluded by hand are in EXCLUDED with a reason, and a test checks that the
optimizer refuses exactly those the way the reason says. Inputs and expected outputs are the cases'
own test data.

The cases are checked in ``SLICES`` slices (every ``SLICES``-th case of the loader's order), each level /
target / slice one test: the CI's pytest-xdist workers take them as separate units, and a worker
computes the ORT baseline of only the slices it runs (cached per process, shared by its levels and
targets). The per-case failure lines are the same as for one unsliced test.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import warnings

import numpy as np
import onnx
import pytest

from onnx_fuse.levels import TARGETS

# Cases excluded by hand, with the reason. Automatic exclusions (ORT fails the original) are
# counted in the fixture, not listed.
_OPSET_1 = ("opset 1 is older than the oldest opset onnx-fuse accepts (7; README, 'Limits'): the "
            "loader refuses it with a one-line error instead of converting it")
EXCLUDED: dict[str, str] = {"test_not_2d": _OPSET_1, "test_not_3d": _OPSET_1, "test_not_4d": _OPSET_1}

#: How many slices each level / target's check is split into (separate tests, for the xdist workers).
SLICES = 4


@dataclasses.dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: list
    rtol: float
    atol: float
    full_check: bool = True  # False where onnx's own full check rejects the original (test_mvn)
    # Verdicts (ORT default optimizations on) by digest of the serialized model: the same bytes
    # behave the same in ORT, so a result identical to an already checked one (O2 with no rule
    # firing equals O1) reuses the verdict instead of running ORT again.
    verdicts: dict = dataclasses.field(default_factory=dict)
    original_with_ort_optimizations: str | None = "unknown"


def _digest(model: onnx.ModelProto) -> str:
    return hashlib.sha1(model.SerializeToString(deterministic=True)).hexdigest()


def _tensor_io(data_sets) -> bool:
    return all(isinstance(a, np.ndarray) for ins, outs in data_sets for a in list(ins) + list(outs))


def _run_ort(model, inputs, *, ort_optimizations: bool = False) -> list[np.ndarray]:
    from onnx_fuse.verify import make_session

    sess = make_session(model, ort_optimizations=ort_optimizations)
    names = [i.name for i in sess.get_inputs()]
    feeds = dict(zip(names, inputs))
    return sess.run(None, feeds)


def _matches(outputs, expected, rtol, atol) -> str | None:
    """None when every output matches the reference data the way onnx's backend runner checks."""
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (got, ref) in enumerate(zip(outputs, expected)):
        got = np.asarray(got)
        if got.dtype != ref.dtype and not (ref.dtype == object or got.dtype == object):
            return f"output {i}: dtype {got.dtype} != {ref.dtype}"
        if got.shape != ref.shape:
            return f"output {i}: shape {got.shape} != {ref.shape}"
        if ref.dtype == object or not np.issubdtype(ref.dtype, np.number) and ref.dtype != np.bool_:
            if not np.array_equal(got, ref):
                return f"output {i}: values differ"
            continue
        try:
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as exc:
            return f"output {i}: " + str(exc).strip().splitlines()[2 if len(str(exc).splitlines()) > 2 else 0]
    return None


def _passes(model, case: Case, *, ort_optimizations: bool = False) -> str | None:
    for inputs, outputs in case.data_sets:
        try:
            got = _run_ort(model, inputs, ort_optimizations=ort_optimizations)
        except Exception as exc:
            return f"ORT: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        why = _matches(got, list(outputs), case.rtol, case.atol)
        if why:
            return why
    return None


@functools.cache
def _raw_cases() -> tuple:
    """The onnx package's node test cases, in the loader's order (loaded once per process)."""
    from onnx.backend.test import loader

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(loader.load_model_tests(kind="node"))


@functools.cache
def _baseline_slice(k: int) -> dict:
    """Slice ``k`` of the cases (every SLICES-th from the k-th) that ORT passes unoptimized (computed
    once per process), and why the slice's others are out."""
    raw = _raw_cases()[k::SLICES]
    good: list[Case] = []
    out: dict[str, str] = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for tc in raw:
            if tc.name in EXCLUDED:
                out[tc.name] = EXCLUDED[tc.name]
                continue
            if tc.model is None or not tc.data_sets:
                out[tc.name] = "no inline model or data"
                continue
            if not _tensor_io(tc.data_sets):
                out[tc.name] = "sequence/optional inputs or outputs"
                continue
            case = Case(tc.name, tc.model, tc.data_sets, tc.rtol, tc.atol)
            why = _passes(case.model, case)
            if why:
                out[tc.name] = "ORT fails the original: " + why
                continue
            try:
                onnx.checker.check_model(case.model, full_check=True)
            except Exception:
                case.full_check = False
            good.append(case)
    return {"cases": good, "excluded": out, "total": len(raw)}


@pytest.fixture(scope="module")
def baseline() -> dict:
    """The cases ORT passes unoptimized (every slice's), and why the others are out."""
    parts = [_baseline_slice(k) for k in range(SLICES)]
    return {"cases": [c for p in parts for c in p["cases"]],
            "excluded": {n: why for p in parts for n, why in p["excluded"].items()},
            "total": sum(p["total"] for p in parts)}


def _check_level(baseline: dict, level: int, target: str, label: str = "") -> None:
    from onnx_fuse import optimize
    from onnx_fuse.errors import UserError

    failures = []
    for case in baseline["cases"]:
        try:
            result = optimize(case.model, level=level, target=target)
        except UserError as exc:  # only the EXCLUDED cases may be refused, and they never get here
            failures.append(f"{case.name}: refused: {exc}")
            continue
        except Exception as exc:
            failures.append(f"{case.name}: optimize raised {type(exc).__name__}: {exc}")
            continue
        proto = result.to_proto()
        key = _digest(proto)
        if key not in case.verdicts:
            try:
                onnx.checker.check_model(proto, full_check=case.full_check)
                case.verdicts[key] = _passes(proto, case, ort_optimizations=True)
            except Exception as exc:
                case.verdicts[key] = f"checker: {str(exc).splitlines()[0]}"
        why = case.verdicts[key]
        if why and case.original_with_ort_optimizations == "unknown":
            case.original_with_ort_optimizations = _passes(case.model, case, ort_optimizations=True)
        if why and case.original_with_ort_optimizations is None:
            failures.append(f"{case.name}: {why}")
    assert not failures, (
        f"O{level}/{target}{label}: {len(failures)} of {len(baseline['cases'])} cases broke:\n"
        + "\n".join(failures))


def test_suite_is_real(baseline):
    """Guard against a suite that silently tests nothing."""
    assert baseline["total"] >= 1800
    assert len(baseline["cases"]) >= 1000, f"only {len(baseline['cases'])} runnable cases"


def test_slices_cover_every_case_once():
    """The slices partition the loader's cases: none checked twice, none left out."""
    names = [tc.name for k in range(SLICES) for tc in _raw_cases()[k::SLICES]]
    assert sorted(names) == sorted(tc.name for tc in _raw_cases()) and len(set(names)) == len(names)


def test_o1_pipeline_is_target_independent():
    # O1 is run once below (target ort); this is what makes that enough for all targets.
    from onnx_fuse.levels import build_stages

    shapes = {t: [[type(p).__name__ for p in s.passes] for s in build_stages(1, t)] for t in TARGETS}
    assert all(v == shapes["ort"] for v in shapes.values())


def _label(k: int) -> str:
    return f" (slice {k + 1} of {SLICES})"


@pytest.mark.parametrize("k", range(SLICES))
def test_node_suite_o1(k):
    _check_level(_baseline_slice(k), 1, "ort", _label(k))


@pytest.mark.parametrize("k", range(SLICES))
@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("target", TARGETS)
def test_node_suite_o2_o3(level, target, k):
    _check_level(_baseline_slice(k), level, target, _label(k))


def test_excluded_cases_are_refused_as_documented():
    """The hand exclusions are real: the loader refuses them, in one line, for the stated reason."""
    from onnx.backend.test import loader

    from onnx_fuse import optimize
    from onnx_fuse.errors import UserError

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = {t.name: t for t in loader.load_model_tests(kind="node") if t.name in EXCLUDED}
    assert sorted(cases) == sorted(EXCLUDED)
    for name, tc in cases.items():
        with pytest.raises(UserError, match="opset 1 is too old") as info:
            optimize(tc.model, level=1)
        assert "\n" not in str(info.value)
