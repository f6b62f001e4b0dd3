"""fileio: the one cache folder, reads that refuse special files unread, cp-like output writes."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from onnx_fuse import fileio
from onnx_fuse.plugins import engine_cache
from onnx_fuse.session_cache import default_cache_dir


def test_one_cache_folder_for_sessions_engines_and_ptx(monkeypatch, tmp_path):
    """The session and the engine cache used to disagree (a relative $XDG_CACHE_HOME, ~)."""
    monkeypatch.delenv("ONNX_FUSE_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for xdg in ("relative/cache", str(tmp_path / "xdg"), ""):
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert default_cache_dir() == fileio.cache_dir()
        assert engine_cache.default_cache_dir() == fileio.cache_dir() / "engines"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert fileio.cache_dir() == tmp_path / "home" / ".cache" / "onnx-fuse"
    monkeypatch.setenv("ONNX_FUSE_CACHE_DIR", "~/c")
    assert engine_cache.default_cache_dir() == tmp_path / "home" / "c" / "engines"


@pytest.mark.parametrize("kind", ["fifo", "devzero", "folder"])
def test_special_files_are_refused_without_reading(tmp_path, kind):
    path = {"fifo": tmp_path / "p", "devzero": Path("/dev/zero"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would never return
    with pytest.raises(fileio.NotRegularFileError, match="not a regular file"):
        fileio.sha256_file(path)


def test_nofollow_refuses_a_symlink(tmp_path):
    (tmp_path / "real").write_bytes(b"x")
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert fileio.sha256_file(tmp_path / "link") == fileio.sha256_bytes(b"x")
    with pytest.raises(fileio.NotRegularFileError, match="symlink"):
        fileio.sha256_file(tmp_path / "link", nofollow=True)


def test_write_bytes_replaces_regular_files_atomically_and_writes_through_fifos(tmp_path):
    target = tmp_path / "a.bin"
    fileio.write_bytes(target, b"one")
    inode = target.stat().st_ino
    fileio.write_bytes(target, b"two")
    assert target.read_bytes() == b"two" and target.stat().st_ino != inode  # renamed over
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    fileio.write_bytes(fifo, b"through")
    reader.join(timeout=30)
    assert got == [b"through"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "pipe"]  # no temp files


def test_failed_write_keeps_the_old_content(tmp_path):
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with fileio.output_file(target) as f:
            f.write(b"half")
            raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]
