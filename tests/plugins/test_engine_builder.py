"""Engine builder: real TensorRT-RTX builds on the CPU, profiles, sidecar, cache, errors."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from onnx_fuse.errors import UserError
from onnx_fuse.plugins.engine_builder import (BuildOptions, EngineCache, build_engine,
                                              parse_profiles, parse_size, validate_profiles)
from onnx_fuse.plugins.trt_backend import try_load_backend

BACKEND, WHY = try_load_backend()
needs_builder = pytest.mark.skipif(BACKEND is None, reason=f"no TensorRT builder: {WHY}")
try:
    import tensorrt  # noqa: F401

    HAVE_TRT = True
except Exception:  # noqa: BLE001 - stub wheels fail in odd ways
    HAVE_TRT = False

MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"


def _opts(tmp_path, **kw):
    kw.setdefault("profiles", parse_profiles(["input_ids:1x1,2x16,4x64",
                                              "attention_mask:1x1,2x16,4x64"]))
    kw.setdefault("cache_dir", str(tmp_path / "cache"))
    kw.setdefault("progress", False)
    return BuildOptions(**kw)


# ---------------------------------------------------------------------------- parsing options

def test_parse_profiles_groups_inputs_and_repeats_start_a_new_profile():
    profiles = parse_profiles(["a:1x1,2x8,4x16", "b:1x1,2x8,4x16", "a:1x1,1x1,1x1", "b:3x4"])
    assert len(profiles) == 2
    assert profiles[0].inputs["a"].opt == (2, 8)
    assert profiles[1].inputs["b"].min == profiles[1].inputs["b"].max == (3, 4)


@pytest.mark.parametrize("spec", ["input_ids", "x:1x2,3x4", "x:1xq,2x2,3x3", "x:-1,1,1"])
def test_bad_profile_specs_are_user_errors(spec):
    with pytest.raises(UserError, match="--profile"):
        parse_profiles([spec])


def test_parse_size():
    assert parse_size("4G") == 4 << 30
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1.5k") == 1536
    assert parse_size("1048576") == 1 << 20
    with pytest.raises(UserError):
        parse_size("lots")


@pytest.mark.parametrize("specs, message", [
    ([], "dynamic inputs .*input_ids.*--profile input_ids:1x1"),
    (["input_ids:1x1,2x16,4x64"], "no shape range for dynamic input.*attention_mask"),
    (["input_idz:1x1,2x16,4x64", "attention_mask:1x1,2x16,4x64"], "no input 'input_idz'"),
    (["input_ids:1,2,4", "attention_mask:1x1,2x16,4x64"], "rank 2 .* rank 1"),
    (["input_ids:1x1,2x16,4x8", "attention_mask:1x1,2x16,4x64"], "MIN <= OPT <= MAX"),
    (["input_ids:1x1,2x16,4x64", "attention_mask:1x1,2x8,4x64"], "dim 'seq'"),
])
def test_profiles_are_validated_against_model_inputs(models, specs, message):
    with pytest.raises(UserError, match=message):
        validate_profiles(models.encoder(), parse_profiles(specs))


def test_fixed_dims_must_match(models):
    m = models.encoder()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 16
    with pytest.raises(UserError, match="axis 1 is fixed at 16"):
        validate_profiles(m, parse_profiles(["input_ids:1x8,2x16,4x16",
                                             "attention_mask:1x1,2x16,4x64"]))


# ---------------------------------------------------------------------------- real builds

@needs_builder
def test_build_writes_plan_and_sidecar(encoder, tmp_path):
    plan = tmp_path / "model.plan"
    result = build_engine(encoder, plan, _opts(tmp_path, opt_level=2, workspace=1 << 30))
    assert plan.stat().st_size > 1000 and not result.cache_hit
    side = json.loads((tmp_path / "model.plan.json").read_text())
    assert side["builder"]["library"] == BACKEND.name
    assert side["builder"]["version"] == BACKEND.version
    assert side["gpu"]  # "none" on CPU-only machines
    assert side["profiles"] == [{"input_ids": {"min": [1, 1], "opt": [2, 16], "max": [4, 64]},
                                 "attention_mask": {"min": [1, 1], "opt": [2, 16], "max": [4, 64]}}]
    assert side["plugins"] == []
    import hashlib

    assert side["model"]["sha256"] == hashlib.sha256(encoder.read_bytes()).hexdigest()
    assert side["plan_sha256"] == hashlib.sha256(plan.read_bytes()).hexdigest()
    assert len(side["options_hash"]) == 64 and side["build_seconds"] > 0
    assert side["applied"] == {"opt_level": 2, "workspace_bytes": 1 << 30}
    assert [i["name"] for i in side["inputs"]] == ["input_ids", "attention_mask"]
    assert side["inputs"][0]["shape"] == [-1, -1]
    assert side["outputs"][0]["shape"] == [-1, -1, 32]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@needs_builder
def test_second_build_hits_cache(encoder, tmp_path):
    first = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path))
    t0 = time.perf_counter()
    second = build_engine(encoder, tmp_path / "b.plan", _opts(tmp_path))
    assert second.cache_hit and not first.cache_hit
    assert time.perf_counter() - t0 < first.seconds
    assert (tmp_path / "a.plan").read_bytes() == (tmp_path / "b.plan").read_bytes()
    side = json.loads((tmp_path / "b.plan.json").read_text())
    assert side["cache"]["hit"] is True and side["plan"] == "b.plan"
    # Different options -> different key -> a real build.
    third = build_engine(encoder, tmp_path / "c.plan", _opts(tmp_path, opt_level=1))
    assert not third.cache_hit


@needs_builder
@pytest.mark.parametrize("damage", ["truncate", "flip", "drop_meta"])
def test_corrupt_cache_entry_is_rebuilt(encoder, tmp_path, damage):
    first = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path))
    key = first.meta["cache"]["key"]
    plan_path, meta_path = EngineCache(tmp_path / "cache").paths(key)
    data = plan_path.read_bytes()
    if damage == "truncate":
        plan_path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        plan_path.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    else:
        meta_path.unlink()
    notes = []
    again = build_engine(encoder, tmp_path / "b.plan", _opts(tmp_path), on_note=notes.append)
    assert not again.cache_hit
    assert (tmp_path / "b.plan").read_bytes() == data or len((tmp_path / "b.plan").read_bytes()) > 1000
    if damage != "drop_meta":
        assert any("corrupt" in n for n in notes)
    # The rebuilt entry is whole again: the next build is a hit.
    assert build_engine(encoder, tmp_path / "c.plan", _opts(tmp_path)).cache_hit


@needs_builder
def test_progress_monitor_reports_build_phases(encoder, tmp_path, monkeypatch):
    """TensorRT's IProgressMonitor drives the display: phases start, steps complete, finish."""
    import contextlib

    from onnx_fuse.plugins import engine_builder as eb

    events = []

    class Recorder:  # the slice of rich.progress.Progress the monitor uses
        def __init__(self):
            self.tasks = {}

        def add_task(self, description, total):
            task = len(self.tasks)
            self.tasks[task] = type("Task", (), {"total": total})
            events.append(("start", description.strip(), total))
            return task

        def update(self, task, **kw):
            events.append(("update", task, kw))

    @contextlib.contextmanager
    def recording(enabled, label):
        yield Recorder() if enabled else None

    monkeypatch.setattr(eb, "_progress", recording)
    build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, progress=True, cache_dir=""))
    if not BACKEND.progress_monitor:
        pytest.skip(f"{BACKEND.label} has no progress monitor")
    starts = [e for e in events if e[0] == "start"]
    assert starts and starts[0][2] >= 1
    assert any(e[0] == "update" and e[2].get("visible") is False for e in events)  # finished


