"""The differential fuzzer (tools/fuzz_differential.py): a short run finds no failure, its graphs
make every rule family fire (a generator that never fires a rule tests nothing), it is
deterministic, and it does catch a wrong rewrite (a planted user rule) and saves the case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
import fuzz_paged  # noqa: E402
from fuzz_motifs import make_case  # noqa: E402
from tests.tool_modules import assert_same_case  # noqa: E402

# Rule families by name: the attention rules are being renamed (canonical recognize/lower design),
# so a family is matched by the words its rule names carry in both designs.
FAMILIES = {
    "attention": lambda r: "attention" in r or r.startswith(("mha-", "gqa-")),
    "rope": lambda r: r.startswith("rotary"),
    "norm": lambda r: r.startswith(("layer-norm", "rms-norm")),
    "skip-norm": lambda r: r.startswith("skip-"),
    "gelu": lambda r: "gelu" in r,
}


@pytest.fixture(scope="module")
def short_run():
    """40 graphs at O2/O3 on every target plus 20 at O4 on trt (~30 s of CPU)."""
    main = fd.fuzz(40, seed=11, levels=[2, 3], targets=["ort", "onnx", "trt"])
    o4 = fd.fuzz(20, seed=12, levels=[4], targets=["trt"])
    return main, o4


def _failures(summary) -> list[str]:
    return [f"{f['cls']} seed {f['seed']} O{f['level']} {f['target']}: {f['detail'][:160]}"
            for f in summary["failures"]]


def test_short_run_has_no_failures(short_run):
    for summary in short_run:
        assert summary["classes"]["invalid-graph"] == 0, _failures(summary)
        # every generated graph is valid (opset >= 17): refusing one is a bug too (a broken rule file)
        assert summary["classes"]["refused-input"] == 0, summary["refusals"]
        assert summary["failed"] == 0, _failures(summary)
        assert summary["classes"]["ok"] > 0


def test_generator_fires_every_rule_family(short_run):
    fires = {**short_run[0]["rule_fires"]}
    for name, n in short_run[1]["rule_fires"].items():
        fires[name] = fires.get(name, 0) + n
    for family, member in FAMILIES.items():
        count = sum(n for r, n in fires.items() if member(r))
        assert count > 0, f"no {family} rule fired on the fuzzer's graphs: {sorted(fires)}"


def test_cases_are_deterministic():
    for seed in (3, 4):
        assert_same_case(make_case(seed), make_case(seed))


# A wrong rewrite: GELU replaced by Relu (close to it for x > 0, wrong for x < 0).
PLANTED_WRONG = """
rules:
  - name: gelu-erf
    doc: planted bug for the fuzzer test (overrides the built-in recognizer by name)
    level: 2
    priority: 100
    targets: [ort]
    match: |
      t = Div(x, c_sqrt2) | Mul(x, c_rsqrt2)
      e = Erf(t)
      a = Add(e, c_one)
      m = Mul(x, a)
      y = Mul(m, c_half)
    where:
      c_sqrt2:  {scalar: 1.4142135, rtol: 1e-3}
      c_rsqrt2: {scalar: 0.70710678, rtol: 1e-3}
      c_one:    {scalar: 1.0}
      c_half:   {scalar: 0.5}
    rewrite: |
      y = Relu(x)
