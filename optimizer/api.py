"""The Python API: ``optimize(model, ...) -> OptimizeResult``.

Data flow: load (lazy external weights) -> stages of passes for the level and target (see
levels.py) -> validate (checker; ORT loads it when verifying) -> optional numeric verify ->
``result.save(path)`` writes atomically.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import onnx
import onnx_ir as ir

from onnx_fuse.errors import InternalError, UserError
from onnx_fuse.graph_order import as_ort_domain
from onnx_fuse.levels import DEFAULT_LEVEL, DEFAULT_TARGET, Stage, build_stages, check_level_target
from onnx_fuse.model_io import load_model, save_model
from onnx_fuse.passes._infra import PassRecord, count_nodes, run_pass, run_to_fixed_point
from onnx_fuse.report import Report, op_histogram
from onnx_fuse.structure_check import check_structure, skeleton_from_ir

ModelSource = str | os.PathLike | bytes | onnx.ModelProto | ir.Model
#: ``rules=`` / ``disable=``: one name (or path) or a list of them (levels.as_list).
Names = str | os.PathLike | Sequence[str | os.PathLike]


@dataclasses.dataclass
class OptimizeResult:
    """The optimized model (onnx-ir), its report, and where the original came from."""

    model: ir.Model
    report: Report
    source: ModelSource | None = None

    def save(self, path: str | os.PathLike, *, external_data: bool | None = None,
             force: bool = False) -> list[Path]:
        """Save atomically; refuses to overwrite the input model or the weights it reads, and
        refuses a model that failed verification (VerificationError) unless ``force``."""
        if not self.report.passed and not force:
            from onnx_fuse.errors import VerificationError

            raise VerificationError(f"{path}: not written: the optimized model failed verification "
                                    f"({self.report.verify_failure}); save(..., force=True) writes it "
                                    "anyway")
        if isinstance(self.source, (str, os.PathLike)):
            if Path(path).resolve() == Path(self.source).resolve():
                raise UserError(f"{path}: output would overwrite the input model; choose another name")
        return save_model(self.model, path, external_data=external_data)

    def to_proto(self) -> onnx.ModelProto:
        return ir.to_proto(self.model)


def _validate(model: ir.Model) -> None:
    """The ONNX checker on the optimized graph's structure (weights are not copied)."""
    try:
        skeleton = skeleton_from_ir(model)
        as_ort_domain(skeleton)  # ORT's default-domain ops an O1 run keeps (graph_order.py)
        check_structure(skeleton)
    except onnx.checker.ValidationError as exc:
        raise InternalError(f"optimized model fails the ONNX checker: {str(exc).splitlines()[0]}") from exc


def _run_stage(stage: Stage, work: ir.Model, report: Report,
               on_record: Callable[[PassRecord], None] | None = None) -> None:
    if stage.fixed_point:
        report.passes += run_to_fixed_point(stage.passes, work, on_record=on_record)
    else:
        for p in stage.passes:
            record = run_pass(p, work)
            report.passes.append(record)
            if on_record:
                on_record(record)
    for p in stage.passes:
        reason = getattr(p, "stats_reason", None)
        if reason:
            report.warnings.append(f"{getattr(p, 'display_name', p)}: {reason}")
        report.warnings.extend(getattr(p, "plugin_notes", ()))


def _local_checkers(stages: Sequence[Stage], seed: int) -> list:
    """Turn on the per-rewrite numeric check in every rewrite pass of ``stages``."""
    from onnx_fuse.rewrite import RewritePass
    from onnx_fuse.rewrite._local_check import LocalChecker

    checkers = []
    for stage in stages:
        for p in stage.passes:
            if isinstance(p, RewritePass):
                p.local_check = LocalChecker(seed)
                checkers.append(p.local_check)
    return checkers


def _rewrite_checks(checkers: Sequence, report: Report, work: ir.Model) -> dict:
    """Merged per-rewrite check counts; each rolled-back rewrite also becomes a warning."""
    from onnx_fuse.rewrite._local_check import CheckStats

    total = CheckStats()
    for c in checkers:
        total.merge(c.stats_for(work))
    for f in total.failed:
        what = f"kept ({f['kept']})" if "kept" in f else "rolled back"
        report.warnings.append(f"rule {f['rule']} at {f['node']!r} failed its numeric check, "
                               f"{what}: {f['reason']}")
    return total.to_dict()


def _float32_plugin_warnings(model: ir.Model) -> list[str]:
    """The plugin kernels are fp16 / bf16 only (docs/tensorrt.md): float32 plugin ops left in a
    -O4 trt result without --precision (asked for with float32_plugins, or in the input model)
    run in the NumPy reference and verify, but TensorRT cannot build them. Said once per op type."""
    from onnx_fuse.plugin_ids import PLUGIN_DOMAIN

    counts: dict[str, int] = {}
    for node in model.graph.all_nodes():
        if node.domain == PLUGIN_DOMAIN and node.inputs and node.inputs[0] is not None \
                and node.inputs[0].dtype == ir.DataType.FLOAT:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return [f"{n} {op} with float32 inputs: TensorRT cannot build them (the plugin kernels take fp16 / "
            f"bf16); optimize with --precision fp16 or bf16" for op, n in sorted(counts.items())]