@needs_builder
def test_concurrent_builds_of_one_engine_build_once(encoder, tmp_path):
    """The per-key file lock: two threads asking for the same engine, one builds, one hits."""
    import threading

    results, errors = [], []

    def build(name):
        try:
            results.append(build_engine(encoder, tmp_path / name, _opts(tmp_path)))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(f"{i}.plan",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.cache_hit for r in results) == [False, True]
    assert (tmp_path / "0.plan").read_bytes() == (tmp_path / "1.plan").read_bytes()


@needs_builder
def test_no_cache_never_writes_cache(encoder, tmp_path):
    r = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, cache_dir=""))
    assert not r.cache_hit and r.meta["cache"]["dir"] is None
    assert not (tmp_path / "cache").exists()


@needs_builder
def test_two_optimization_profiles(encoder, tmp_path):
    profiles = parse_profiles(["input_ids:1x1,1x8,1x16", "attention_mask:1x1,1x8,1x16",
                               "input_ids:2x16,4x64,8x128", "attention_mask:2x16,4x64,8x128"])
    r = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, profiles=profiles))
    assert len(r.meta["profiles"]) == 2


@needs_builder
@pytest.mark.parametrize("level", [0, 5])
def test_optimization_levels_build(encoder, tmp_path, level):
    r = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, opt_level=level))
    assert r.meta["applied"]["opt_level"] == level