"""


def test_planted_wrong_rule_is_caught_and_saved(tmp_path):
    rule = tmp_path / "wrong.yaml"
    rule.write_text(PLANTED_WRONG)
    out = tmp_path / "out"
    summary = fd.fuzz(25, seed=5, levels=[2], targets=["ort"], out=out, rules=[rule])
    assert summary["rule_fires"].get("gelu-erf", 0) > 0
    assert summary["classes"]["wrong"] > 0 and summary["failed"] > 0
    saved = Path(next(f["saved"] for f in summary["failures"] if f["cls"] == "wrong"))
    assert (saved / "original.onnx").is_file() and (saved / "optimized.onnx").is_file()
    assert json.loads((saved / "info.json").read_text())["cls"] == "wrong"
    assert json.loads((out / "summary.json").read_text())["classes"]["wrong"] == summary["classes"]["wrong"]
    # the saved case reproduces: wrong again with the planted rule, fine with the built-in one
    (_, then, now), = fd.replay([saved], rules=[rule])
    assert (then, now.split(":")[0]) == ("wrong", "wrong")
    assert fd.replay([saved])[0][2] == "ok"


def test_signature_diff_names_rank_and_dtype_changes():
    import onnx
    from onnx import helper as oh

    def model(shape, dtype=onnx.TensorProto.FLOAT):
        g = oh.make_graph([], "g", [], [oh.make_tensor_value_info("y", dtype, shape)])
        return oh.make_model(g)

    assert fd.signature_diff(model([1]), model([1])) is None
    assert "rank 1 -> 0" in fd.signature_diff(model([1]), model([]))
    assert "dtype" in fd.signature_diff(model([1]), model([1], onnx.TensorProto.FLOAT16))
    assert fd.signature_diff(model(["n"]), model([4])) is None   # symbolic vs static: not provable


@pytest.mark.parametrize("args", [["--levels", "5"], ["--targets", "tensorrt"], ["--count", "0"],
                                  ["--rules", "/nonexistent.yaml"]])
def test_bad_arguments_exit_2(args, tmp_path):
    proc = subprocess.run([sys.executable, str(TOOLS / "fuzz_differential.py"), *args,
                           "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert not (tmp_path / "o").exists()


def test_parallel_run_matches_serial_run(tmp_path):
    """--jobs N runs the same graphs (in completion order) and counts the same classes."""
    serial = fd.fuzz(4, seed=21, levels=[2], targets=["ort"])
    parallel = fd.fuzz(4, seed=21, levels=[2], targets=["ort"], jobs=2, out=tmp_path / "o")
    assert parallel["complete"] and parallel["graphs"] == 4
    assert parallel["classes"] == serial["classes"]
    assert parallel["rule_fires"] == serial["rule_fires"]
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["graphs"] == 4


def test_graph_timeout_is_a_failure_class_and_saved(tmp_path):
    # 1 ms: no graph's first optimize finishes in time, so every graph yields one `timeout`
    summary = fd.fuzz(2, seed=22, levels=[2], targets=["ort"], out=tmp_path, graph_timeout=0.001)
    assert summary["classes"]["timeout"] == 2 and summary["failed"] == 2
    saved = Path(summary["failures"][0]["saved"])
    assert (saved / "original.onnx").is_file() and json.loads((saved / "info.json").read_text())["cls"] == "timeout"


def test_lazy_imports_are_done_before_the_graph_alarm_is_armed():
    # an alarm that interrupts the reference's first import of onnxruntime-extensions (transformers, torch)
    # leaves torch half registered and every later run refused; so it is imported before the alarm is armed
    code = f"""
import signal, sys
sys.path.insert(0, {str(TOOLS)!r})
import fuzz_differential as fd
armed = []
real = signal.setitimer
def spy(which, seconds, *rest):
    if seconds:
        armed.append('onnxruntime_extensions' in sys.modules)
    return real(which, seconds, *rest)
signal.setitimer = spy
fd.fuzz(1, seed=22, levels=[2], targets=["ort"], graph_timeout=600)
print(armed)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[True]"


def test_time_budget_stops_early_and_says_so(tmp_path):
    summary = fd.fuzz(50, seed=23, levels=[2], targets=["ort"], out=tmp_path, time_budget=1e-6)
    assert summary["graphs"] == 1 and not summary["complete"] and summary["count"] == 50
    assert json.loads((tmp_path / "summary.json").read_text())["complete"] is False


def _runs(seed, levels, targets):
    return [(r["level"], r["target"], r["cls"], r["detail"][:160])
            for r in fd.fuzz_graph((seed, tuple(levels), tuple(targets), (), 0, None))[0]]


def test_long_run_crash_is_fixed():
    """Seed 1448915198 (the long run of 2026-12-01, docs/PERF.md): a one-head fp16 attention
    whose graph output had unknown dims; the opset-23 trial upgrade was refused as an interface
    change, leaving the canonical Attention without a lowering (InternalError) at onnx and trt."""
    for level, target, cls, detail in _runs(1448915198, [3, 4], ["onnx", "trt"]):
        assert cls == "ok", (level, target, cls, detail)


def test_ort_refusing_the_original_too_is_ort_itself():
    """Seed 14525077: an fp16 RMSNorm + LayerNorm that ORT's own LayerNormFusion makes unloadable
    (float and float16 bound to one type), on the original as well: ORT's failure, not ours."""
    case = make_case(14525077)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    ort_breaks_original = fd._ort_itself(case.model, case.feeds, ref)
    (_, _, cls, detail), = _runs(14525077, [1], ["ort"])
    assert cls == ("ort-itself" if ort_breaks_original else "ok"), detail


def test_two_packs_of_unnamed_matmuls_get_distinct_names():
    """Seeds 2078360400 / 2710596152: two groups of sibling MatMuls on unnamed nodes; pack-matmul
    named both packed weights "matmul_packed_w" (InternalError at O2/O3, ort and onnx)."""
    for seed in (2078360400, 2710596152):
        for level, target, cls, detail in _runs(seed, [2], ["ort"]):
            assert cls == "ok", (seed, level, target, cls, detail)