def check_opset(opset: int | None) -> None:
    """``opset=`` is None or an int from 7 (the oldest opset onnx-fuse reads) to the newest onnx knows."""
    if opset is None:
        return
    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral) or not 7 <= opset <= newest:
        raise UserError(f"opset must be an integer from 7 to {newest} (the newest the installed onnx "
                        f"knows), got {opset!r}")


def _check_model_opset(model: ir.Model, opset: int | None) -> None:
    """A model above the ceiling would have to be converted down, which onnx-fuse never does."""
    if opset is None:
        return
    current = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if current is not None and current > opset:
        raise UserError(f"the model is opset {current}, above --opset {opset}: onnx-fuse never converts "
                        "a model down; convert it first or drop --opset")


def prepare_for_fusion(model: ModelSource, *, level: int = DEFAULT_LEVEL, target: str = DEFAULT_TARGET,
                       rules: Names = (), disable: Names = ()) -> ir.Model:
    """A copy of ``model`` as optimize()'s fusion stage sees it: every stage before "fusion"
    (shape inference, cleanup, the target's pre-fusion passes such as its opset upgrade) applied.
    ``rules explain`` matches on this. Below level 2 (no fusion) it is the fully cleaned model."""
    check_level_target(level, target)
    work = load_model(model)
    report = Report(level=level, target=target)
    for stage in build_stages(level, target, rule_files=rules, disable=disable):
        if stage.name == "fusion":
            break
        _run_stage(stage, work, report)
    return work


def _bind_query_length(exc: UserError, load: Callable[[], ir.Model], refused: ir.Model,
                       shapes: Mapping[str, tuple[int, ...]] | None, report: Report,
                       run_stages: Callable[[ir.Model], list]) -> tuple[ir.Model, list]:
    """fp8 pools on a graph whose query length is symbolic: bind a symbol that ``shapes`` sets to
    1 in the original's inputs (as editing the export would; the others stay symbolic, also a
    batch of 1) and optimize again, one symbol at a time, batch-like symbols last; else the
    one-line error says which ``--shape`` would."""
    from onnx_fuse.passes.kv_cache_fp8 import (DecodeOnlyError, bind_input_dim,
                                               query_length_candidates)

    ones, rest, bound = query_length_candidates(load(), shapes)
    failed = []
    for symbol in ones:
        work = load()
        bind_input_dim(work, symbol, 1)
        report.passes.clear()
        report.warnings.clear()
        try:
            checkers = run_stages(work)
        except UserError as other:   # e.g. a batch of 1 that the paged rewrite then refuses
            failed.append(f"--shape {symbol}=1" + ("" if isinstance(other, DecodeOnlyError)
                                                   else f" ({other})"))
            continue
        report.warnings.append(f"--shape {symbol}=1 fixed the query length in the model's inputs "
                               "(fp8 pools are decode-only)")
        return work, checkers
    if ones:
        hint = f"; {', '.join(failed)} did not fix it"
    else:
        left = {d.value for v in refused.graph.inputs for d in (v.shape or ())
                if isinstance(d, ir.SymbolicDim)}
        rest = [s for s in rest if s in left] or rest
        given = [f"{s}={bound[s]}" for s in rest if s in bound]
        hint = (f", or bind that dim: --shape {rest[0]}=1 (symbolic input dims: {', '.join(rest)}"
                + (f"; --shape gives {', '.join(given)}" if given else "") + ")") if rest else ""
    raise DecodeOnlyError(f"{exc}{hint}") from None