@needs_builder
def test_hardware_compatible(encoder, tmp_path):
    r = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, hardware_compatible=True))
    if BACKEND.is_rtx:
        assert "SM80" in r.meta["applied"]["compute_capabilities"]


@needs_builder
def test_version_compatible_on_rtx_is_refused_with_reason(encoder, tmp_path):
    if not BACKEND.is_rtx:
        pytest.skip("TensorRT-RTX specific")
    with pytest.raises(UserError, match="lean runtime"):
        build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, version_compatible=True))


@needs_builder
def test_timing_cache_is_a_stated_noop_on_rtx(encoder, tmp_path):
    tc = tmp_path / "timing.cache"
    notes = []
    r = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, timing_cache=str(tc)),
                     on_note=notes.append)
    if BACKEND.is_rtx:
        assert not tc.exists() and any("no-op" in n for n in notes)
        assert r.meta["timing_cache"]["used"] is False
    else:
        assert tc.exists() and r.meta["timing_cache"]["used"] is True


@needs_builder
def test_parser_error_names_node_and_reason(tmp_path):
    x = helper.make_tensor_value_info("x", TP.FLOAT, [2, 4])
    axes = helper.make_tensor_value_info("axes", TP.INT64, [1])
    y = helper.make_tensor_value_info("y", TP.FLOAT, [2, 1])
    g = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="my_reduce")],
                          "g", [x, axes], [y])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    with pytest.raises(UserError, match=r"node 'my_reduce' \(ReduceSum\): .*[Aa]xis"):
        build_engine(path, tmp_path / "bad.plan",
                     BuildOptions(profiles=parse_profiles(["axes:1"]), cache_dir="",
                                  progress=False))


@needs_builder
def test_build_from_bytes(models, tmp_path):
    data = models.encoder().SerializeToString()
    r = build_engine(data, tmp_path / "a.plan", _opts(tmp_path))
    assert r.meta["model"]["path"] is None and (tmp_path / "a.plan").exists()


@needs_builder
def test_plugin_nodes_refused_before_parsing_without_full_tensorrt(models, tmp_path):
    if BACKEND.plugins:
        pytest.skip("full TensorRT can build plugin layers")
    path = tmp_path / "fa.onnx"
    onnx.save(models.fused_attention(), path)
    # TensorRT-RTX's parser would abort this process; reaching the assertion proves it never ran.
    with pytest.raises(UserError, match="cannot build plugin layers.*aborts"):
        build_engine(path, tmp_path / "fa.plan",
                     BuildOptions(profiles=parse_profiles(
                         ["q:1x1x128,1x8x128,2x16x128", "k:1x1x128,1x8x128,2x16x128",
                          "v:1x1x128,1x8x128,2x16x128", "lens:1,1,2"]), cache_dir="",
                         progress=False))
    with pytest.raises(UserError, match="--no-plugins"):
        build_engine(path, tmp_path / "fa.plan", BuildOptions(plugins=False, cache_dir=""))


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAVE_TRT, reason="needs full TensorRT (`import tensorrt` fails here)")
def test_timing_cache_is_written_and_reused_with_full_tensorrt(encoder, tmp_path):
    tc = tmp_path / "timing.cache"
    build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, timing_cache=str(tc), cache_dir="",
                                                    backend="tensorrt"))
    size = tc.stat().st_size
    r = build_engine(encoder, tmp_path / "b.plan", _opts(tmp_path, timing_cache=str(tc),
                                                        cache_dir="", backend="tensorrt"))
    assert r.meta["timing_cache"]["loaded_bytes"] == size


# ---------------------------------------------------------------------------- exported models

def _manifest():
    path = MODELS_DIR / "manifest.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("models", {})