def test_float32_output_of_fp16_math_is_compared_at_fp16_tolerance():
    """A float32 output read from fp16 math (a norm's float32 island after fp16 attention) carries
    fp16 rounding; an output computed in float32 alone keeps the float32 tolerance. (The long run's
    one `wrong` graph, seed 875106632, was such a float32 ReduceMean after fp16 attention: 3.1e-4.)"""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
         helper.make_node("Neg", ["hf"], ["from_half"]),
         helper.make_node("Neg", ["f"], ["pure"])],
        "g",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT16, [4]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("from_half", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("pure", TensorProto.FLOAT, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    loosest = fd.loosest_float_dtypes(model)
    assert loosest == {"from_half": np.dtype(np.float16), "pure": np.dtype(np.float32)}
    ref = np.full(4, 0.39, np.float32)
    got = ref + np.float32(2e-3)  # inside fp16 tolerance, outside float32
    assert fd.compare(["from_half"], [ref], [got], loosest)[0] == "ok"
    assert fd.compare(["pure"], [ref], [got], loosest)[0] == "wrong"


def test_long_runs_wrong_graph_is_clean_now():
    case = make_case(875106632)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    for level, target in ((3, "onnx"), (4, "trt")):
        cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, level, target)
        assert cls == "ok", (level, target, detail)


def test_gelu_of_a_rank_0_x_that_ort_cannot_fuse_is_fixed():
    """Seed 3122327281 (trust's pass of 2026-12-01): a rank-0 tanh GELU crashed at O2-O4 ort
    (canonical Gelu left unlowered: the plain fallback's [1]-shaped constants made it (1,))."""
    for level, target, cls, detail in _runs(3122327281, [2, 4], ["ort"]):
        assert cls == "ok", (level, target, cls, detail)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_precision_runs_convert_and_compare_at_the_low_tolerance(precision, tmp_path):
    """--precision: optimize() converts (the optimized model computes in the low type), outputs
    are compared at its tolerance, and a saved case replays with the same precision."""
    import onnx

    case = make_case(211629190)   # attention with RoPE: MatMuls to convert
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, optimized, _ = fd.run_one(case.model, case.feeds, ref, 2, "ort", precision=precision)
    assert cls == "ok", detail
    low = {"fp16": onnx.TensorProto.FLOAT16, "bf16": onnx.TensorProto.BFLOAT16}[precision]
    assert low in {t.data_type for t in optimized.graph.initializer}
    summary = fd.fuzz(2, seed=31, levels=[2], targets=["ort"], out=tmp_path, precision=precision)
    assert summary["precision"] == precision and summary["failed"] == 0, _failures(summary)
    ref16 = np.full(4, 0.39, np.float32)
    got = ref16 + np.float32(4e-3)   # fp16 rounding: wrong at float32, fine at the low tolerance
    assert fd.compare(["y"], [ref16], [got], {"y": fd.PRECISION_DTYPE[precision]})[0] == "ok"
    assert fd.compare(["y"], [ref16], [got])[0] == "wrong"


def test_the_paged_kv_rewrite_is_compared_like_verify():
    """Seed 2004176908 (trust's bf16 pass of 2026-12-01): a KV-cache attention of head size 64 that
    trt-paged-kv rewrites at O4 trt. The pools replace the past inputs and present outputs; the
    run feeds the original's past as pool blocks and compares present with the pools read back
    (it was `paged`, listed and not compared, before)."""
    runs = fd.fuzz_graph((2004176908, (3, 4), ("ort", "trt"), (), 0, None))[0]
    by = {(r["level"], r["target"]): r for r in runs}
    assert by[(4, "trt")]["fires"].get("trt-paged-kv"), by[(4, "trt")]
    assert all(r["cls"] == "ok" for r in runs), [(k, r["cls"], r["detail"][:160]) for k, r in by.items()]


@pytest.mark.parametrize("precision, seed", [("fp16", 3528835259), ("bf16", 2952367057)])
def test_paged_runs_under_precision_are_compared_at_its_tolerance(precision, seed):
    """fp16rules' passes of 2026-12-02: the paged branch ignored --precision. fp16: the float16
    pools were held to float32's tolerance (9 of 60 graphs `wrong` at 3e-4 of the scale); bf16:
    the model ran without emulate_bf16 (6 of 40 `ort-refused`, no bfloat16 MatMul). Both now run
    and compare as every other output of that precision."""
    case = make_case(seed)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, optimized, fires = fd.run_one(case.model, case.feeds, ref, 4, "trt", precision=precision)
    assert fires.get("trt-paged-kv") and cls == "ok", (cls, detail)


# ---- KV-cache decoder cases (tools/fuzz_decoder.py) ------------------------------------------

from fuzz_motifs import make_decoder_case  # noqa: E402

PAGEABLE = dict(head=64, heads=2, kv_heads=2, layers=1, window=0, sinks=False, fp16=False, upcast=False,
                decode=True, positions="offset", padded=True, dim_names="optimum", repeat="static",
                present_dims=True, kv_fp8=True)


def test_decoder_switches_are_generated_and_recorded():
    """Every switch of the decoder spec comes up among 300 seeds (about 60 decoder cases), and
    the case carries the spec the fuzzer writes to a saved case's info.json."""
    seen = {}
    for seed in range(300):
        case = make_case(seed)
        if not case.spec:
            continue
        assert case.motifs == ["decoder_kv"]
        inputs = {i.name for i in case.model.graph.input}
        assert {"attention_mask", "past_key_values.0.key", "past_key_values.0.value"} <= inputs
        assert "present.0.key" in {o.name for o in case.model.graph.output}
        for key, value in case.spec.items():
            seen.setdefault(key, set()).add(value)
    for key in ("sinks", "fp16", "upcast", "decode", "kv_fp8", "padded", "present_dims"):
        assert seen[key] == {False, True}, (key, seen[key])
    assert seen["window"] >= {0, 2, 3} and seen["positions"] == {"range", "offset"}
    assert seen["head"] >= {16, 64, 128} and seen["repeat"] >= {"hf", "static"}


def _decoder_runs(levels, targets, **spec):
    case = make_decoder_case(77, **{**PAGEABLE, **spec})
    runs = fd.fuzz_case(case, levels, targets)[0]
    return case, {(r["level"], r["target"]): r for r in runs}


def _all_ok(by):
    return all(r["cls"] == "ok" for r in by.values()), [(k, r["cls"], r["detail"][:200]) for k, r in by.items()]


def test_decoder_is_paged_and_round_trips_with_fp16_and_fp8_pools():
    """The pageable decoder (padded past) is paged at O4 trt and matches the original read back
    from the pools, also with fp8 pools (trt+fp8kv) and in fp16; and with GQA (HF's repeat_kv)."""
    case, by = _decoder_runs([3, 4], ["ort", "trt"])
    ok, why = _all_ok(by)
    assert ok, why
    assert by[(4, "trt")]["fires"].get("trt-paged-kv") == 1 and not by[(3, "trt")]["fires"].get("trt-paged-kv")
    assert (4, fd.FP8_TARGET) in by and by[(4, fd.FP8_TARGET)]["spec"]["kv_fp8"]
    case16, by16 = _decoder_runs([4], ["trt"], fp16=True, upcast=True, kv_fp8=False)
    ok, why = _all_ok(by16)
    assert ok and by16[(4, "trt")]["fires"].get("trt-paged-kv"), why
    _, gqa = _decoder_runs([4], ["trt"], kv_heads=1, heads=2, repeat="hf", decode=False, kv_fp8=False)
    ok, why = _all_ok(gqa)
    assert ok and gqa[(4, "trt")]["fires"].get("trt-paged-kv"), why


def test_paged_run_feeds_an_overridden_initializer():
    """A weight that is also a graph input, fed a value of the user's (seed 13 of the first decoder pass
    found it; since session 18's shifted positions seed 130 draws it, seed 13 no longer does). ORT's
    get_inputs() leaves such inputs out; the paged run fed only those, so the model ran on the default
    weight and the fuzzer reported `wrong` (its own bug)."""
    case = make_case(130)
    assert case.spec and "initializer-overridden" in case.traps
    runs = fd.fuzz_case(case, [4], ["trt"])[0]
    assert [(r["cls"], bool(r["fires"].get("trt-paged-kv"))) for r in runs if r["target"] == "trt"] == \
        [("ok", True)], runs


def test_paged_check_catches_a_wrong_paged_model():
    """The checker can fail: K and V swapped on the PagedAttention (a wrong rewrite) is `wrong`."""
    import onnx_fuse

    case = make_decoder_case(78, **{**PAGEABLE, "kv_fp8": False})
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    optimized = onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True).to_proto()
    assert fd._check_paged(case.model, optimized, case.feeds, ref, False, None)[0] == "ok"
    node = next(n for n in optimized.graph.node if n.op_type == "PagedAttention")
    node.input[1], node.input[2] = node.input[2], node.input[1]
    cls, detail = fd._check_paged(case.model, optimized, case.feeds, ref, False, None)
    assert cls == "wrong" and "paged" in detail, detail


