"""The optimized-model cache behind onnx_fuse.InferenceSession: hits, keys, concurrency,
integrity, eviction, external data, and the fallback when optimization fails.

Happy paths use level 1 (cleanup), which works whatever state the fusion rules are in.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper

import onnx_fuse
import onnx_fuse.session as session_mod
from onnx_fuse import fileio
from onnx_fuse.session import InferenceSession, OnnxFuseWarning, choose_target
from onnx_fuse.session_cache import MANIFEST, MODEL_NAME, ModelCache, default_cache_dir

from .conftest import demo_feeds, small_model

CPU = ["CPUExecutionProvider"]


def entries(cache: Path) -> list[Path]:
    root = cache / "v1" / "entries"
    return sorted(root.iterdir()) if root.exists() else []


def assert_same_outputs(sess, model, feeds):
    ref = onnxruntime.InferenceSession(model, providers=CPU)
    for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def no_fuse_warnings():
    """Fail the block on any OnnxFuseWarning."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", OnnxFuseWarning)
    return ctx


def test_miss_then_hit(demo_bytes, isolated_cache):
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxFuseWarning)
        first = InferenceSession(demo_bytes, providers=CPU, optimize_level=1)
        second = InferenceSession(demo_bytes, providers=CPU, optimize_level=1)
    assert first.onnx_fuse_optimized and first.onnx_fuse_cache_hit is False
    assert second.onnx_fuse_optimized and second.onnx_fuse_cache_hit is True
    assert first.onnx_fuse_stats.cache_key == second.onnx_fuse_stats.cache_key
    assert "optimize" in first.onnx_fuse_stats.seconds and "optimize" not in second.onnx_fuse_stats.seconds
    # The cleanup really ran: fewer nodes than the original, and the hit reports the same.
    report = second.onnx_fuse_stats.report
    assert report["nodes_after"] < report["nodes_before"] == 111
    (entry,) = entries(isolated_cache)
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["options"]["level"] == 1 and set(manifest["files"]) == {MODEL_NAME, MODEL_NAME + ".data"}
    assert len(onnx.load(str(entry / MODEL_NAME)).graph.node) == report["nodes_after"]
    for sess in (first, second):
        assert_same_outputs(sess, demo_bytes, demo_feeds())


def test_path_and_bytes_share_an_entry(small_bytes, tmp_path, isolated_cache):
    path = tmp_path / "m.onnx"
    path.write_bytes(small_bytes)
    a = InferenceSession(str(path), providers=CPU, optimize_level=1)
    b = InferenceSession(small_bytes, providers=CPU, optimize_level=1)
    assert a.onnx_fuse_cache_hit is False and b.onnx_fuse_cache_hit is True
    assert len(entries(isolated_cache)) == 1


def test_key_changes_with_options_and_content(small_bytes, isolated_cache, tmp_path):
    keys = {}
    for name, kw in {"O0": {"optimize_level": 0}, "O1": {"optimize_level": 1},
                     "O1-onnx": {"optimize_level": 1, "target": "onnx"},
                     "O1-verify": {"optimize_level": 1, "verify": True}}.items():
        sess = InferenceSession(small_bytes, providers=CPU, **kw)
        assert sess.onnx_fuse_optimized and sess.onnx_fuse_cache_hit is False, name
        keys[name] = sess.onnx_fuse_stats.cache_key
    assert len(set(keys.values())) == 4
    assert len(entries(isolated_cache)) == 4
    other = small_model(seed=1).SerializeToString()
    assert len(other) == len(small_bytes)  # same size, different weights
    sess = InferenceSession(other, providers=CPU, optimize_level=1)
    assert sess.onnx_fuse_cache_hit is False and sess.onnx_fuse_stats.cache_key not in keys.values()
    # Rule files count by content, not by name.
    cache = ModelCache(isolated_cache)
    rule = tmp_path / "extra.yaml"
    rule.write_text("# rules v1\n")
    k1 = cache.key_for(small_bytes, {"rules": [fileio.sha256_file(rule)]})[0]
    rule.write_text("# rules v2\n")
    k2 = cache.key_for(small_bytes, {"rules": [fileio.sha256_file(rule)]})[0]
    assert k1 != k2