def optimize(model: ModelSource, *, level: int = DEFAULT_LEVEL, target: str = DEFAULT_TARGET,
             rules: Names = (), disable: Names = (), verify: bool = False,
             verify_inputs: str | Mapping | None = None, shapes: Mapping[str, tuple[int, ...]] | None = None,
             seed: int = 0, on_record: Callable[[PassRecord], None] | None = None,
             precision: str | None = None, base_dir: str | os.PathLike | None = None,
             kv_cache_dtype: str | None = None, float32_plugins: bool = False,
             opset: int | None = None) -> OptimizeResult:
    """Optimize ``model`` (path, bytes, ModelProto or ir.Model) and return the result.

    ``base_dir``: the folder of the weight files of a ModelProto or onnx-ir model with external
    data (a path knows its folder); without it such a model is refused, never resolved against
    the current directory.

    The input is never modified. ``rules`` are extra YAML rule files, one path or a list (they
    can override built-in rules by name); ``disable`` names rules or passes to skip, one name or
    a list (an unknown name is a UserError). With ``verify`` the result is compared with
    the original in ONNX Runtime and the report says PASSED or FAILED. ``precision`` ("fp16" or
    "bf16") converts weights and compute last, keeping fp32 islands (docs/precision.md); verify
    then uses that precision's tolerance, and runs bf16 with emulated bf16 storage in ORT.
    ``kv_cache_dtype="fp8"`` (with level 4, target "trt") makes the paged KV pools float8e4m3fn
    with per-layer scale inputs ``kv_scale_{k,v}.N`` (passes/kv_cache_fp8.py, docs/paged_kv.md);
    ``verify`` feeds the original's past rounded to e4m3 and compares at e4m3's tolerance; the
    fp8 pools are decode-only, so a symbolic query length is fixed at 1 when ``shapes`` binds it
    to 1 (``{"sequence": (1,)}`` or a full input shape), the report says so.

    ``opset``: a ceiling on the output's default-domain opset. By default a model below opset 23 is
    raised to 23 when a fused op needs it (Attention-23, RMSNormalization-23...); with ``opset=N``
    it is raised to N at most, the rules gated above N do not fire, and attention below 23 is
    lowered to plain MatMul / Softmax ops (docs/rules.md, "Targets, levels, opsets"). A model
    already above N is refused (onnx-fuse never converts down).

    At level 4, target "trt", without ``precision``, float32 attention keeps TensorRT's own ops
    (Attention-23, the contiguous KV cache): the plugin ops' kernels take fp16 / bf16, and the
    report says how many matches stayed. ``float32_plugins=True`` makes the plugin ops on float32
    anyway, for checking that form against the original at float32 tolerance (the NumPy reference
    runs it; TensorRT cannot build it).
    """
    check_level_target(level, target)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise UserError(f"seed must be an integer >= 0 (numpy's generators take no other), got {seed!r}")
    from onnx_fuse.verify import check_feeds, check_shapes

    if not isinstance(float32_plugins, bool):
        raise UserError(f"float32_plugins must be True or False, got {float32_plugins!r}")
    shapes, verify_inputs = check_shapes(shapes), check_feeds(verify_inputs)
    if verify_inputs is not None and not verify:   # the caller expects a verification
        raise UserError("--inputs (verify_inputs=) feeds --verify (verify=True), which is off: "
                        "nothing would read them")
    check_opset(opset)
    report = Report(level=level, target=target)
    t0 = time.perf_counter()
    work = load_model(model, base_dir=base_dir)
    _check_model_opset(work, opset)
    report.seconds["load"] = time.perf_counter() - t0
    report.nodes_before = count_nodes(work)
    report.ops_before = dict(op_histogram(work))

    t1 = time.perf_counter()

    def run_stages(work: ir.Model) -> list:
        stages = build_stages(level, target, rule_files=rules, disable=disable, precision=precision,
                              kv_cache_dtype=kv_cache_dtype, float32_plugins=float32_plugins, opset=opset)
        checkers = _local_checkers(stages, seed) if verify else []
        for stage in stages:
            _run_stage(stage, work, report, on_record)
        return checkers

    from onnx_fuse.passes.kv_cache_fp8 import DecodeOnlyError

    try:
        checkers = run_stages(work)
    except DecodeOnlyError as exc:
        work, checkers = _bind_query_length(exc, lambda: load_model(model, base_dir=base_dir),
                                            work, shapes, report, run_stages)
    report.seconds["passes"] = time.perf_counter() - t1
    report.nodes_after = count_nodes(work)
    report.ops_after = dict(op_histogram(work))
    if target == "trt" and precision is None:
        report.warnings.extend(_float32_plugin_warnings(work))

    t2 = time.perf_counter()
    _validate(work)
    report.seconds["validate"] = time.perf_counter() - t2
    if verify:
        from onnx_fuse.verify import verify as run_verify

        t3 = time.perf_counter()
        # A path is handed over as it is: ORT then reads its weights from their files.
        original = model if isinstance(model, (str, os.PathLike)) else load_model(model, base_dir=base_dir)
        candidate = work
        if precision == "bf16":
            from onnx_fuse.passes.precision import emulate_bf16

            candidate = emulate_bf16(ir.to_proto(work))
        # a length traced-lengths pinned: the model runs at no other (the user's --shape first)
        from onnx_fuse.passes.traced_lengths import pinned_lengths

        pinned = {} if verify_inputs is not None else {
            s: v for s, v in pinned_lengths(report.passes).items() if s not in (shapes or {})}
        # the precision's tolerance per output, not atol/rtol: those would replace fp8 pools' bound
        report.verify = run_verify(original, candidate, inputs=verify_inputs,
                                   shapes={**(shapes or {}), **{s: (v,) for s, v in pinned.items()}} or None,
                                   seed=seed, precision=precision, ort_runtime=target != "trt")
        if pinned:
            said = ", ".join(f"{s} = {v}" for s, v in pinned.items())
            report.verify.setdefault("notes", []).insert(0, (
                f"traced lengths: fed {said}, the length the model runs at (traced-lengths pinned it; "
                "--shape SYMBOL=N feeds another)"))
        report.verify["rewrites"] = _rewrite_checks(checkers, report, work)
        report.seconds["verify"] = time.perf_counter() - t3
    return OptimizeResult(work, report, model if isinstance(model, (str, os.PathLike)) else None)
