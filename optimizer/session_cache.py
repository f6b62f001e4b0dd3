"""The on-disk cache of optimized models behind ``onnx_fuse.InferenceSession``.

One entry per (model content, options, versions), in a folder of its own::

    <cache_dir>/v1/entries/<key>/model.onnx        the optimized model
                                 model.onnx.data   its weights, when the source had external data
                                 manifest.json     key parts, versions, sha256 + size of every file
    <cache_dir>/v1/locks/<key>.lock                per-entry file lock (filelock)
    <cache_dir>/v1/digests/*.json                  memo: file stat fingerprint -> sha256
    <cache_dir>/v1/tmp/                            staging folders, moved into entries/ with os.replace

The key is the sha256 of the model file's bytes, the bytes of every external-data file it names,
the options that change the optimized graph (level, target, rule files' contents) and the versions
of onnx-fuse (plus a hash of its own sources and rules, so an editable install never serves a stale
graph), onnx, onnx-ir and onnxruntime. Content, not size + mtime, because size + mtime miss real
edits: ``cp -p``/rsync/tar/git restore old mtimes, and re-exporting a model rewrites its weights
without changing their size. Hashing costs about a second per GB, so digests are memoized by a stat
fingerprint (device, inode, size, mtime_ns, ctime_ns; ctime cannot be set from user space) and a file
modified within the last two seconds is never memoized (the "racy git" problem: a write in the same
timestamp tick as the memo would otherwise go unseen).

Filling is safe across processes: the entry lock is held while checking, building and loading an
entry; the entry is built in a staging folder and appears in one ``os.replace``, manifest included,
so a reader without the lock sees either no entry or a whole one. A hit checks every file's size and
sha256 (memoized) against the manifest; a truncated or corrupted entry is moved aside and rebuilt.
The cache has a size limit; after each fill the least recently used entries (by the manifest's
mtime, which every hit touches; filesystem atime is unreliable under relatime/noatime) are removed,
skipping any whose lock is held by another session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import filelock

log = logging.getLogger("onnx_fuse.session")

FORMAT = 1
DEFAULT_SIZE_LIMIT = 2 * 1024**3
MANIFEST = "manifest.json"
MODEL_NAME = "model.onnx"
# A lock held longer than this by another process (a huge model being optimized) makes us give up
# on the cache for this session and optimize in memory instead of waiting forever.
LOCK_TIMEOUT_S = 900.0
# Staging folders older than this belong to crashed processes and are swept during eviction.
STALE_TMP_S = 3600.0
# Digest memos not rewritten for this long are swept too (the worst case is one rehash).
STALE_DIGEST_S = 30 * 86400.0
_RACY_S = 2.0
_CHUNK = 8 * 1024 * 1024


def default_cache_dir() -> Path:
    """$ONNX_FUSE_CACHE_DIR, else $XDG_CACHE_HOME/onnx-fuse, else ~/.cache/onnx-fuse."""
    env = os.environ.get("ONNX_FUSE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative values
        return Path(xdg) / "onnx-fuse"
    return Path.home() / ".cache" / "onnx-fuse"


# ---------------------------------------------------------------------------------------------
# Hashing


def _fingerprint(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over onnx-fuse's own sources, rules and plugin contracts (.py/.yaml/.json).

    The version number alone would let an editable install serve graphs from older rules.
    Hashing ~200 small files costs a few milliseconds, once per process.
    """
    import importlib.util

    roots = set()
    for name in ("onnx_fuse", "onnx_fuse.rules", "onnx_fuse.plugins"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)  # finds without importing the subpackage
            if spec is not None and spec.submodule_search_locations:
                roots.update(Path(p).resolve() for p in spec.submodule_search_locations)
    h = hashlib.sha256()
    for root in sorted(roots):
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".yaml", ".yml", ".json") and "__pycache__" not in p.parts and p.is_file():
                h.update(str(p.relative_to(root)).encode() + b"\0")
                h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def versions() -> dict[str, str]:
    import onnx
    import onnx_ir
    import onnxruntime

    import onnx_fuse

    return {"onnx_fuse": onnx_fuse.__version__, "onnx_fuse_code": code_fingerprint()[:16],
            "onnx": onnx.__version__, "onnx_ir": onnx_ir.__version__,
            "onnxruntime": onnxruntime.__version__}