def test_sliding_window_is_paged_with_its_window_and_stays_exact():
    """A band of 3 keys over a past of 5+: trt-paged-kv pages it at O4 (PagedAttention(window=3),
    compared with the original read back from the pools, fp8 pools too); every other run keeps
    the band in the mask."""
    _, by = _decoder_runs([3, 4], ["ort", "onnx", "trt"], window=3, kv_fp8=True, decode=True)
    ok, why = _all_ok(by)
    assert ok, why
    assert [k for k, r in by.items() if r["fires"].get("trt-paged-kv")] == [(4, "trt"), (4, fd.FP8_TARGET)]
    assert any(n.startswith("attention") for n in by[(3, "ort")]["fires"]), by[(3, "ort")]["fires"]


def test_attention_sinks_fuse_and_round_trip():
    _, by = _decoder_runs([3], ["ort", "onnx", "trt"], sinks=True, sink_shape="export", kv_fp8=False)
    ok, why = _all_ok(by)
    assert ok, why
    assert all(r["fires"].get("attention-sinks") for r in by.values()), {k: r["fires"] for k, r in by.items()}


def test_fp16_upcast_decoder_fuses_rope_and_norm_and_round_trips():
    _, by = _decoder_runs([2, 3], ["ort", "onnx"], fp16=True, upcast=True, kv_fp8=False, decode=False)
    ok, why = _all_ok(by)
    assert ok, why
    fires = by[(3, "ort")]["fires"]
    assert any(n.startswith("rotary") for n in fires) and any(n.startswith("rms-norm") for n in fires), fires


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_fp8_pools_are_fuzzed_under_precision_too(precision):
    """trust, session 11: --precision skipped the trt+fp8kv run. It runs now, compared at e4m3's
    bound on top of the precision's (the pool bound on the first layer's presents), with sinks
    too (fuzz_decoder drew fp8 only without them)."""
    for sinks in (False, True):
        case = make_decoder_case(77, **{**PAGEABLE, "sinks": sinks, "sink_shape": "export"})
        runs = fd.fuzz_case(case, [4], ["trt"], precision=precision)[0]
        by = {(r["level"], r["target"]): r for r in runs}
        assert (4, fd.FP8_TARGET) in by, sorted(by)
        fp8 = by[(4, fd.FP8_TARGET)]
        assert fp8["fires"].get("trt-paged-kv") and fp8["precision"] == precision
        ok, why = _all_ok(by)
        assert ok, why