def test_providers_choose_target():
    assert choose_target(None) == "ort"
    assert choose_target(["CPUExecutionProvider"]) == "ort"
    assert choose_target(["CUDAExecutionProvider", "CPUExecutionProvider"]) == "ort"
    assert choose_target([("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]) == "ort"
    assert choose_target(["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]) == "onnx"
    assert choose_target(["NvTensorRTRTXExecutionProvider", "CPUExecutionProvider"]) == "onnx"
    assert choose_target(["OpenVINOExecutionProvider"]) == "onnx"


def _fill(cache_dir: str, model: bytes, barrier, slow: float):
    """Child process: build a session (optimization slowed down so the fills overlap)."""
    import time as _time

    import onnx_fuse.session as sm

    real = sm.optimize

    def slow_optimize(*a, **k):
        _time.sleep(slow)
        return real(*a, **k)

    sm.optimize = slow_optimize
    barrier.wait(timeout=120)
    sess = sm.InferenceSession(model, providers=["CPUExecutionProvider"], optimize_level=1,
                               cache_dir=cache_dir)
    out = sess.run(None, demo_feeds())[0]
    return sess.onnx_fuse_optimized, sess.onnx_fuse_cache_hit, out


@pytest.mark.slow
def test_concurrent_fill_from_two_processes(demo_bytes, tmp_path, monkeypatch):
    # Spawned children import this module by name: make sure the repository root is on the path.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    ctx = multiprocessing.get_context("spawn")
    cache_dir = str(tmp_path / "shared-cache")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            pending = pool.starmap_async(_fill, [(cache_dir, demo_bytes, barrier, 1.0)] * 2)
            results = pending.get(timeout=300)
    assert all(optimized for optimized, _, _ in results)
    # One process built the entry while the other waited on the entry lock, then hit.
    assert sorted(hit for _, hit, _ in results) == [False, True]
    np.testing.assert_array_equal(results[0][2], results[1][2])
    (entry,) = entries(Path(cache_dir))
    cache = ModelCache(cache_dir)
    assert cache.lookup(entry.name) is not None
    assert not list((Path(cache_dir) / "v1" / "tmp").iterdir())  # no staging left behind


@pytest.mark.parametrize("damage", ["truncate", "flip-byte", "delete-model", "garbage-manifest"])
@pytest.mark.parametrize("victim", [MODEL_NAME, MODEL_NAME + ".data"])  # the graph, the weights
def test_damaged_entry_is_rebuilt(demo_bytes, isolated_cache, damage, victim):
    InferenceSession(demo_bytes, providers=CPU, optimize_level=1)
    (entry,) = entries(isolated_cache)
    model_file = entry / victim
    good = model_file.read_bytes()
    if damage == "truncate":
        with open(model_file, "r+b") as f:
            f.truncate(len(good) // 3)
    elif damage == "flip-byte":  # same size: only the checksum can tell
        data = bytearray(good)
        data[len(data) // 2] ^= 0xFF
        with open(model_file, "r+b") as f:
            f.write(data)
    elif damage == "delete-model":
        model_file.unlink()
    else:
        (entry / MANIFEST).write_text("{not json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxFuseWarning)
        sess = InferenceSession(demo_bytes, providers=CPU, optimize_level=1)
    assert sess.onnx_fuse_optimized and sess.onnx_fuse_cache_hit is False
    assert model_file.read_bytes() == good
    assert_same_outputs(sess, demo_bytes, demo_feeds())
    assert InferenceSession(demo_bytes, providers=CPU, optimize_level=1).onnx_fuse_cache_hit is True


def test_source_digests_are_memoized(small_bytes, isolated_cache, tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(small_bytes)
    old = time.time() - 60  # older than the racy window, so the memo may keep it
    os.utime(src, (old, old))
    InferenceSession(str(src), providers=CPU, optimize_level=1)
    cache = ModelCache(isolated_cache)
    cache.key_for(str(src), {})
    assert cache.files_hashed == 0  # the model's digest came from the memo
    (entry,) = entries(isolated_cache)
    assert cache.lookup(entry.name) is not None


def test_eviction_under_small_limit(isolated_cache):
    models = [small_model(seed=i, hidden=256).SerializeToString() for i in range(4)]
    first = InferenceSession(models[0], providers=CPU, optimize_level=1)
    (entry0,) = entries(isolated_cache)
    entry_size = sum(f.stat().st_size for f in entry0.iterdir())
    limit = int(entry_size * 2.5)  # room for two entries, not three
    kw = {"providers": CPU, "optimize_level": 1, "cache_size_limit": limit}
    clock = time.time() - 1000  # explicit LRU clock: entry i was last used at clock + i

    def used_at(key, t):
        os.utime(isolated_cache / "v1" / "entries" / key / MANIFEST, (t, t))

    keys = [first.onnx_fuse_stats.cache_key]
    used_at(keys[0], clock)
    for i in (1, 2):
        sess = InferenceSession(models[i], **kw)
        keys.append(sess.onnx_fuse_stats.cache_key)
        used_at(keys[i], clock + i)
    # When entry 2 arrived, entry 0 was the least recently used: evicted.
    assert sess.onnx_fuse_stats.evicted == [keys[0]]
    assert {e.name for e in entries(isolated_cache)} == {keys[1], keys[2]}
    # A hit makes entry 1 the most recent; adding model 3 then evicts entry 2.
    assert InferenceSession(models[1], **kw).onnx_fuse_cache_hit is True
    last = InferenceSession(models[3], **kw)
    assert last.onnx_fuse_stats.evicted == [keys[2]]
    assert {e.name for e in entries(isolated_cache)} == {keys[1], last.onnx_fuse_stats.cache_key}
    assert ModelCache(isolated_cache).total_bytes() <= limit
    # The evicted model loads again (a miss), and a session built before eviction still runs.
    assert InferenceSession(models[0], **kw).onnx_fuse_cache_hit is False
    first.run(None, {"x": np.ones((1, 4), np.float32)})


def _with_external_data(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    return path


def test_external_data_model(isolated_cache, tmp_path):
    model = small_model(seed=3, hidden=64)
    path = _with_external_data(model, tmp_path)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    first = InferenceSession(str(path), providers=CPU, optimize_level=1)
    assert first.onnx_fuse_optimized and first.onnx_fuse_cache_hit is False
    (entry,) = entries(isolated_cache)
    assert sorted(p.name for p in entry.iterdir()) == [MANIFEST, MODEL_NAME, MODEL_NAME + ".data"]
    assert_same_outputs(first, str(path), feeds)
    assert InferenceSession(str(path), providers=CPU, optimize_level=1).onnx_fuse_cache_hit is True
    # New weights of the same size with the old mtime restored: content hashing still sees it.
    data = tmp_path / "ext.onnx.data"
    st = data.stat()
    changed = small_model(seed=4, hidden=64)
    onnx.save_model(changed, str(tmp_path / "tmp.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="tmp.onnx.data", size_threshold=0)
    new_bytes = (tmp_path / "tmp.onnx.data").read_bytes()
    assert len(new_bytes) == st.st_size
    data.write_bytes(new_bytes)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = InferenceSession(str(path), providers=CPU, optimize_level=1)
    assert third.onnx_fuse_cache_hit is False
    assert_same_outputs(third, str(path), feeds)
    y_new = third.run(["y"], feeds)[0]
    y_old = first.run(["y"], feeds)[0]
    assert not np.allclose(y_new, y_old)


def test_no_cache(small_bytes, isolated_cache, tmp_path):
    sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1, cache_dir=False)
    assert sess.onnx_fuse_optimized and sess.onnx_fuse_cache_hit is None
    assert not isolated_cache.exists()
    path = _with_external_data(small_model(), tmp_path)
    sess = InferenceSession(str(path), providers=CPU, optimize_level=1, cache_dir=False)
    assert sess.onnx_fuse_optimized
    assert_same_outputs(sess, str(path), {"x": np.ones((2, 4), np.float32)})


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ONNX_FUSE_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("ONNX_FUSE_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "onnx-fuse"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, per the XDG spec
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "onnx-fuse"


def _fuse_warnings(caught):
    return [w for w in caught if issubclass(w.category, OnnxFuseWarning)]


def test_fallback_when_optimize_raises(monkeypatch, demo_bytes, isolated_cache):
    def broken(*args, **kwargs):
        raise RuntimeError("rule engine exploded")

    monkeypatch.setattr(session_mod, "optimize", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(demo_bytes, providers=CPU, optimize_level=1)
    (warning,) = _fuse_warnings(caught)
    assert "rule engine exploded" in str(warning.message)
    assert issubclass(OnnxFuseWarning, UserWarning)
    assert not sess.onnx_fuse_optimized
    assert "rule engine exploded" in sess.onnx_fuse_stats.fallback_reason
    assert not entries(isolated_cache)
    assert_same_outputs(sess, demo_bytes, demo_feeds())


def _wrap_optimize(monkeypatch, edit):
    real = session_mod.optimize

    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        edit(result.model)
        return result

    monkeypatch.setattr(session_mod, "optimize", wrapped)


def test_fallback_when_interface_changes(monkeypatch, small_bytes):
    def rename_output(model):
        model.graph.outputs[0].name = "renamed"

    _wrap_optimize(monkeypatch, rename_output)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1)
    (warning,) = _fuse_warnings(caught)
    assert "outputs changed" in str(warning.message)
    assert [o.name for o in sess.get_outputs()] == ["y", "z"]


def test_fallback_when_output_dtype_changes(monkeypatch, small_bytes):
    import onnx_ir as ir

    def retype(model):
        model.graph.outputs[0].type = ir.TensorType(ir.DataType.DOUBLE)

    _wrap_optimize(monkeypatch, retype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1)
    assert len(_fuse_warnings(caught)) == 1
    assert not sess.onnx_fuse_optimized


def test_refined_shapes_are_restored(monkeypatch, small_bytes):
    import onnx_ir as ir

    def refine(model):
        model.graph.outputs[1].shape = ir.Shape(["batch", 4])  # z was declared [?, ?]

    _wrap_optimize(monkeypatch, refine)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxFuseWarning)
        sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1)
    ref = onnxruntime.InferenceSession(small_bytes, providers=CPU)
    assert sess.onnx_fuse_optimized
    assert [o.shape for o in sess.get_outputs()] == [o.shape for o in ref.get_outputs()]


def test_fallback_when_ort_refuses_the_optimized_graph(monkeypatch, small_bytes):
    import onnx_ir as ir

    def add_unknown_op(model):
        x = model.graph.inputs[0]
        model.graph.append(ir.node("NoSuchOp", [x], domain="made.up", num_outputs=1))
        model.opset_imports["made.up"] = 1

    _wrap_optimize(monkeypatch, add_unknown_op)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1)
    (warning,) = _fuse_warnings(caught)
    assert "could not load the optimized model" in str(warning.message)
    assert not sess.onnx_fuse_optimized
    assert_same_outputs(sess, small_bytes, {"x": np.ones((2, 4), np.float32)})


def test_default_level_works_or_falls_back_once(demo_bytes):
    """Level 3 is the default: either it optimizes, or it warns exactly once and runs the original."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = onnx_fuse.InferenceSession(demo_bytes, providers=CPU)
    fuse = _fuse_warnings(caught)
    assert len(fuse) == (0 if sess.onnx_fuse_optimized else 1)
    assert sess.onnx_fuse_stats.level == 3
    assert_same_outputs(sess, demo_bytes, demo_feeds())


def test_verify_on_first_optimization(small_bytes):
    sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1, verify=True)
    assert sess.onnx_fuse_optimized and sess.onnx_fuse_stats.report["verify_passed"] is True


def test_fallback_when_verification_fails(monkeypatch, small_bytes):
    """A wrong rewrite (here: a perturbed weight) caught by verify=True falls back."""
    import onnx_ir as ir

    from onnx_fuse.verify import verify as run_verify

    real = session_mod.optimize

    def wrong_rewrite(source, **kwargs):
        want_verify = kwargs.pop("verify", False)
        result = real(source, **kwargs)
        w = result.model.graph.initializers["W"]
        w.const_value = ir.tensor(w.const_value.numpy() * 1.5, name="W")
        if want_verify:
            result.report.verify = run_verify(onnx.ModelProto.FromString(source), result.model)
        return result

    monkeypatch.setattr(session_mod, "optimize", wrong_rewrite)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = InferenceSession(small_bytes, providers=CPU, optimize_level=1, verify=True)
    (warning,) = _fuse_warnings(caught)
    assert "verification failed" in str(warning.message)
    assert not checked.onnx_fuse_optimized
    assert_same_outputs(checked, small_bytes, {"x": np.ones((2, 4), np.float32)})
    # Without verify the same wrong rewrite would have been served: the check is what caught it.
    unchecked = InferenceSession(small_bytes, providers=CPU, optimize_level=1)
    ref = onnxruntime.InferenceSession(small_bytes, providers=CPU)
    feeds = {"x": np.ones((2, 4), np.float32)}
    assert unchecked.onnx_fuse_optimized
    assert not np.allclose(unchecked.run(["y"], feeds)[0], ref.run(["y"], feeds)[0])


def test_unusable_cache_dir_still_optimizes(small_bytes, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("in the way")
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxFuseWarning)
        sess = InferenceSession(small_bytes, providers=CPU, optimize_level=1, cache_dir=not_a_dir)
    assert sess.onnx_fuse_optimized and sess.onnx_fuse_cache_hit is None


def test_ort_format_models_pass_through(small_bytes, tmp_path, isolated_cache):
    so = onnxruntime.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "small.ort")
    so.add_session_config_entry("session.save_model_format", "ORT")
    onnxruntime.InferenceSession(small_bytes, so, providers=CPU)
    ort_file = tmp_path / "small.ort"
    feeds = {"x": np.ones((2, 4), np.float32)}
    for source in (str(ort_file), ort_file.read_bytes()):
        with warnings.catch_warnings():
            warnings.simplefilter("error", OnnxFuseWarning)
            sess = InferenceSession(source, providers=CPU)
        assert not sess.onnx_fuse_optimized and "ORT-format" in sess.onnx_fuse_stats.fallback_reason
        assert_same_outputs(sess, small_bytes, feeds)
    assert not entries(isolated_cache)


def test_key_covers_versions(monkeypatch, small_bytes, isolated_cache):
    import onnx_fuse.session_cache as cache_mod

    cache = ModelCache(isolated_cache)
    k1, parts = cache.key_for(small_bytes, {"level": 1})
    assert set(parts["versions"]) >= {"onnx_fuse", "onnx_fuse_code", "onnx", "onnx_ir", "onnxruntime"}
    real = cache_mod.versions()
    monkeypatch.setattr(cache_mod, "versions", lambda: {**real, "onnxruntime": "0.0.0"})
    k2, _ = cache.key_for(small_bytes, {"level": 1})
    assert k1 != k2


def test_provider_errors_are_not_blamed_on_the_graph(small_bytes):
    """A provider ORT cannot create fails for the original too: ORT's own EP fallback applies to
    the optimized graph, as it would to the original, and nothing is blamed on onnx-fuse."""
    unknown = "not in available provider names"  # ORT's own UserWarning, expected for both
    with warnings.catch_warnings(), pytest.warns(UserWarning, match=unknown):
        warnings.simplefilter("error", OnnxFuseWarning)
        sess = InferenceSession(small_bytes, providers=["NoSuchExecutionProvider"], optimize_level=1)
    with pytest.warns(UserWarning, match=unknown):
        ref = onnxruntime.InferenceSession(small_bytes, providers=["NoSuchExecutionProvider"])
    assert sess.onnx_fuse_optimized
    assert sess.get_providers() == ref.get_providers()
    with pytest.warns(UserWarning, match=unknown):
        expected = type(_raised(lambda: onnxruntime.InferenceSession(
            small_bytes, providers=["NoSuchExecutionProvider"], enable_fallback=0)))
    with pytest.warns(UserWarning, match=unknown), pytest.raises(expected):
        InferenceSession(small_bytes, providers=["NoSuchExecutionProvider"], optimize_level=1,
                         enable_fallback=0)


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("expected an exception")
