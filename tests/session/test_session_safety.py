"""InferenceSession and its cache against hostile files and a damaged cache folder.

Unsafe external data is refused before anything is hashed or loaded (and not handed to ONNX
Runtime, which follows hard links); FIFOs and devices are never opened for reading. The cache
survives bit rot that keeps size and times, a plain file in an entry's place, and staging folders
left by a process killed mid-save.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto

from onnx_fuse.session import InferenceSession, OnnxFuseWarning, UnsafeModelError
from onnx_fuse.session_cache import MANIFEST, MODEL_NAME, ModelCache

from .conftest import small_model

CPU = ["CPUExecutionProvider"]
SECRET = b"top secret bytes " * 64


def entries(cache: Path) -> list[Path]:
    root = cache / "v1" / "entries"
    return sorted(root.iterdir()) if root.exists() else []


def _external_model(folder: Path, location: str) -> Path:
    """small_model with W stored externally at ``location`` (which the test then points anywhere)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.onnx"
    onnx.save_model(small_model(hidden=64), path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.data", size_threshold=0)
    proto = onnx.load_model(path, load_external_data=False)
    for t in proto.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    e.value = location
    path.write_bytes(proto.SerializeToString())
    return path


def _attack(tmp_path: Path, kind: str) -> Path:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET * 4)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    if kind == "dotdot":
        return _external_model(model_dir, "../secret.bin")
    if kind == "absolute":
        return _external_model(model_dir, str(secret))
    if kind == "symlink":
        os.symlink(secret, model_dir / "link.data")
        return _external_model(model_dir, "link.data")
    if kind == "hardlink":
        os.link(secret, model_dir / "hard.data")
        return _external_model(model_dir, "hard.data")
    if kind == "fifo":
        os.mkfifo(model_dir / "pipe.data")
        return _external_model(model_dir, "pipe.data")
    if kind == "devzero":
        return _external_model(model_dir, "/dev/zero")
    raise AssertionError(kind)


ATTACKS = ["dotdot", "absolute", "symlink", "hardlink", "fifo", "devzero"]


@pytest.mark.parametrize("kind", ATTACKS)
def test_unsafe_external_data_is_refused_before_hashing(tmp_path, isolated_cache, kind):
    """Run in a child with a timeout: before the fix the FIFO and /dev/zero cases never returned."""
    model = _attack(tmp_path, kind)
    code = (
        "import sys\n"
        "from onnx_fuse.session import InferenceSession, UnsafeModelError\n"
        "try:\n"
        f"    InferenceSession({str(model)!r}, providers=['CPUExecutionProvider'], optimize_level=1)\n"
        "except UnsafeModelError as exc:\n"
        "    print('REFUSED', exc); sys.exit(0)\n"
        "print('LOADED'); sys.exit(3)\n")
    env = {**os.environ, "ONNX_FUSE_CACHE_DIR": str(isolated_cache)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("REFUSED") and "\n" not in line
    # Nothing about the secret reached the cache: no entry, no digest memo of any file.
    assert entries(isolated_cache) == []
    digests = isolated_cache / "v1" / "digests"
    memos = [json.loads(p.read_text()) for p in digests.glob("*.json")] if digests.exists() else []
    assert not [m for m in memos if isinstance(m, dict) and "secret" in m.get("path", "")]


def test_unsafe_model_error_is_also_onnxruntimes_fail(tmp_path):
    model = _attack(tmp_path, "hardlink")  # ONNX Runtime itself would read this one
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail):
        InferenceSession(str(model), providers=CPU, optimize_level=1)


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_model_path_that_is_a_special_file(tmp_path, kind):
    path = tmp_path / "pipe.onnx"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(UnsafeModelError, match="not a model file"):
        InferenceSession(str(path), providers=CPU, optimize_level=1)


# --- the cache folder ---------------------------------------------------------------------------