def test_fp8_comparison_adds_e4m3_to_the_base_bound():
    """A present 2^-4 + 1.5e-2 relative off: within the pool bound over fp16's base (2^-4 +
    1.0625 x 2e-2), not over e4m3's alone."""
    ref = np.full((1, 1, 4, 8), 2.0)
    got = ref * (1 + 2.0 ** -4 + 1.5e-2)
    scales = {"present.0.key": np.array([0.1], np.float32)}
    fp16 = {"present.0.key": fd.base_tolerance("present.0.key", ref.astype(np.float16))}
    assert fuzz_paged.compare_fp8(["present.0.key"], [ref], [got], fp16, scales)[0] == "ok"
    assert fuzz_paged.compare_fp8(["present.0.key"], [ref], [got], None, scales)[0] == "wrong"
    assert fd.base_tolerance("y", np.array([-3.0, 1.0], np.float32)) == pytest.approx((3e-4, 1e-3))
    assert fd.base_tolerance("y", np.array([0.5], np.float32), {"y": np.dtype(np.float16)}) == (1e-2, 2e-2)


def test_fp8_run_checks_each_attention_against_its_own_inputs():
    """A later layer's V scale 5 % off passes the output bounds (0.1 relative + 0.1 x the
    magnitude past the first layer's presents); the fuzzer now runs verify's fp8 attention
    check too, which fails it."""
    import onnx_fuse
    from onnx import helper as oh
    from onnx import numpy_helper

    case = make_decoder_case(77, **{**PAGEABLE, "layers": 2})
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    opt = onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True,
                             kv_cache_dtype="fp8").to_proto()
    assert fd._check_paged(case.model, opt, case.feeds, ref, True, None) == ("ok", "")
    node = [n for n in opt.graph.node if n.op_type == "PagedAttention"][1]
    opt.graph.initializer.append(numpy_helper.from_array(np.array(1.05, np.float32), "planted"))
    nodes = [oh.make_node("Mul", [node.input[8], "planted"], ["planted_v_scale"]), *opt.graph.node]
    node.input[8] = "planted_v_scale"
    del opt.graph.node[:]
    opt.graph.node.extend(nodes)
    cls, detail = fd._check_paged(case.model, opt, case.feeds, ref, True, None)
    assert cls == "wrong" and "attention" in detail and "e4m3's bound" in detail, detail


def test_paged_bf16_model_that_only_orts_optimizations_refuse_is_ort_itself():
    """Seed 2500259774 (trust's fp8 pass at bf16, session 11): with ORT's optimizations on, the
    emulate_bf16 copy of the paged model is invalid ("Node input 'cast_45__to_fp32' is not a graph
    input ..."), with them off it runs and matches: ORT's class, as for the unpaged runs (it was
    ``ort-refused``)."""
    case = make_case(2500259774)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, _, fires = fd.run_one(case.model, case.feeds, ref, 4, "trt", precision="bf16")
    assert fires.get("trt-paged-kv") and cls in ("ort-itself", "ok"), (cls, detail)


def test_fused_attention_padded_query_rows_are_the_contract_not_wrong():
    """Seeds 3310816760 / 567340412 (session 14, seed 14501): fused-attention-trt-probed turns a
    right-padded attention into FusedAttention at O4 trt, whose contract writes zeros in padded query
    rows where the original computes values nobody reads. The run differs only there: with every
    0/1 mask all ones it matches, so it is `padded-rows` (noted), and nowhere else `wrong`."""
    for seed in (3310816760, 567340412):
        (level, target, cls, detail), = _runs(seed, [4], ["trt"])
        assert cls == "padded-rows", (seed, cls, detail)
    case = make_case(3310816760)
    names = [o.name for o in case.model.graph.output]
    # the original against itself has no FusedAttention to blame
    assert not fd._only_padded_rows_differ(case.model, case.model, names, case.feeds, None)


