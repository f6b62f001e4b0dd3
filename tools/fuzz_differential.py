"""Differential fuzzer: random valid ONNX graphs (tools/fuzz_motifs.py) x levels x targets, each
optimized with onnx_fuse.optimize and compared with the original in ONNX Runtime.

The original runs with ORT's graph optimizations off; the optimized model with ORT's defaults
on, as users run it (graphs holding onnx_fuse ops run through onnx_fuse.reference.ort_ops, like
--verify). Each run is classified:

  ok             same output names, dtypes, shapes and values (per-dtype tolerance)
  wrong          an output's values differ
  crash          optimize raised something other than a UserError
  refused-input  optimize refused the input with a UserError (fine; a crash where the built-in rules do not load)
  ort-refused    ORT cannot load or run the optimized model
  signature      an output's name, dtype, rank or shape changed (declared or at run time)
  trt-refused    (target trt) `onnx-fuse check-trt` accepts the original but not the optimized
                 model (TensorRT's parser support and our plugin contracts, checked without TensorRT)
  timeout        one graph's runs took longer than --graph-timeout (optimize or a check hung)
  opset          a pinned run (below) whose output's default-domain opset is above its pin
  invalid-graph  ORT cannot run the original (a generator bug; not counted as a failure)
  (paged)        (O4 trt) where the paged-KV rewrite fired (docs/paged_kv.md), the pools replace
                 the past inputs and present outputs: as verify does, the original's past is fed
                 as shuffled pool blocks and each present output compared with its pool read back
                 (tools/fuzz_paged.py); the run is then ok/wrong/... like any other, and the
                 summary counts such runs under ``paged_runs``. A case whose spec asks for fp8 KV
                 gets one more O4 trt run with kv_cache_dtype="fp8" (target ``trt+fp8kv``, under
                 --precision too), compared at e4m3's bound added to the run's own, and each fp8
                 attention against the exact one of its own inputs (verify's checks)
  ort-itself     a failure that ORT's own graph optimizations cause: the optimized model is right
                 with them off (they break or change the original too, or only ours: ORT's
                 doing, not ours; listed and saved, not counted as a failure). A run that fails
                 with them on is always judged again with them off, and every class below is
                 decided there (ORT 1.32 changes a DequantizeLinear weight's MatMul by ~1e-2)
  padded-rows    (O4 trt) a FusedAttention model that differs only while a mask pads some rows and
                 matches with every 0/1 mask input all ones: the plugin's contract writes zeros in
                 padded query rows, where the original computes values nobody reads (verify feeds
                 unpadded masks for the same reason; listed and saved, not counted as a failure);
                 also (any level) an original with ORT's GroupQueryAttention whose run agrees on every
                 kept row of a right-padded prompt: ORT's own float16 and float32 kernels fill the
                 padding rows differently (_contrib_gqa_padded_rows_only)
  left-padded    (O4 trt) the same, but a mask input is padded on the left (or has holes) and the
                 rows it keeps differ too: FusedAttention's seq_lens only counts, so its contract
                 expects right padding (docs/ops.md); listed and saved, not counted as a failure,
                 so that a left-padding-safe plugin can be checked by replaying them
  half-masked-rows  a float16 / bfloat16 model that differs from the original only on query rows
                 with no kept key (a 0/1 mask row all zeros up to the row's own position: left
                 padding under a causal mask, or a fully masked sequence; or a batch row a 4-D key
                 mask input [B, 1, 1, T] leaves no key, _key_mask_4d_readings): the original's float16
                 Adds absorb the scores into the mask's floor (uniform weights, or 32-wide steps of
                 s + bias), the fused ops add in float32 (docs/holdout.md "Masked rows (session
                 14)", docs/patterns.md: such a row has no exact form); listed, not a failure
  nan-rows       ok by verify's rule for rows the original has NaN throughout (verify.nan_rows: a
                 query row with no kept key, a -inf fill on every key and no sdpa IsNaN guard, is
                 0/0 there), where the optimized model gives numbers (Attention-23 at onnx and trt
                 gives 0): undefined output, which verify and the per-rewrite check accept too
                 (compare uses verify.compare_arrays, the one source of that rule); NaN anywhere
                 else still has to sit in the same places. Listed and saved, not a failure
  all-nan        an output the original has NaN everywhere (every query row keeps no key, e.g. a
                 batch of one fully masked sequence) where the optimized model gives numbers, every
                 other output matching: no defined value to compare. verify refuses such a feed set
                 (nothing left to compare is no pass), the fuzzer draws them at random: listed and
                 saved, not a failure

O1 runs no target-specific pass (levels.py), so it is optimized once per graph and its result
stands for every target. Every failing case is saved (original.onnx, optimized.onnx, feeds.npz,
info.json; feeds_alt<i>.npz for a case run on more than one feed set, such as both values of an
If's condition) under OUT/failures/<class>/seed<S>_O<L>_<target>/; OUT/summary.json has the counts.
--pretool slim|ort1|ort2 first runs every graph through onnxslim or ONNX Runtime's offline
optimizer (basic / extended), as users often do, and fuzzes what that tool wrote (a tool that fails,
changes the inputs or the values leaves the graph as generated, with a trap saying so).
The summary is rewritten (atomically) every 100 graphs, so a run that is killed keeps its counts;
``complete`` says whether every graph asked for ran. With --jobs N the graphs run in N worker
processes, in completion order; --time-budget stops taking new graphs after that many seconds
(the summary then counts the graphs that finished, ``graphs``, out of ``count``).
--pin-share P (default 0.35): that share of the O2-O4 runs is optimized with a pinned output opset,
optimize(opset=N), N drawn from the model's own opset to 22 (tools/fuzz_opset.py: rules gated above
N stay off, attention below 23 takes lower_plain.yaml), judged like the others; a result's
``opset`` names its pin, the summary counts them under ``pinned_runs`` / ``pinned_rule_fires``.
--precision fp16|bf16 optimizes with that precision conversion too (keep_io_types: the outputs
stay float32) and compares every float output at the low type's tolerance (paged runs' pools
and logits too); bf16 models (paged ones too) run through ``emulate_bf16`` (ORT's CPU provider
has no bf16 MatMul), as ``--verify`` runs them.

    python tools/fuzz_differential.py --count 200 --seed 0 [--levels 1,2,3,4]
        [--targets ort,onnx,trt] [--jobs 1] [--start 0] [--rules my.yaml] [--out fuzz_out]
        [--time-budget SECONDS] [--graph-timeout 300] [--precision fp16|bf16] [--pretool slim|ort1|ort2]
        [--pin-share 0.35]
    python tools/fuzz_differential.py --replay fuzz_out/failures/signature/seed123_O3_trt ...
    python tools/fuzz_differential.py --rerun old_out/summary.json --out new_out   # failed graphs
                                                          # (and left-padded ones)

Exit status: 0 when no run failed, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_opset  # noqa: E402
import fuzz_paged  # noqa: E402
from fuzz_motifs import make_case  # noqa: E402

FAIL_CLASSES = ("wrong", "crash", "ort-refused", "signature", "trt-refused", "timeout", "opset")
CLASSES = ("ok", "refused-input", "invalid-graph", "ort-itself", "padded-rows", "left-padded", "half-masked-rows",
           "nan-rows", "all-nan", *FAIL_CLASSES)
#: the label of a run with kv_cache_dtype="fp8" (O4 trt, a decoder case whose spec asks for it)
FP8_TARGET = "trt+fp8kv"
#: listed and saved, but not failures
NOTED_CLASSES = ("invalid-graph", "ort-itself", "padded-rows", "left-padded", "half-masked-rows", "nan-rows",
                 "all-nan")
# atol is scaled by the output's largest magnitude: fused kernels reorder float sums.
TOLERANCE = {np.dtype(np.float32): (1e-4, 1e-3), np.dtype(np.float16): (1e-2, 2e-2),
             np.dtype(np.float64): (1e-9, 1e-7), np.dtype(ml_dtypes.bfloat16): (5e-2, 5e-2)}
#: --precision: the type every float output is compared at (its cone computes in it)
PRECISION_DTYPE = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


def case_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:400] if text else ''}"


def _session(model: onnx.ModelProto, ort_optimizations: bool):
    from onnx_fuse.verify import make_session

    return make_session(model, threads=1, ort_optimizations=ort_optimizations)


def _signature(vi: onnx.ValueInfoProto):
    t = vi.type.tensor_type
    dims = None
    if t.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return vi.name, t.elem_type, dims


def signature_diff(original: onnx.ModelProto, optimized: onnx.ModelProto) -> str | None:
    """The first declared output whose name, dtype, rank or static dims changed."""
    a = [_signature(v) for v in original.graph.output]
    b = [_signature(v) for v in optimized.graph.output]
    if [x[0] for x in a] != [x[0] for x in b]:
        return f"output names {[x[0] for x in a]} -> {[x[0] for x in b]}"
    for (name, ta, da), (_, tb, db) in zip(a, b):
        if ta and tb and ta != tb:
            return f"output {name!r}: dtype {ta} -> {tb}"
        if da is not None and db is not None:
            if len(da) != len(db):
                return f"output {name!r}: rank {len(da)} -> {len(db)}"
            for i, (x, y) in enumerate(zip(da, db)):
                if x is not None and y is not None and x != y:
                    return f"output {name!r}: dim {i} {x} -> {y}"
    return None


_FLOAT_RANK = {onnx.TensorProto.DOUBLE: 0, onnx.TensorProto.FLOAT: 1, onnx.TensorProto.FLOAT16: 2,
               onnx.TensorProto.BFLOAT16: 2}
_TOL_DTYPE = {0: np.dtype(np.float64), 1: np.dtype(np.float32), 2: np.dtype(np.float16)}


def loosest_float_dtypes(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """Per graph output, the least precise float type computed anywhere in its cone: a float32
    output read from fp16 math (a norm's float32 island after fp16 attention) carries fp16 rounding,
    which a fused kernel legitimately rounds differently, so it is compared at fp16 tolerance."""
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - then every output keeps its own dtype's tolerance
        return {}
    g = model.graph
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in (*g.input, *g.value_info, *g.output)}
    elem.update({t.name: t.data_type for t in g.initializer})
    producer = {o: n for n in g.node for o in n.output}
    out: dict[str, np.dtype] = {}
    for o in g.output:
        worst, seen, todo = -1, set(), [o.name]
        while todo:
            v = todo.pop()
            if v in seen or not v:
                continue
            seen.add(v)
            worst = max(worst, _FLOAT_RANK.get(elem.get(v, 0), -1))
            node = producer.get(v)
            if node is not None:
                todo.extend(node.input)
        if worst >= 0:
            out[o.name] = _TOL_DTYPE[worst]
    return out


def base_tolerance(name: str, ref, loosest: dict[str, np.dtype] | None = None,
                   steps: dict[str, float] | None = None) -> tuple[float, float]:
    """(atol, rtol) ``compare`` holds output ``name`` to, atol already times its magnitude (the
    largest finite |value|, at least 1): the base that fp8 pools add e4m3's bound to. ``steps``
    (``quantized_steps``): an output the original computes straight from a DequantizeLinear has
    one quantization step more, as verify gives it (a last-bit difference before the
    QuantizeLinear, a reordered sum or a 16-bit compute op under --precision, flips a rounding)."""
    r = np.asarray(ref)
    tol_dtype = (loosest or {}).get(name, r.dtype)
    if r.dtype.kind == "f" and tol_dtype.itemsize > r.dtype.itemsize:
        tol_dtype = r.dtype  # never tighter than the output's own type
    atol, rtol = TOLERANCE.get(tol_dtype, (1e-4, 1e-3))
    if r.dtype.kind != "f":
        return 0.0, 0.0
    r64 = r.astype(np.float64)
    scaled = atol * max(1.0, float(np.max(np.abs(r64[np.isfinite(r64)]), initial=0.0)))
    return scaled + (steps or {}).get(name, 0.0), rtol


def quantized_steps(original: onnx.ModelProto) -> dict[str, float]:
    """Output name -> the step of the DequantizeLinear the original computes it with
    (verify.dequantized_output_steps, the rule verify applies)."""
    from onnx_fuse.verify import dequantized_output_steps

    return dequantized_output_steps(original)


def compare(names, ref, got, loosest: dict[str, np.dtype] | None = None,
            steps: dict[str, float] | None = None) -> tuple[str, str]:
    """ok / wrong / signature, judged by verify.compare_arrays at the fuzzer's tolerance
    (``base_tolerance``): the same NaN rule as verify, so rows the original has NaN throughout
    take any value and every other NaN must match."""
    from onnx_fuse.verify import compare_arrays, saturate

    for name, r, g in zip(names, ref, got):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape or r.dtype != g.dtype:
            return "signature", f"output {name!r}: run-time {g.dtype}{list(g.shape)}, original {r.dtype}{list(r.shape)}"
        if r.dtype.kind != "f":
            if not np.array_equal(r, g):
                return "wrong", f"output {name!r}: integer values differ"
            continue
        # a float16 run saturates (verify.saturate), once, before the tolerance, which scales with the
        # largest finite reference value
        if (loosest or {}).get(name) == np.float16:
            r, g = (a.astype(r.dtype) for a in saturate(r, g, float(np.finfo(np.float16).max)))
        atol, rtol = base_tolerance(name, r, loosest, steps)
        with np.errstate(invalid="ignore"):   # inf - inf where both are inf: compare_arrays takes it
            diff = compare_arrays(name, r, g, atol, rtol)
        if not diff.passed:
            if diff.reason:
                return "wrong", f"output {name!r}: {diff.reason}"
            return "wrong", f"output {name!r}: max abs diff {diff.max_abs:.3g} (atol {atol:.3g})"
    return "ok", ""


def all_nan_given(names, ref, got, loosest=None, steps=None) -> str:
    """A detail line when the only differences are outputs the original has NaN everywhere (the
    optimized model gives numbers there) and every other output matches; "" otherwise."""
    nan_all = [n for n, r in zip(names, ref)
               if np.asarray(r).dtype.kind == "f" and np.asarray(r).size and np.isnan(np.asarray(r)).all()]
    if not nan_all:
        return ""
    rest = [(n, r, g) for n, r, g in zip(names, ref, got) if n not in nan_all]
    if rest and compare(*zip(*rest), loosest, steps)[0] != "ok":
        return ""
    return f"output {nan_all[0]!r}: the original is NaN everywhere (no query row keeps a key), " \
        "nothing defined to compare"


def nan_rows_given(names, ref, got) -> str:
    """The first output on whose NaN-throughout rows (verify.nan_rows) the optimized model gives
    numbers, as a detail line; "" when there is none (a run ``compare`` found ok is then plain ok)."""
    from onnx_fuse.verify import nan_rows

    for name, r, g in zip(names, ref, got):
        r, g = np.asarray(r), np.asarray(g)
        if r.dtype.kind != "f" or r.shape != g.shape:
            continue
        rows = nan_rows(r.astype(np.float64))
        given = rows & ~np.isnan(g.astype(np.float64))
        if given.any():
            n_rows = int(rows[..., 0].sum()) if r.ndim else 0
            return f"output {name!r}: numbers on {int(given[..., 0].sum())} of the {n_rows} rows " \
                "the original has NaN throughout (undefined output, verify's rule)"
    return ""


def run_one(original: onnx.ModelProto, feeds, ref_out, level: int, target: str, rules=(), loosest=None,
            precision: str | None = None, kv_cache_dtype: str | None = None, alt=(), opset: int | None = None):
    """Optimize and compare; returns (class, detail, optimized proto or None, rule fires).
    ``loosest``: ``loosest_float_dtypes(original)``, computed here when not given; with
    ``precision`` every output is compared at that type's tolerance. ``alt``: more (feeds,
    reference outputs) pairs the optimized model is checked on too (an If's other branch), each
    classified like the first; the first that is not ok decides. ``opset``: optimize's output
    ceiling (tools/fuzz_opset.py); an output above it is class ``opset``."""
    import onnx_fuse
    from onnx_fuse.errors import UserError
    from onnx_fuse.passes.precision import emulate_bf16

    try:
        # float32_plugins: O4 trt keeps exercising the plugin rules on float32 graphs, checked
        # through the NumPy reference at float32 tolerance (the default keeps TensorRT's own ops)
        result = onnx_fuse.optimize(original, level=level, target=target, rules=list(rules),
                                    precision=precision, kv_cache_dtype=kv_cache_dtype, float32_plugins=True,
                                    opset=opset)
        optimized = result.to_proto()
    except UserError as exc:
        from onnx_fuse.rewrite import load_rules

        errors = load_rules(builtin=True)[1]   # the shipped rule files (parsed once per content)
        if errors:   # not the input's fault: our own rule set does not load
            return "crash", f"the built-in rules do not load: {_first_line(exc)}", None, {}
        return "refused-input", _first_line(exc), None, {}
    except Exception as exc:  # noqa: BLE001 - anything else is an optimizer bug
        tb = traceback.format_exc(limit=-3)
        return "crash", _first_line(exc) + "\n" + tb, None, {}
    fires = dict(result.report.rule_fires)
    above = fuzz_opset.above_pin(optimized, opset)
    if above:
        return "opset", above, optimized, fires
    names = [o.name for o in original.graph.output]
    if precision is not None:  # the paged runs too: their pools and logits are in that precision
        loosest = {n: PRECISION_DTYPE[precision] for n in names}
    elif loosest is None:
        loosest = loosest_float_dtypes(original)
    if fuzz_paged.is_paged(optimized):
        # every feed set: a merged decoder's other branch (alt: an empty past) is the paged model
        # with nothing cached, which its resolution to the cache branch assumes
        for i, (run_feeds, run_ref) in enumerate([(feeds, ref_out), *alt]):
            cls, detail = _check_paged(original, optimized, run_feeds, run_ref, kv_cache_dtype == "fp8", loosest,
                                       bf16=precision == "bf16")
            if cls != "ok":
                detail = f"feed set {i}: {detail}" if i else detail
                break
        return cls, detail, optimized, fires
    if kv_cache_dtype is not None:
        return "crash", f"kv_cache_dtype={kv_cache_dtype} accepted but the model is not paged", optimized, fires
    sig = signature_diff(original, optimized)
    if sig:
        return "signature", sig, optimized, fires
    runnable = emulate_bf16(optimized) if precision == "bf16" else optimized
    steps = quantized_steps(original)
    sess = None
    cls, detail, accepted = "ok", "", None
    for i, (run_feeds, run_ref) in enumerate([(feeds, ref_out), *alt]):
        cls, detail, sess = _judge(original, runnable, names, run_feeds, run_ref, loosest, sess, steps=steps)
        if cls != "ok":
            detail = f"feed set {i}: {detail}" if i else detail
        if cls == "nan-rows":   # accepted: the other feed sets still have to pass
            accepted, cls = accepted or detail, "ok"
        elif cls != "ok":
            break
    if cls == "ok" and accepted:
        cls, detail = "nan-rows", accepted
    if cls in ("ok", "nan-rows") and target == "trt":
        refused = _trt_refused(original, optimized)
        if refused:
            return "trt-refused", refused, optimized, fires
    return cls, detail, optimized, fires


def _judge(original, runnable, names, feeds, ref_out, loosest, sess=None, ort_opts: bool = True, steps=None):
    """One feed set's class and detail (and the session, made on the first call): run the
    optimized model with ORT's optimizations on, as users do, and compare. A run that is not ok
    is judged again with them off (``ort_opts``), where our rewrite alone decides: ok there is
    ORT's own doing (ort-itself: its fusions refuse or change the original too, or only ours),
    else the class found there, a difference sorted into FusedAttention's padding contract
    (padded-rows, left-padded), rows with no kept key (half-masked-rows) or ours."""
    try:
        if sess is None:
            sess = _session(runnable, ort_optimizations=ort_opts)
        got = sess.run(names, feeds)
    except Exception as exc:  # noqa: BLE001 - ORT's refusal, whatever its type
        if not ort_opts:
            return "ort-refused", _first_line(exc), sess
        off, off_detail, _ = _judge(original, runnable, names, feeds, ref_out, loosest, ort_opts=False, steps=steps)
        if off == "ok":   # ORT 1.30-1.32's LayerNormFusion binds float and float16 on an fp16 norm
            return "ort-itself", "ORT's optimizations refuse it: " + _first_line(exc), sess
        if off == "ort-refused":
            return off, _first_line(exc), sess
        return off, f"(ORT's optimizations off) {off_detail}", sess
    cls, detail = compare(names, ref_out, got, loosest, steps)
    if cls != "ok" and ort_opts:
        # ORT's optimizations change values on their own (1.32 turns a DequantizeLinear int8
        # weight and its MatMul into MatMulNBits, whose sums differ; the gelu-rank0 trap's
        # [1] -> []): our rewrite is judged with them off
        off, off_detail, _ = _judge(original, runnable, names, feeds, ref_out, loosest, ort_opts=False, steps=steps)
        if off == "ok":
            what = "change the original too" if _ort_itself(original, feeds, ref_out, loosest, steps) else \
                "break the optimized model, which is right without them"
            return "ort-itself", f"ORT's optimizations {what}: {detail}", sess
        return off, off_detail if off_detail.endswith(detail) else f"(ORT's optimizations off) {off_detail}", sess
    # (steps: a DequantizeLinear output may round one step apart on these checks' feeds as on the first)
    if cls == "wrong" and _only_padded_rows_differ(original, runnable, names, feeds, loosest, steps):
        if _left_padded(feeds) and not _kept_rows_match(names, ref_out, got, feeds, loosest, steps=steps):
            return "left-padded", "FusedAttention's seq_lens expects right padding (docs/ops.md): " \
                f"{detail}", sess
        return "padded-rows", f"FusedAttention zeroes padded query rows by contract: {detail}", sess
    if cls == "wrong" and _contrib_gqa_padded_rows_only(original, names, ref_out, got, feeds, loosest, steps):
        return "padded-rows", "ORT's GroupQueryAttention leaves a right-padded prompt's padding rows to its " \
            f"kernels (its float16 and float32 ones differ there): {detail}", sess
    if cls == "ok":
        given = nan_rows_given(names, ref_out, got)
        return ("nan-rows", given, sess) if given else ("ok", "", sess)
    if cls == "wrong" and "NaN positions differ" in detail:
        given = all_nan_given(names, ref_out, got, loosest, steps)
        if given:
            return "all-nan", given, sess
    if cls == "wrong" and _half_precision(loosest, names) and (_mask_feeds(feeds) or _empty_lengths(feeds)) and \
            _kept_rows_match(names, ref_out, got, feeds, loosest, keyless=True, steps=steps):
        return "half-masked-rows", f"only float16 query rows with no kept key differ: {detail}", sess
    if cls == "wrong" and _half_precision(loosest, names):
        for live in itertools.product(*_key_mask_4d_readings(feeds).values()):
            if _kept_rows_match(names, ref_out, got, feeds, loosest, keyless=True, steps=steps, live=list(live)):
                return "half-masked-rows", "only float16 batch rows a 4-D key mask [B, 1, 1, T] leaves no key " \
                    f"differ: {detail}", sess
    return cls, detail, sess


def _half_precision(loosest, names) -> bool:
    return any((loosest or {}).get(n, np.dtype(np.float32)).itemsize == 2 for n in names)


def _check_paged(original, optimized, feeds, ref_out, fp8: bool, loosest, bf16: bool = False) -> tuple[str, str]:
    """The paged-KV rewrite (verify's harness, onnx_fuse.targets.paged_kv_feeds): the original's
    past as shuffled pool blocks, its present outputs compared with the pools read back; fp8 pools
    at e4m3's tolerance (fuzz_paged.compare_fp8). ``bf16`` (--precision bf16): the model runs
    through emulate_bf16 like every bf16 run, its bfloat16 pools fed as float32. A paged model that
    ORT refuses only with its own optimizations on, and that is right with them off, is
    ``ort-itself`` (as for the other runs)."""
    from onnx_fuse.passes.precision import emulate_bf16
    from onnx_fuse.targets import paged_kv_feeds as pk

    names = [o.name for o in original.graph.output]
    slots = {o for _, o in pk.pools(optimized)}
    at = [k for k, o in enumerate(optimized.graph.output) if o.name in slots]
    if len(at) != 2 * sum(n.op_type == "PagedAttention" for n in optimized.graph.node):
        return "signature", "the pools do not take the present outputs' slots"
    total = np.asarray(ref_out[at[0]]).shape[2]
    runnable = emulate_bf16(optimized) if bf16 else optimized
    try:
        ref_feeds, run_feeds = pk.paged_feeds(original, optimized, feeds, total=total,
                                              block_size=fuzz_paged.BLOCK, seed=total, fp8=fp8)
        ref = _session(original, ort_optimizations=False).run(names, ref_feeds)
        if bf16:
            run_feeds = {k: v.astype(np.float32) if v.dtype == ml_dtypes.bfloat16 else v for k, v in run_feeds.items()}
        got = pk.run_paged(_session(runnable, ort_optimizations=True), optimized, run_feeds)
    except Exception as exc:  # noqa: BLE001 - ORT's refusal of the paged model
        refused = "paged: " + _first_line(exc)
        try:   # ORT's own optimizations (emulate_bf16's Casts: "... is not a graph input")?
            got = pk.run_paged(_session(runnable, ort_optimizations=False), optimized, run_feeds)
        except Exception:  # noqa: BLE001 - refused either way: ours
            return "ort-refused", refused
        cls, detail = _paged_verdict(original, optimized, ref, got, run_feeds, total, fp8, loosest, bf16)
        if cls == "ok":
            return "ort-itself", "ORT's optimizations refuse the paged model, which is right without them: " + refused
        return cls, detail
    return _paged_verdict(original, optimized, ref, got, run_feeds, total, fp8, loosest, bf16)


def _paged_verdict(original, optimized, ref, got, run_feeds, total, fp8, loosest, bf16) -> tuple[str, str]:
    from onnx_fuse.targets import paged_kv_feeds as pk

    paired = pk.paired_outputs(original, optimized, ref, got, run_feeds, total)
    if isinstance(paired, str):
        return "signature", "paged: " + paired
    if fp8:   # e4m3's bound on top of the one without fp8 pools (--precision's included)
        bases = {name: base_tolerance(name, r, loosest) for name, r in zip(paired[0], paired[1])}
        cls, detail = fuzz_paged.compare_fp8(*paired, bases, pk.pool_scales(original, optimized, run_feeds))
        if cls == "ok":   # each fp8 attention against the exact one of its own inputs (verify's)
            cls, detail = fuzz_paged.check_fp8_attention(optimized, run_feeds, bf16)
        return cls, detail
    cls, detail = compare(*paired, loosest)
    return cls, ("paged: " + detail if detail else "")


# The plugin kernels take fp16 / bf16 only: the fuzzer asks for the plugin ops on float32 graphs
# (run_one's float32_plugins, which TensorRT cannot build until --precision lowers them; without
# it optimize keeps TensorRT's own ops, docs/tensorrt.md). That asked-for limit is not a fuzz
# failure; every other issue check-trt finds is.
FLOAT32_PLUGIN_LIMIT = "have no fp32 path"


def _trt_refused(original: onnx.ModelProto, optimized: onnx.ModelProto) -> str | None:
    """check-trt's first issue with the optimized model when it accepts the original (the plugins'
    documented float32 limit aside)."""
    from onnx_fuse.plugins.check_trt import check_model

    try:
        after = check_model(optimized)
        if after.supported or not check_model(original).supported:
            return None
    except Exception as exc:  # noqa: BLE001 - check-trt itself broke on our output
        return "check-trt raised " + _first_line(exc)
    issues = [str(i) for i in after.issues if FLOAT32_PLUGIN_LIMIT not in str(i)]
    return issues[0][:400] if issues else None


def _is_padding_mask(v: np.ndarray) -> bool:
    """A 2-D 0/1 input (integer, bool or float: exporters take all three) that pads something."""
    return v.ndim == 2 and v.dtype.kind in "iubf" and v.size > 0 and np.isin(v, (0, 1)).all() and not v.all()


def _mask_feeds(feeds) -> dict[str, np.ndarray]:
    """The padding masks among the feeds, by name (named so: position ids [0, 1] are 0/1 too)."""
    return {k: v for k, v in feeds.items() if "mask" in k.lower() and _is_padding_mask(v)}


def _empty_lengths(feeds) -> dict[str, np.ndarray]:
    """Per-row lengths [B] (an integer input named so: a key mask ``arange(S) < lengths[:, None]`` is made
    from them, AudioFlamingo 3) with a row of length 0, by name: that batch row has no kept key."""
    return {k: v for k, v in feeds.items() if "length" in k.lower() and v.ndim == 1 and v.dtype.kind in "iu"
            and v.size > 0 and (v == 0).any()}


def _key_mask_4d_readings(feeds) -> dict[str, list[np.ndarray]]:
    """The 4-D key masks [B, 1, 1, T] among the feeds (named a mask, as in _mask_feeds), by name, each with the
    readings of which batch rows keep some key: a list of [B] bool arrays (True = the row keeps a key), each with a
    row that keeps none and a row that keeps some (else no row is to blame, or every row is).
    An additive float mask has one reading: 0 keeps a key, a value <= -1e4 (-1e4, finfo.min, -inf) masks it; a mask
    with any other value (a bias) is not read. A bool (or 0 / 1 integer or float: flags the graph compares or casts,
    fuzz50's fuzz_s46 mask4d_every seed 16) mask's polarity is the graph's
    (Where(m, min, s): True = masked; Where(m, s, min): True = kept), not the feed's, so both readings are given: under
    True = kept a row of all False keeps no key, under True = masked a row of all True. A row can only be keyless when
    it is constant, and the classifier takes a reading only when every row it keeps agrees (the rows it drops are
    constant ones). Conservative limit: under the wrong reading a constant all-kept row is taken as keyless, so a
    difference confined to such a row while the padded rows agree would be called half-masked-rows too."""
    out = {}
    for k, v in feeds.items():
        if "mask" not in k.lower() or v.ndim != 4 or v.shape[1:3] != (1, 1) or v.size == 0:
            continue
        rows = v.reshape(v.shape[0], v.shape[3])
        if v.dtype.kind == "b" or (v.dtype.kind in "iuf" and np.isin(v, (0, 1)).all()):
            kept = rows.astype(bool)
            readings = [kept.any(axis=1), (~kept).any(axis=1)]    # True = kept / True = masked
        elif v.dtype.kind == "f" and not np.isnan(rows).any() and ((rows == 0) | (rows <= -1e4)).all():
            readings = [(rows == 0).any(axis=1)]
        else:
            continue
        readings = [live for live in readings if live.any() and not live.all()]
        if readings:
            out[k] = readings
    return out


def _left_padded(feeds) -> bool:
    """Some padding mask row is not ones followed by zeros (left padding, or holes)."""
    for v in _mask_feeds(feeds).values():
        kept = v.astype(bool)
        right = np.arange(v.shape[1])[None, :] < kept.sum(axis=1, keepdims=True)
        if not np.array_equal(kept, right):
            return True
    return False


def _row_keep(shape, masks, tail: bool = False) -> np.ndarray | None:
    """The entries of an output of ``shape`` on query rows the masks [B, S] keep, as a boolean array
    of that shape, or None where no mask lines up: rows on axis 1 ([B, S, ...]) or, for a 4-D
    output whose last axis is not 1, on axis 2 ([B, H, S, T]: attention probabilities or a per-head
    output that is a graph output, fuzz seed 23004 graph 2319559700). Where both fit (H == S), or
    several masks do, the union: every entry some reading keeps must agree."""
    keep = None
    for m in masks:
        for axis in (1, 2):
            if axis == 2 and (len(shape) != 4 or shape[3] == 1):
                continue
            rows = m
            if tail and len(shape) > axis and shape[0] == m.shape[0] and 0 < shape[axis] < m.shape[1]:
                rows = m[:, -shape[axis]:]   # ``tail``: S new tokens after a cache, the mask's last S keys
            if len(shape) > axis and (shape[0], shape[axis]) == rows.shape:
                view = rows.reshape(rows.shape[:1] + (1,) * (axis - 1) + rows.shape[1:] + (1,) * (len(shape) - axis - 1))
                keep = np.broadcast_to(view, shape) if keep is None else keep | view
    return keep


def _kept_rows_match(names, ref_out, got, feeds, loosest, keyless: bool = False, steps=None, live=()) -> bool:
    """Whether every output agrees on the query rows the masks keep: an output [B, S, ...] (or
    [B, H, S, T], _row_keep) is compared where a padding mask [B, S] is 1 (``keyless``: everywhere
    but the rows with no kept key at or before their own position, which a causal mask leaves with
    none at all); an output no mask lines up with (a [B, 1, S, 1] intermediate) must agree whole.
    Before, such an output ruled the keyless check out even when it agreed (form seed 1356464380:
    wrong). ``live``: [B] bool arrays of the batch rows that keep some key (a 4-D key mask's reading,
    _key_mask_4d_readings); outputs [B, ...] are compared on those rows only."""
    masks = [np.cumsum(v, axis=1) > 0 if keyless else v.astype(bool) for v in _mask_feeds(feeds).values()]
    # (keyless) a batch row of length 0 keeps no key on any query row: outputs [B, ...] compared without it
    rows = ([v > 0 for v in _empty_lengths(feeds).values()] if keyless else []) + list(live)
    # (keyless) with a cache, query i is key P + i: a mask [B, P + S] lines up with S rows by its last S keys
    tail = keyless and any("past" in k.lower() for k in feeds)
    for name, r, g in zip(names, ref_out, got):
        r, g = np.asarray(r), np.asarray(g)
        keep = _row_keep(r.shape, masks, tail)
        for live in rows:
            if r.ndim >= 1 and r.shape[0] == live.shape[0]:
                view = np.broadcast_to(live.reshape((-1,) + (1,) * (r.ndim - 1)), r.shape)
                keep = view if keep is None else keep & view
        if keep is not None and r.shape == g.shape:
            r, g = r[keep], g[keep]
        if compare([name], [r], [g], loosest, steps)[0] != "ok":
            return False
    return True


def _only_padded_rows_differ(original, optimized, names, feeds, loosest, steps=None) -> bool:
    """A FusedAttention model that matches the original once every 0/1 mask input (2-D integer,
    bool or float, named a mask as in _mask_feeds) is all ones: it differed only where the padding is.
    (Position ids of a one-token step are [[0], [0], ...], 0/1 too: made ones, they index past a
    rotary table sized by the sequence and the original itself fails: seed 1118843654.)"""
    if not any(n.domain == "onnx_fuse" and n.op_type == "FusedAttention" for n in optimized.graph.node):
        return False
    masks = _mask_feeds(feeds)
    unpadded = {k: (np.ones_like(v) if k in masks else v) for k, v in feeds.items()}
    if all(unpadded[k] is feeds[k] for k in feeds):
        return False  # no padding to blame
    try:
        ref = _session(original, ort_optimizations=False).run(names, unpadded)
        got = _session(optimized, ort_optimizations=False).run(names, unpadded)
    except Exception:  # noqa: BLE001
        return False
    return compare(names, ref, got, loosest, steps)[0] == "ok"


def _contrib_gqa_padded_rows_only(original, names, ref_out, got, feeds, loosest, steps=None) -> bool:
    """An original with ORT's com.microsoft GroupQueryAttention, a right-padded mask, and a run that agrees
    on every kept query row (and whole on outputs no mask lines up with, the presents): what differs are
    the padding rows of the prompt, which ORT's kernels fill by their own rule. Its CPU float32 kernel
    ends a padding row's local window at the row's own position and gives 0 where no key is left, its
    float16 kernel at the sequence's last token (seed 2159279219: windows 1-3 at both dtypes), so no
    rewrite can match both; nobody reads those rows."""
    if not any(n.domain == "com.microsoft" and n.op_type == "GroupQueryAttention" for n in original.graph.node):
        return False
    if not _mask_feeds(feeds) or _left_padded(feeds):
        return False
    return _kept_rows_match(names, ref_out, got, feeds, loosest, steps=steps)


def _ort_itself(original: onnx.ModelProto, feeds, ref_out, loosest=None, steps=None) -> bool:
    """Whether ORT's default graph optimizations alone already break the original."""
    try:
        got = _session(original, ort_optimizations=True).run([o.name for o in original.graph.output], feeds)
    except Exception:  # noqa: BLE001
        return True
    return compare([o.name for o in original.graph.output], ref_out, got, loosest, steps)[0] != "ok"


class _GraphTimeout(BaseException):
    """Not an Exception: the optimizer's own ``except Exception`` must not swallow it."""


def _alarm(signum, frame):
    raise _GraphTimeout()


def _warm_imports() -> None:
    """Import what the runs import lazily before a graph's alarm is armed. The reference session
    imports onnxruntime-extensions on first use, which pulls in transformers and torch (seconds on a
    loaded machine); an alarm that interrupts that import leaves torch's operator registrations half
    done, and every later run of the process is refused ('Trying to override a python impl for
    DispatchKey.Meta ...': fuzz 33010, ten ort-refused runs after one timeout)."""
    try:
        import onnxruntime_extensions  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed: the runs say so themselves
        pass


def fuzz_graph(task):
    """All level x target runs of one graph: a list of result dicts (plus models of failures).
    A graph whose runs outlast ``graph_timeout`` seconds (SIGALRM; 0 = none) yields one
    ``timeout`` result for the combination that was running."""
    seed, levels, targets, rules, graph_timeout, precision, *rest = task
    pretool = rest[0] if rest else None
    pin_share = rest[1] if len(rest) > 1 else 0.0
    case = make_case(seed)
    if pretool:
        case = pretool_case(case, pretool)
    return fuzz_case(case, levels, targets, rules, graph_timeout, precision, pin_share)


PRETOOLS = ("slim", "ort1", "ort2")


def _pretool_model(model: onnx.ModelProto, tool: str) -> onnx.ModelProto:
    if tool == "slim":
        import onnxslim

        return onnxslim.slim(model)
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if tool == "ort1"
                                       else ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
        so.optimized_model_filepath = str(Path(tmp) / "pre.onnx")
        so.log_severity_level = 4
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath)


def pretool_case(case, tool: str):
    """The case with its graph rewritten by another tool first (tools/pretool_holdout.py does the
    same for the corpus): onnxslim, or ORT's offline optimizer at basic (ort1) / extended (ort2).
    The tool's output must keep the inputs and outputs and compute the same values (ORT, its
    optimizations off, on every feed set); else the graph stays as generated, with a trap saying
    why (a tool's own bug is not ours to count)."""
    import dataclasses

    names = [o.name for o in case.model.graph.output]
    given = onnx.ModelProto()
    given.CopyFrom(case.model)   # onnxslim rewrites the model it is given in place
    try:
        pre = _pretool_model(given, tool)
        if [i.name for i in pre.graph.input] != [i.name for i in case.model.graph.input] or \
                [o.name for o in pre.graph.output] != names:
            raise ValueError("inputs or outputs changed")
        for feeds in (case.feeds, *case.alt_feeds):
            ref = _session(case.model, ort_optimizations=False).run(names, feeds)
            got = _session(pre, ort_optimizations=False).run(names, feeds)
            if compare(names, ref, got)[0] != "ok":
                raise ValueError("values changed")
    except Exception as exc:  # noqa: BLE001 - the tool's failure, not ours
        return dataclasses.replace(case, traps=[*case.traps, f"pretool-{tool}-failed: {_first_line(exc)[:80]}"])
    return dataclasses.replace(case, model=pre, traps=[*case.traps, f"pretool-{tool}"])


def fuzz_case(case, levels, targets, rules=(), graph_timeout: float = 0, precision: str | None = None,
              pin_share: float = 0.0):
    """fuzz_graph on a built case (tests build decoder cases with fixed switches). ``pin_share``:
    the share of level >= 2 runs optimized with a pinned output opset (tools/fuzz_opset.py; the
    pin of each run is in its result's ``opset``); tests that fix a case's runs leave it 0."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)  # the failures we provoke are reported, not logged
    seed = case.seed
    base = {"seed": seed, "motifs": case.motifs, "traps": case.traps, "precision": precision,
            "spec": case.spec}
    try:
        sess = _session(case.model, ort_optimizations=False)
        names = [o.name for o in case.model.graph.output]
        ref_out = sess.run(names, case.feeds)
        alt = [(f, sess.run(names, f)) for f in case.alt_feeds]
    except Exception as exc:  # noqa: BLE001
        return [dict(base, level=0, target="-", cls="invalid-graph", detail=_first_line(exc), fires={})], case, {}
    results, models = [], {}
    loosest = loosest_float_dtypes(case.model)   # once per graph, not per level x target
    use_alarm = graph_timeout > 0 and hasattr(signal, "SIGALRM")
    if use_alarm:
        _warm_imports()
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, graph_timeout)
    level, target, pin = levels[0], targets[0], None
    try:
        for level in levels:
            o1_done = None
            for target in targets:
                pin = fuzz_opset.draw_pin(seed, case.model, level, target, pin_share)
                if level == 1 and o1_done is not None:
                    cls, detail, opt, fires = o1_done
                else:
                    cls, detail, opt, fires = run_one(case.model, case.feeds, ref_out, level, target, rules,
                                                      loosest, precision, alt=alt, opset=pin)
                    o1_done = (cls, detail, opt, fires) if level == 1 else None
                results.append(dict(base, level=level, target=target, opset=pin, cls=cls, detail=detail,
                                    fires=fires))
                if cls in (*FAIL_CLASSES, "ort-itself"):
                    models[(level, target)] = opt
                if level == 4 and target == "trt" and case.spec.get("kv_fp8") \
                        and fires.get("trt-paged-kv"):   # fp8 pools need the paged rewrite
                    target = FP8_TARGET   # the same run with fp8 KV pools (and the same pin)
                    cls, detail, opt, fires = run_one(case.model, case.feeds, ref_out, level, "trt", rules,
                                                      loosest, precision, kv_cache_dtype="fp8", alt=alt,
                                                      opset=pin)
                    results.append(dict(base, level=level, target=target, opset=pin, cls=cls, detail=detail,
                                        fires=fires))
                    if cls in (*FAIL_CLASSES, "ort-itself"):
                        models[(level, target)] = opt
    except _GraphTimeout:
        detail = f"no result after {graph_timeout} s (the graph's earlier runs: {len(results)})"
        results.append(dict(base, level=level, target=target, opset=pin, cls="timeout", detail=detail, fires={}))
        models[(level, target)] = None
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return results, case, models


def _save_failure(out: Path, res: dict, case, optimized) -> str:
    pinned = f"@{res['opset']}" if res.get("opset") else ""
    folder = out / "failures" / res["cls"] / f"seed{res['seed']}_O{res['level']}_{res['target']}{pinned}"
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(case.model, folder / "original.onnx")
    if optimized is not None:
        onnx.save(optimized, folder / "optimized.onnx")
    np.savez(folder / "feeds.npz", **case.feeds)
    for i, alt in enumerate(case.alt_feeds, 1):
        np.savez(folder / f"feeds_alt{i}.npz", **alt)
    info = {k: res.get(k) for k in ("seed", "level", "target", "opset", "cls", "detail", "motifs", "traps",
                                    "precision", "spec")}
    (folder / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    return str(folder)


def builtin_rules(levels, targets) -> list[str]:
    from onnx_fuse.rewrite._loader import load_builtin

    return sorted(r.name for r in load_builtin()[0]
                  if r.level <= max(levels) and set(r.targets) & set(targets))


def _write_summary(out: Path, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".summary", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(tmp, out / "summary.json")


def fuzz(count: int, seed: int, levels, targets, jobs: int = 1, out: Path | None = None,
         start: int = 0, progress=None, rules=(), time_budget: float | None = None,
         graph_timeout: float = 0, seeds=None, precision: str | None = None, pretool: str | None = None,
         pin_share: float = fuzz_opset.PIN_SHARE) -> dict:
    """Run the fuzzer; returns the summary (also written to OUT/summary.json when ``out``, and
    every 100 graphs while it runs). ``rules`` are extra rule files, passed to optimize() (a
    user's rules can be fuzzed too). ``time_budget`` (seconds) stops taking new graphs.
    ``precision`` ("fp16"/"bf16") adds that precision conversion to every run; ``pretool``
    (PRETOOLS) rewrites every graph with that tool first (pretool_case); ``pin_share`` of the
    level >= 2 runs get a pinned output opset (tools/fuzz_opset.py; 0: none)."""
    rules = tuple(str(r) for r in rules)
    if seeds is None:  # the graphs (seed, start) ... (seed, start + count - 1)
        seeds = [case_seed(seed, i) for i in range(start, start + count)]
    count = len(seeds)
    tasks = [(s, tuple(levels), tuple(targets), rules, graph_timeout, precision, pretool, pin_share) for s in seeds]
    counts = collections.Counter()
    by_combo: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    fires = collections.Counter()
    motifs = collections.Counter()
    failures = []
    refusals = collections.Counter()
    paged_runs = collections.Counter()    # runs where trt-paged-kv fired, by class
    pinned_runs: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)  # by pin
    pinned_fires = collections.Counter()  # rules that fired on pinned runs
    spec_counts = collections.Counter()   # decoder cases' switches, per run
    expected = builtin_rules(levels, targets)
    t0 = time.time()
    graphs = 0

    def summary(complete: bool) -> dict:
        return {
            "count": count, "graphs": graphs, "complete": complete, "seed": seed, "start": start,
            "levels": list(levels), "targets": list(targets), "rules": list(rules), "jobs": jobs,
            "precision": precision, "pretool": pretool, "pin_share": pin_share,
            "runs": sum(counts.values()), "seconds": round(time.time() - t0, 1),
            "classes": {c: counts.get(c, 0) for c in CLASSES},
            "failed": sum(counts.get(c, 0) for c in FAIL_CLASSES),
            "by_level_target": {k: dict(v) for k, v in sorted(by_combo.items())},
            "rule_fires": dict(sorted(fires.items())),
            "rules_never_fired": [r for r in expected if not fires.get(r)],
            "motifs": dict(sorted(motifs.items())),
            "paged_runs": dict(paged_runs),
            "pinned_runs": {k: dict(v) for k, v in sorted(pinned_runs.items())},
            "pinned_rule_fires": dict(sorted(pinned_fires.items())),
            "decoder_switch_runs": dict(sorted(spec_counts.items())),
            "refusals": dict(refusals.most_common(20)),
            "failures": failures,
        }

    if jobs > 1:
        # one BLAS / OpenMP thread per worker: N workers on N cores, not N x cores threads
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")
        pool = multiprocessing.get_context("spawn").Pool(jobs)
        # unordered: one slow graph does not hold back the results (and the summary) behind it
        stream = pool.imap_unordered(fuzz_graph, tasks, chunksize=1)
    else:
        pool, stream = None, map(fuzz_graph, tasks)
    try:
        for results, case, models in stream:
            graphs += 1
            motifs.update(case.motifs)
            for res in results:
                counts[res["cls"]] += 1
                by_combo[f"O{res['level']}/{res['target']}" + ("@pin" if res.get("opset") else "")][res["cls"]] += 1
                fires.update(res["fires"])
                if res.get("opset"):
                    pinned_runs[f"opset={res['opset']}"][res["cls"]] += 1
                    pinned_fires.update(res["fires"])
                if res["fires"].get("trt-paged-kv"):
                    paged_runs[res["cls"]] += 1
                for key, value in res.get("spec", {}).items():
                    if value:   # the switches that are on (window=3, sinks=True, head=64, ...)
                        spec_counts[f"{key}={value}"] += 1
                if res["cls"] == "refused-input":
                    refusals[res["detail"][:160]] += 1
                if res["cls"] in (*FAIL_CLASSES, *NOTED_CLASSES):  # listed, not all failures
                    entry = {k: res.get(k) for k in ("seed", "level", "target", "opset", "cls", "detail")}
                    entry["detail"] = entry["detail"].splitlines()[0] if entry["detail"] else ""
                    if out is not None:
                        entry["saved"] = _save_failure(out, res, case, models.get((res["level"], res["target"])))
                    failures.append(entry)
            if progress:
                progress(graphs, len(tasks), counts)
            if out is not None and graphs % 100 == 0:
                _write_summary(out, summary(False))
            if time_budget is not None and time.time() - t0 >= time_budget:
                break
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    final = summary(graphs == count)
    if out is not None:
        _write_summary(out, final)
    return final


def replay(folders, rules=()) -> list[tuple[str, str, str]]:
    """Re-run saved cases (folders written under OUT/failures/): (folder, class then, class now)."""
    out = []
    for folder in folders:
        folder = Path(folder)
        info = json.loads((folder / "info.json").read_text())
        model = onnx.load(folder / "original.onnx")
        feed_sets = []
        for path in [folder / "feeds.npz", *sorted(folder.glob("feeds_alt*.npz"))]:
            with np.load(path) as data:
                feed_sets.append({k: data[k] for k in data.files})
        sess = _session(model, ort_optimizations=False)
        names = [o.name for o in model.graph.output]
        (feeds, ref), *alt = [(f, sess.run(names, f)) for f in feed_sets]
        fp8 = info["target"] == FP8_TARGET
        cls, detail, _, _ = run_one(model, feeds, ref, info["level"], "trt" if fp8 else info["target"], rules,
                                    precision=info.get("precision"), kv_cache_dtype="fp8" if fp8 else None,
                                    alt=alt, opset=info.get("opset"))
        out.append((str(folder), info["cls"], cls + (f": {detail.splitlines()[0][:160]}" if detail else "")))
    return out


def _int_list(text: str, allowed) -> list:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(v not in allowed for v in values):
        raise argparse.ArgumentTypeError(f"choose from {sorted(allowed)}, got {text!r}")
    return values


def _targets(text: str) -> list[str]:
    values = [t.strip() for t in text.split(",") if t.strip()]
    if not values or any(t not in ("ort", "onnx", "trt") for t in values):
        raise argparse.ArgumentTypeError(f"targets are ort, onnx, trt; got {text!r}")
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100, help="graphs to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="index of the first graph (resume a run)")
    ap.add_argument("--levels", type=lambda s: _int_list(s, {1, 2, 3, 4}), default=[1, 2, 3, 4])
    ap.add_argument("--targets", type=_targets, default=["ort", "onnx", "trt"])
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (one graph each at a time)")
    ap.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                    help="stop taking new graphs after this long (the summary counts those that ran)")
    ap.add_argument("--graph-timeout", type=float, default=300, metavar="SECONDS",
                    help="a graph's runs taking longer count as `timeout` (0: no limit; POSIX only)")
    ap.add_argument("--rules", action="append", default=[], metavar="FILE",
                    help="extra rule file for optimize() (repeatable)")
    ap.add_argument("--precision", choices=("fp16", "bf16"), default=None,
                    help="optimize with this precision conversion too; outputs compared at its tolerance")
    ap.add_argument("--pretool", choices=PRETOOLS, default=None,
                    help="rewrite every graph with onnxslim (slim) or ORT's offline optimizer "
                         "(ort1: basic, ort2: extended) before optimizing it")
    ap.add_argument("--pin-share", type=float, default=fuzz_opset.PIN_SHARE, metavar="P",
                    help="share of the O2-O4 runs optimized with a pinned output opset (opset=N, N from the "
                         f"model's opset to {fuzz_opset.HIGHEST}; 0: none; default %(default)s)")
    ap.add_argument("--out", type=Path, default=Path("fuzz_out"), help="summary and failing graphs")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--rerun", type=Path, metavar="SUMMARY",
                    help="re-run every graph that failed in SUMMARY (a summary.json), or was left-padded, "
                         "at --levels x --targets (cases rebuilt from their seeds: nothing saved is needed)")
    ap.add_argument("--replay", nargs="+", metavar="CASE",
                    help="re-run saved failing cases (OUT/failures/<class>/<case>) and print their class now")
    args = ap.parse_args(argv)
    if args.replay:
        bad = [c for c in args.replay if not (Path(c) / "info.json").is_file()]
        if bad:
            ap.error(f"--replay {bad[0]}: not a saved case (no info.json)")
        results = replay(args.replay, args.rules)
        for folder, then, now in results:
            print(f"{folder}: {then} -> {now}")
        return 0 if all(now.startswith(("ok", "refused-input", "ort-itself", "padded-rows"))
                        for _, _, now in results) else 1
    if args.count < 1 or args.jobs < 1 or args.start < 0:
        ap.error("--count and --jobs must be >= 1, --start >= 0")
    if not 0 <= args.pin_share <= 1:
        ap.error(f"--pin-share must be from 0 to 1, got {args.pin_share}")
    if (args.time_budget is not None and args.time_budget <= 0) or args.graph_timeout < 0:
        ap.error("--time-budget must be > 0 and --graph-timeout >= 0")
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out}: not a folder")

    def progress(done, total, counts):
        if not args.quiet and (done % 25 == 0 or done == total):
            print(f"[{done}/{total}] " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
                  file=sys.stderr, flush=True)

    seeds = None
    if args.rerun is not None:
        try:
            failures = json.loads(args.rerun.read_text())["failures"]
            seeds = sorted({int(f["seed"]) for f in failures if f["cls"] in (*FAIL_CLASSES, "left-padded")})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ap.error(f"--rerun {args.rerun}: not a fuzzer summary ({_first_line(exc)})")
        if not seeds:
            ap.error(f"--rerun {args.rerun}: no failed graph in it")
    missing = [r for r in args.rules if not Path(r).is_file()]
    if missing:
        ap.error(f"--rules {missing[0]}: no such file")
    summary = fuzz(args.count, args.seed, args.levels, args.targets, args.jobs, args.out,
                   args.start, progress, args.rules, args.time_budget, args.graph_timeout, seeds,
                   args.precision, args.pretool, args.pin_share)
    of = "" if summary["complete"] else f" (of {summary['count']}: time budget reached)"
    print(f"{summary['graphs']} graphs{of}, {summary['runs']} runs, {summary['seconds']} s")
    for cls in CLASSES:
        print(f"  {cls:14s} {summary['classes'][cls]}")
    print("rule fires:")
    for name, n in summary["rule_fires"].items():
        print(f"  {name:32s} {n}")
    print("rules never fired: " + (", ".join(summary["rules_never_fired"]) or "none"))
    seen = set()
    for f in summary["failures"]:
        key = (f["cls"], f["detail"][:60])
        if key not in seen:
            seen.add(key)
            pinned = f" opset={f['opset']}" if f.get("opset") else ""
            print(f"  {f['cls']}: seed {f['seed']} O{f['level']} {f['target']}{pinned}: {f['detail'][:200]}")
    print(f"summary: {args.out / 'summary.json'}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