def _fill(model_bytes: bytes) -> tuple[InferenceSession, Path]:
    sess = InferenceSession(model_bytes, providers=CPU, optimize_level=1)
    assert sess.onnx_fuse_optimized
    return sess, Path(sess.onnx_fuse_stats.cache_entry)


def _strict_session(model_bytes: bytes) -> InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxFuseWarning)
        return InferenceSession(model_bytes, providers=CPU, optimize_level=1)


@pytest.mark.parametrize("victim", [MODEL_NAME, MODEL_NAME + ".data"])
def test_bit_rot_that_keeps_size_and_times_is_not_served(isolated_cache, victim):
    model = small_model(hidden=256).SerializeToString()
    _, entry = _fill(model)
    f = entry / victim
    good = f.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x01  # one bit
    st = f.stat()
    with open(f, "r+b") as fh:
        fh.write(data)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    # A disk flipping a bit changes no timestamp at all: make any stat-keyed memo agree.
    cache = ModelCache(isolated_cache)
    st = f.stat()
    memo = cache._memo_path(f.resolve())
    memo.write_text(json.dumps({"path": str(f.resolve()),
                                "stat": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                         st.st_ctime_ns],
                                "sha256": json.loads((entry / MANIFEST).read_text())["files"][victim]["sha256"]}))
    sess = _strict_session(model)
    assert sess.onnx_fuse_cache_hit is False  # rebuilt, not served
    assert f.read_bytes() == good
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ref = onnxruntime.InferenceSession(model, providers=CPU)
    for got, want in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("replacement", ["file", "symlink"])
def test_entry_replaced_by_a_file_or_link_is_rebuilt(isolated_cache, tmp_path, replacement):
    model = small_model().SerializeToString()
    _, entry = _fill(model)
    import shutil

    shutil.rmtree(entry)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the cache's")
    if replacement == "file":
        entry.write_bytes(b"plain file where an entry folder was")
    else:
        os.symlink(elsewhere, entry)
    sess = _strict_session(model)
    assert sess.onnx_fuse_optimized and sess.onnx_fuse_cache_hit is False
    assert entry.is_dir() and not entry.is_symlink()
    assert (elsewhere / "keep.txt").read_text() == "not the cache's"  # a link is never followed
    assert _strict_session(model).onnx_fuse_cache_hit is True


def test_staging_folder_of_a_killed_save_is_counted_and_swept(isolated_cache):
    first = small_model(seed=1).SerializeToString()
    _fill(first)
    cache = ModelCache(isolated_cache)
    # What a process killed inside cache.staging() leaves: a folder named after its key.
    dead_key = "ab" * 32
    dead = cache.tmp / f"{dead_key}-0123456789ab"
    dead.mkdir()
    (dead / MODEL_NAME).write_bytes(b"\0" * 300_000)
    # One that a live process is filling: its entry lock is held.
    live_key = "cd" * 32
    live = cache.tmp / f"{live_key}-0123456789ab"
    live.mkdir()
    (live / MODEL_NAME).write_bytes(b"\0" * 1000)
    assert cache.total_bytes() >= 301_000  # staging counts towards the limit
    with cache.lock(live_key):
        _fill(small_model(seed=2).SerializeToString())  # eviction sweeps after the fill
        assert not dead.exists()
        assert live.exists()
    assert cache.staging_bytes() < 300_000


def test_without_cache_large_models_reach_ort_as_a_file(monkeypatch):
    """Over BYTES_HANDOFF_LIMIT the optimized model is streamed to a temp file, not serialized
    whole into memory (twice) to be handed over as bytes."""
    import onnx_fuse.session as session_mod

    monkeypatch.setattr(session_mod, "BYTES_HANDOFF_LIMIT", 0)
    model = small_model(hidden=64).SerializeToString()
    sess = InferenceSession(model, providers=CPU, optimize_level=1, cache_dir=False)
    assert sess.onnx_fuse_optimized and sess._onnx_fuse_keepalive is not None
    x = np.ones((2, 4), np.float32)
    ref = onnxruntime.InferenceSession(model, providers=CPU)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-6)