def test_padded_rows_leave_position_ids_alone():
    """Seed 1118843654 at O4 trt, opset pinned to 21 (session 20, seed 20500): a one-token step (S = 1)
    whose first sequence's only key is masked; FusedAttention zeroes that row by contract. The padded-rows
    check made every 0/1 2-D input all ones, the position ids [[0], [0], [0]] too, which then index past
    the one-row rotary table: the original failed there and the run was called `wrong`. Only inputs
    named as masks are unpadded now."""
    case = make_case(1118843654)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, 4, "trt", opset=21)
    assert cls == "padded-rows", (cls, detail)
    pos = [k for k in case.feeds if "position" in k]
    assert pos and fd._is_padding_mask(case.feeds[pos[0]]) and pos[0] not in fd._mask_feeds(case.feeds)


def test_precision_fp16_mask_fill_output_saturates():
    """Seed 876935673 under --precision fp16 (session 20, seed 20502): the shared mask (Where with
    finfo(float32).min) is a graph output; float16 compute gives -65504 there, the float32 original -3.4e38,
    which compare read as wrong at every level and target. Saturated to float16's bound (verify.saturate)
    the run is ok."""
    case = make_case(876935673)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, 1, "ort", precision="fp16")
    assert cls == "ok", (cls, detail)


def test_float16_compare_saturates_the_reference_and_the_run_alike():
    """A float16 run's output where the original gives finfo(float32).min: -65504 (a clipped constant) and
    -inf (overflow) both match, as verify.saturate has it; -60000 or the wrong sign there does not (the
    tolerance scales with the saturated reference, 65504, not 3.4e38)."""
    lo = float(np.finfo(np.float32).min)
    ref = np.array([lo, 0.5], np.float32)
    loosest = {"y": np.dtype(np.float16)}
    for fill in (-65504.0, -np.inf):
        assert fd.compare(["y"], [ref], [np.array([fill, 0.5], np.float32)], loosest)[0] == "ok", fill
    for got in ([-60000.0, 0.5], [65504.0, 0.5]):
        assert fd.compare(["y"], [ref], [np.array(got, np.float32)], loosest)[0] == "wrong", got

def test_contrib_gqa_right_padded_prompt_rows_are_noted_not_wrong():
    """Seed 2159279219 (session 21, seed 21001 --precision fp16): a float16 GroupQueryAttention with a local
    window of 2 over a right-padded prompt (3 of 5 tokens). ORT's float16 kernel ends a padding row's window at
    the sequence's last token, its float32 kernel at the row's own position (0 where no key is left), so the
    lowering at onnx / trt (Attention-23, the float32 rule) was 1.5 off on those two rows and `wrong`. Every
    kept row and the presents agree: `padded-rows` (noted). A kept row that differs is still wrong."""
    case = make_case(2159279219)
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    for target in ("onnx", "trt"):
        cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, 3, target)
        assert cls == "padded-rows" and "GroupQueryAttention" in detail, (target, cls, detail)
    off = [np.array(r, copy=True) for r in ref]
    off[0][0, 0] += 1.0  # sequence 0's first token: kept
    assert not fd._contrib_gqa_padded_rows_only(case.model, names, ref, off, case.feeds, None)
    assert fd._contrib_gqa_padded_rows_only(case.model, names, ref, ref, case.feeds, None)


def test_keyless_rows_of_a_probabilities_output_are_half_masked_rows():
    """Fuzz run 23004 (fp16), graph 2319559700 (qk_norm, left padding under a causal mask, the
    softmax [B, H, S, T] also a graph output): only the query rows with no kept key differed
    (uniform in the float32 original, not in float16), but the mask [B, S] was lined up only with an
    output's axis 1, so the probabilities were compared whole: `wrong` at every level, O1 included.
    Their rows are on axis 2: half-masked-rows, as for the attention's own output."""
    case = make_case(2319559700)
    assert "mask-left-padded" in case.traps and "intermediate-is-output" in case.traps
    ((cls, detail),) = [(r["cls"], r["detail"]) for r in fd.fuzz_case(case, [1], ["ort"], precision="fp16")[0]]
    assert cls == "half-masked-rows" and "softmax" in detail, (cls, detail)
    feeds = {"attention_mask": np.array([[0, 0, 1]], np.int64)}
    ref = [np.full((1, 2, 3, 3), 1 / 3, np.float32)]
    got = [ref[0].copy()]
    got[0][:, :, :2] = [0.6, 0.3, 0.1]   # the two keyless rows (no kept key at or before them)
    assert fd._kept_rows_match(["p"], ref, got, feeds, None, keyless=True)
    got[0][:, 1, 2] = [0.5, 0.25, 0.25]  # a kept row differs: not only keyless rows
    assert not fd._kept_rows_match(["p"], ref, got, feeds, None, keyless=True)