# ---------------------------------------------------------------------------------------------
# The cache


@dataclasses.dataclass
class Entry:
    """A valid entry: where its model is and what its manifest says."""

    key: str
    path: Path
    manifest: dict[str, Any]

    @property
    def model_path(self) -> Path:
        return self.path / MODEL_NAME

    @property
    def has_external_data(self) -> bool:
        return any(name != MODEL_NAME for name in self.manifest["files"])

    @property
    def nbytes(self) -> int:
        return sum(f["size"] for f in self.manifest["files"].values())


class ModelCache:
    """The cache folder; see the module docstring for layout and guarantees."""

    def __init__(self, root: str | os.PathLike, size_limit: int = DEFAULT_SIZE_LIMIT) -> None:
        self.root = Path(root).expanduser() / f"v{FORMAT}"
        self.size_limit = int(size_limit)
        self.entries = self.root / "entries"
        self.locks = self.root / "locks"
        self.digests = self.root / "digests"
        self.tmp = self.root / "tmp"
        for d in (self.entries, self.locks, self.digests, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        #: files hashed (not served from the digest memo) by this object: lets tests see the memo work.
        self.files_hashed = 0

    # -- digests ---------------------------------------------------------------------------------

    def _memo_path(self, path: Path) -> Path:
        return self.digests / (hashlib.sha256(os.fsencode(path)).hexdigest()[:40] + ".json")

    def file_digest(self, path: str | os.PathLike, *, trusted_fresh: bool = False) -> str:
        """sha256 of a file, memoized by its stat fingerprint.

        ``trusted_fresh`` memoizes even a just-written file: for entry files this cache wrote and
        closed itself, where no concurrent writer can hide in the same timestamp tick.
        """
        path = Path(path).resolve()
        memo = self._memo_path(path)
        st = path.stat()
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(memo.read_text())
            if data["path"] == str(path) and data["stat"] == _fingerprint(st):
                return data["sha256"]
        digest = _hash_file(path)
        self.files_hashed += 1
        after = path.stat()
        unchanged = _fingerprint(after) == _fingerprint(st)
        if unchanged and (trusted_fresh or time.time() - after.st_mtime > _RACY_S):
            _write_json_atomic(memo, {"path": str(path), "stat": _fingerprint(after), "sha256": digest},
                               self.tmp)
        return digest

    def _forget_digest(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            self._memo_path(path.resolve()).unlink()

    # -- keys ------------------------------------------------------------------------------------

    def key_for(self, source: str | os.PathLike | bytes, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The entry key for a model and the options that shape its optimized graph.

        Returns the hex key and the parts it hashes (kept in the manifest for humans).
        Raises OSError for unreadable files; the caller treats that as "do not optimize".
        """
        parts: dict[str, Any] = {"format": FORMAT, "options": dict(options), "versions": versions()}
        if isinstance(source, (bytes, bytearray, memoryview)):
            parts["model"] = hashlib.sha256(source).hexdigest()
            parts["external"] = []
        else:
            path = Path(source).resolve()
            parts["model"] = self.file_digest(path)
            base = path.parent
            parts["external"] = [[loc, self.file_digest(base / loc)]
                                 for loc in self._external_locations(path, parts["model"])]
        blob = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest(), parts

    def _external_locations(self, path: Path, model_digest: str) -> list[str]:
        """Sorted external-data locations a model file names; memoized by the model's digest."""
        memo = self.digests / f"ext-{model_digest}.json"
        with contextlib.suppress(OSError, ValueError):
            return list(json.loads(memo.read_text()))
        import onnx

        from onnx_fuse.external_data import external_info, iter_model_tensors

        proto = onnx.load_model(str(path), load_external_data=False)
        locs = sorted({external_info(t).get("location", "") for t in iter_model_tensors(proto)
                       if t.data_location == onnx.TensorProto.EXTERNAL} - {""})
        _write_json_atomic(memo, locs, self.tmp)
        return locs

    # -- entries ---------------------------------------------------------------------------------

    def lock(self, key: str) -> filelock.FileLock:
        return filelock.FileLock(str(self.locks / f"{key}.lock"), timeout=LOCK_TIMEOUT_S)

    def lookup(self, key: str) -> Entry | None:
        """The valid entry for ``key`` (touched as used), or None. A broken entry is moved aside.

        Call with the entry lock held.
        """
        path = self.entries / key
        if not path.exists():
            return None
        problem = self._check(path, key)
        if problem:
            log.warning("onnx-fuse cache entry %s is broken (%s); rebuilding it", path, problem)
            self._remove(path)
            return None
        manifest = json.loads((path / MANIFEST).read_text())
        with contextlib.suppress(OSError):
            os.utime(path / MANIFEST)  # LRU clock
        return Entry(key, path, manifest)

    def _check(self, path: Path, key: str) -> str | None:
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            files = manifest["files"]
            if manifest.get("key") != key or MODEL_NAME not in files:
                return "manifest does not match its key"
            for name, want in files.items():
                f = path / name
                if not f.is_file():
                    return f"{name} is missing"
                if f.stat().st_size != want["size"]:
                    return f"{name} has {f.stat().st_size} bytes, manifest says {want['size']}"
                if self.file_digest(f) != want["sha256"]:
                    return f"{name} checksum differs from the manifest"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"unreadable manifest ({exc})"
        return None

    @contextlib.contextmanager
    def staging(self, key: str) -> Iterator[Path]:
        """A fresh staging folder for building ``key``; removed afterwards unless committed."""
        stage = self.tmp / f"{key[:16]}-{uuid.uuid4().hex[:12]}"
        stage.mkdir()
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def commit(self, key: str, stage: Path, info: Mapping[str, Any]) -> Entry:
        """Checksum the staged files, write the manifest, move the folder into place.

        Call with the entry lock held.
        """
        files = {}
        for f in sorted(stage.iterdir()):
            if f.is_file():
                files[f.name] = {"size": f.stat().st_size, "sha256": _hash_file(f)}
        manifest = {"key": key, "format": FORMAT, "created": time.time(), "files": files, **info}
        _write_json_atomic(stage / MANIFEST, manifest, stage)
        final = self.entries / key
        if final.exists():
            self._remove(final)
        os.replace(stage, final)
        # Memoize the digests of the files we just wrote, so the first hit does not rehash them.
        for name, meta in files.items():
            st = (final / name).stat()
            if st.st_size == meta["size"]:
                _write_json_atomic(self._memo_path((final / name).resolve()),
                                   {"path": str((final / name).resolve()), "stat": _fingerprint(st),
                                    "sha256": meta["sha256"]}, self.tmp)
        return Entry(key, final, manifest)

    def _remove(self, path: Path) -> None:
        """Move an entry aside in one rename (readers never see half of it), then delete it."""
        trash = self.tmp / f"trash-{path.name[:16]}-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(path, trash)
        except OSError:
            return
        for f in trash.iterdir():
            self._forget_digest(path / f.name)
        shutil.rmtree(trash, ignore_errors=True)

    # -- eviction --------------------------------------------------------------------------------

    def list_entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, folder) for every entry, oldest first."""
        out = []
        for path in self.entries.iterdir():
            try:
                used = (path / MANIFEST).stat().st_mtime
                size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
            except OSError:
                continue  # being removed or never finished
            out.append((used, size, path))
        return sorted(out)

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.list_entries())

    def evict(self, *, keep: Sequence[str] = ()) -> list[str]:
        """Remove least recently used entries until the cache fits its limit; return their keys.

        Entries in ``keep`` and entries whose lock another session holds are skipped.
        """
        removed: list[str] = []
        try:
            with filelock.FileLock(str(self.locks / "evict.lock"), timeout=0):
                self._sweep_tmp()
                entries = self.list_entries()
                total = sum(size for _, size, _ in entries)
                for _, size, path in entries:
                    if total <= self.size_limit:
                        break
                    if path.name in keep:
                        continue
                    try:
                        with self.lock(path.name).acquire(timeout=0):
                            self._remove(path)
                    except filelock.Timeout:
                        continue
                    total -= size
                    removed.append(path.name)
        except filelock.Timeout:
            pass  # another process is evicting right now
        return removed

    def _sweep_tmp(self) -> None:
        now = time.time()
        stale = [(p, STALE_TMP_S) for p in self.tmp.iterdir()]
        stale += [(p, STALE_DIGEST_S) for p in self.digests.iterdir()]
        for p, age in stale:
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > age:
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink()


def _write_json_atomic(path: Path, data: Any, tmp_dir: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".json-", dir=tmp_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