@needs_builder
@pytest.mark.parametrize("name", sorted(_manifest()) or ["<none>"])
def test_exported_hf_models_build_with_dynamic_profiles(name, tmp_path):
    entry = _manifest().get(name)
    if entry is None or not (MODELS_DIR / entry["file"]).exists():
        pytest.skip("tests/data/models has no exported models")
    specs = []
    for inp in entry["inputs"]:
        specs.append(f"{inp}:1x1,2x16,4x64")
    r = build_engine(MODELS_DIR / entry["file"], tmp_path / f"{name}.plan",
                     _opts(tmp_path, profiles=parse_profiles(specs), cache_dir=""))
    assert r.meta["plan_bytes"] > 10_000
    assert {i["name"] for i in r.meta["inputs"]} <= set(entry["inputs"])


# ---------------------------------------------------------------------------- CLI

def _cli(argv):
    from onnx_fuse.cli.main import main

    return main(argv)


@needs_builder
def test_build_cli(encoder, tmp_path, capsys):
    args = ["build", str(encoder), "-o", str(tmp_path / "m.plan"), "--cache-dir",
            str(tmp_path / "c"), "-q", "--profile", "input_ids:1x1,2x16,4x64",
            "attention_mask:1x1,2x16,4x64", "--opt-level", "1", "--workspace", "256M"]
    assert _cli(args) == 0
    assert "built in" in capsys.readouterr().out
    assert _cli(args) == 0
    assert "cache hit" in capsys.readouterr().out
    assert _cli(["build", str(encoder), "-o", str(tmp_path / "m.plan"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_build_cli_missing_model_is_user_error(tmp_path, capsys):
    assert _cli(["build", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "m.plan")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_plan_files_are_not_left_half_written(encoder, tmp_path):
    if BACKEND is None:
        pytest.skip(WHY)
    out = tmp_path / "m.plan"
    out.write_bytes(b"old")
    with pytest.raises(UserError):
        build_engine(encoder, out, BuildOptions(cache_dir="", progress=False))  # no profiles
    assert out.read_bytes() == b"old"
    assert os.listdir(tmp_path) == sorted(os.listdir(tmp_path))  # nothing temporary lying around
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@needs_builder
@pytest.mark.parametrize("name", sorted(n for n in _manifest() if "dynamo" in n) or ["<none>"])
def test_trt_target_outputs_of_exported_models_build(name, tmp_path):
    """What users build: the optimizer's trt-target output at O3 (attention as Attention-23, norms,
    GELU and RoPE as standard ops) becomes a plan with dynamic profiles, attention included."""
    import onnx_fuse

    entry = _manifest().get(name)
    if entry is None or not (MODELS_DIR / entry["file"]).exists():
        pytest.skip("tests/data/models has no exported models")
    result = onnx_fuse.optimize(MODELS_DIR / entry["file"], level=3, target="trt")
    fused = result.report.ops_after
    assert fused.get("Attention", 0) == 2, fused  # both layers fused before TensorRT sees them
    optimized = tmp_path / f"{name}.trt.onnx"
    result.save(optimized)
    specs = [f"{inp}:1x1,2x16,4x64" for inp in entry["inputs"]]
    r = build_engine(optimized, tmp_path / f"{name}.plan",
                     _opts(tmp_path, profiles=parse_profiles(specs), cache_dir="", plugins=False))
    assert r.meta["plan_bytes"] > 10_000


@needs_builder
def test_plan_and_sidecar_follow_the_umask(encoder, tmp_path):
    """Like `optimize`, `build` creates files with 0666 & ~umask (they used to be 0600)."""
    old = os.umask(0o022)
    try:
        r = build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, cache_dir=""))
    finally:
        os.umask(old)
    assert oct(r.plan.stat().st_mode & 0o777) == oct(0o644)
    assert oct(r.sidecar.stat().st_mode & 0o777) == oct(0o644)


@needs_builder
def test_unusable_cache_folder_and_full_disk_are_one_line(encoder, tmp_path):
    """A --cache-dir that is a file (or cannot be made) and a plan that cannot be written were
    internal errors (NotADirectoryError, PermissionError, OSError ENOSPC); now one line each."""
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError, match="the engine cache folder is a file"):
        build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, cache_dir=str(tmp_path / "file")))
    with pytest.raises(UserError, match="cannot create the engine cache folder"):
        build_engine(encoder, tmp_path / "a.plan", _opts(tmp_path, cache_dir=str(tmp_path / "file" / "sub")))
    assert not (tmp_path / "a.plan").exists()
    if os.path.exists("/dev/full"):
        with pytest.raises(UserError, match=r"/dev/full: cannot write the plan \(No space left"):
            build_engine(encoder, "/dev/full", _opts(tmp_path, cache_dir=""))