def test_row_keep_lines_a_mask_up_with_axis_1_or_2():
    m = [np.array([[False, True, True]])]
    assert fd._row_keep((1, 3, 4), m).shape == (1, 3, 4) and not fd._row_keep((1, 3, 4), m)[0, 0].any()
    assert fd._row_keep((1, 2, 3, 5), m)[0, :, 0].sum() == 0 and fd._row_keep((1, 2, 3, 5), m)[0, :, 1:].all()
    assert fd._row_keep((1, 1, 3, 1), m) is None           # a per-row scalar intermediate: compared whole
    both = fd._row_keep((1, 3, 3, 4), m)                   # H == S: either reading's kept entries
    assert both[0, 0, 1:].all() and both[0, 1:, 0].all() and not both[0, 0, 0].any()


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_quantizer_after_a_16bit_matmul_is_allowed_one_step_at_a_dequantized_output(precision):
    """docs/precision.md, known limits: a QuantizeLinear after a compute op that no DequantizeLinear
    feeds (here a MatMul of a float input) sees the op's 16-bit result, and a share of its elements
    lands one quantization step (0.05) away, beyond the low type's tolerance. The op stays 16-bit
    (where the conversion's speed is); an output the original computes straight from a
    DequantizeLinear gets one step more atol, the rule verify already has (dequantized_output_steps)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.05).astype(np.float32), "W"),
             numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
             numpy_helper.from_array(np.array(0, np.int8), "zp")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "scale", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [64, 32])],
                              [helper.make_tensor_value_info("out", T.FLOAT, [64, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    feeds = {"x": rng.standard_normal((64, 32)).astype(np.float32)}
    ref = fd._session(model, ort_optimizations=False).run(["out"], feeds)
    assert fd.quantized_steps(model) == {"out": pytest.approx(0.05)}
    cls, detail, optimized, _ = fd.run_one(model, feeds, ref, 1, "ort", precision=precision)
    assert cls == "ok", detail
    mm = next(n for n in optimized.graph.node if n.op_type == "MatMul")   # the MatMul stays 16-bit
    assert {t.data_type for t in optimized.graph.initializer if t.name == mm.input[1]} == {
        {"fp16": T.FLOAT16, "bf16": T.BFLOAT16}[precision]}
    # the same run judged without the step: one step off on some elements, wrong at the low tolerance
    from onnx_fuse.passes.precision import emulate_bf16

    runnable = emulate_bf16(optimized) if precision == "bf16" else optimized
    got = fd._session(runnable, ort_optimizations=False).run(["out"], feeds)
    loosest = {"out": fd.PRECISION_DTYPE[precision]}
    assert 0.049 < np.abs(got[0] - ref[0]).max() < 0.06   # one step (and the low type's rounding)
    assert fd.compare(["out"], ref, got, loosest)[0] == "wrong"
    assert fd.compare(["out"], ref, got, loosest, fd.quantized_steps(model))[0] == "ok"


@pytest.mark.parametrize("broken", [False, True])
def test_a_refusal_from_our_own_rule_files_is_a_crash(monkeypatch, broken):
    """optimize() refuses with a UserError when a built-in rule file does not load (fuzz 27000 ran while
    rules/attention/lower.yaml was mid-edit: 60 runs of 'bad expression' filed under refused-input, which
    counts as fine); the input is not at fault then: crash. A refusal with the rules loading stays
    refused-input."""
    import onnx
    from onnx import helper as oh

    import onnx_fuse
    import onnx_fuse.rewrite
    from onnx_fuse.errors import UserError

    def refuse(*a, **k):
        raise UserError("rules/attention/lower.yaml:163: fragment 'x': bad expression")

    monkeypatch.setattr(onnx_fuse, "optimize", refuse)
    real = onnx_fuse.rewrite.load_rules
    monkeypatch.setattr(onnx_fuse.rewrite, "load_rules",
                        lambda **k: (None, ["rules/attention/lower.yaml:163: bad expression"], []) if broken
                        else real(**k))
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    model = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g", [x],
                                        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]))
    cls, detail, _, _ = fd.run_one(model, {"x": np.ones(2, np.float32)}, [np.ones(2, np.float32)], 3, "ort")
    assert cls == ("crash" if broken else "refused-input"), (cls, detail)
    assert ("do not load" in detail) == broken


def test_padded_rows_checks_allow_a_quantized_outputs_step():
    """Seed 2766378798 (fuzz 28101, --precision fp16, O4 trt): attention under a right-padded causal mask, then
    a MatMul quantized and dequantized per channel (the DequantizeLinear an output). FusedAttention zeroes the
    two padded query rows (1.5 there: padded-rows by contract); with the mask all ones the float16 run rounds
    one quantization step apart (0.046, a step 0.048), which the first comparison allows (verify's
    dequantized-output step) but the padded-rows check compared without it: wrong before."""
    case = make_case(2766378798)
    assert case.motifs == ["quant_after"] and "mask-right-padded" in case.traps
    names = [o.name for o in case.model.graph.output]
    ref = fd._session(case.model, ort_optimizations=False).run(names, case.feeds)
    cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, 4, "trt", precision="fp16")
    assert cls == "padded-rows", (cls, detail)


def _identity_judge(mask: np.ndarray, row: int):
    """fd._judge on y = Identity(x) [2, 3, 4] beside a mask input (not read), the reference 0.5 off on batch row
    ``row``, the output float16 (--precision fp16): the class the classifier gives that difference."""
    from onnx import TensorProto, helper as oh

    elem = oh.np_dtype_to_tensor_dtype(mask.dtype)
    graph = oh.make_graph([oh.make_node("Identity", ["x"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                           oh.make_tensor_value_info("attention_mask", elem, list(mask.shape))],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    ref = x.copy()
    ref[row] += 0.5
    cls, detail, _ = fd._judge(model, model, ["y"], {"x": x, "attention_mask": mask}, [ref],
                               {"y": np.dtype(np.float16)})
    return cls, detail


KEYLESS_ROW_1 = [np.array([[1, 1, 0], [0, 0, 0]], bool).reshape(2, 1, 1, 3),            # True = kept
                 np.array([[0, 0, 1], [1, 1, 1]], bool).reshape(2, 1, 1, 3),            # True = masked
                 np.array([[0, 0, -1e4], [-1e4] * 3], np.float32).reshape(2, 1, 1, 3),  # additive
                 np.array([[0, 0, np.finfo(np.float16).min], [np.finfo(np.float16).min] * 3],
                          np.float16).reshape(2, 1, 1, 3),
                 np.array([[0], [-1e4]], np.float32).reshape(2, 1, 1, 1),               # one key flag (seed 60)
                 np.array([[1, 1, 0], [0, 0, 0]], np.float32).reshape(2, 1, 1, 3)]      # 0 / 1 float flags (fuzz50)


@pytest.mark.parametrize("k", range(len(KEYLESS_ROW_1)))
def test_a_4d_key_mask_rows_with_no_kept_key_are_half_masked_rows(k):
    """fuzz49 (session 44): fuzz_s45 mask4d --precision fp16 seeds 60 / 65 / 74 differed at onnx / trt O3-O4 only on
    the batch row a [B, 1, 1, T] key mask input leaves no key, but only 2-D masks were read: `wrong`. A 4-D key mask
    (bool either polarity, additive 0 / -1e4 / min) is read now: half-masked-rows."""
    cls, detail = _identity_judge(KEYLESS_ROW_1[k], row=1)
    assert cls == "half-masked-rows" and "4-D key mask" in detail, (cls, detail)


@pytest.mark.parametrize("k", range(len(KEYLESS_ROW_1)))
def test_a_4d_key_mask_row_that_keeps_keys_still_differs_wrong(k):
    """The same masks, the difference on batch row 0, which keeps keys under either bool polarity (not constant) and
    under the additive reading: wrong. So is a difference beside an additive 4-D input with other values (a bias:
    not read as a mask) or beside a bool mask whose rows all keep some key."""
    assert _identity_judge(KEYLESS_ROW_1[k], row=0)[0] == "wrong"
    assert _identity_judge(np.array([[0, 0, -1], [-1e4] * 3], np.float32).reshape(2, 1, 1, 3), row=1)[0] == "wrong"
    assert _identity_judge(np.array([[1, 1, 0], [1, 0, 1]], bool).reshape(2, 1, 1, 3), row=1)[0] == "wrong"


def test_2d_masks_are_read_as_before():
    """A 2-D 0 / 1 mask [B, S]: query rows with no kept key at or before them are half-masked-rows, a kept row that
    differs is wrong (unchanged by the 4-D reading)."""
    mask = np.array([[1, 1, 1], [0, 0, 0]], np.int64)
    cls, detail = _identity_judge(mask, row=1)
    assert cls == "half-masked-rows" and "4-D" not in detail, (cls, detail)
    assert _identity_judge(mask, row=0)[0] == "wrong"


def test_fuzz_s45_mask4d_fp16_seed_60_is_half_masked_rows():
    """The case fuzz49 found: mask4d near-key-one, additive [B, 1, 1, 1] = [[0], [-1e4]] under --precision fp16 at
    onnx O3 (0.49 off on batch row 1 only): half-masked-rows, not wrong."""
    from fuzz_motifs import make_s45_case

    results = fd.fuzz_case(make_s45_case(60, "mask4d"), [3], ["onnx"], precision="fp16")[0]
    assert [r["cls"] for r in results] == ["half-masked-rows"], [(r["cls"], r["detail"][:200]) for r in results]


def test_fuzz_s46_float_flag_mask_fp16_seed_16_is_half_masked_rows():
    """fuzz50's case: fuzz_s46 mask4d_every, a float32 0 / 1 key-keep mask [B, 1, 1, T] compared with 0 (Equal), batch
    row 0 all 0 (no key), --precision fp16 at onnx O3: 0.74 off on that row only (float32 and bf16 ok); a 0 / 1 float
    mask was not read (only additive 0 / <= -1e4 ones): wrong. Read as flags now: half-masked-rows."""
    from fuzz_motifs import make_s46_case

    results = fd.fuzz_case(make_s46_case(16, "mask4d_every"), [3], ["onnx"], precision="fp16")[0]
    assert [r["cls"] for r in results] == ["half-masked-rows"], [(r["cls"], r["detail"][:200]) for r in results]
