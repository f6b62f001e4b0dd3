"""The on-disk cache of optimized models behind ``onnx_fuse.InferenceSession``.

One entry per (model content, options, versions), in a folder of its own::

    <cache_dir>/v1/entries/<key>/model.onnx        the optimized model
                                 model.onnx.data   its weights, when the source had external data
                                 manifest.json     key parts, versions, sha256 + size of every file
    <cache_dir>/v1/locks/<key>.lock                per-entry file lock (filelock)
    <cache_dir>/v1/digests/*.json                  memo: file stat fingerprint -> sha256
    <cache_dir>/v1/tmp/<key>-<id>/                 staging folders, moved into entries/ with os.replace

The key is the sha256 of the model file's bytes, the bytes of every external-data file it names
(validated by ``external_data`` first: nothing outside the model's folder, no FIFO or device, is
read),
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
so a reader without the lock sees either no entry or a whole one. A hit reads every file of the
entry and checks its size and CRC-32 against the manifest, every time: a memo keyed by stat would
miss bit rot and any corruption that keeps size and times, and a flipped bit served as a hit is a
silently wrong output. CRC-32 catches every 1-bit error and every burst up to 32 bits at about three
times the speed of sha256 here, and the read leaves the pages cached for ONNX Runtime's own read.
A truncated, corrupted or foreign entry (a plain file or a symlink in its place) is moved aside
and rebuilt.

The cache has a size limit; after each fill the least recently used entries (by the manifest's
mtime, which every hit touches; filesystem atime is unreliable under relatime/noatime) are removed,
skipping any whose lock is held by another session. Staging folders count towards the limit; one
whose entry lock nobody holds belongs to a process that died while saving and is removed at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import mmap
import os
import shutil
import stat
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import filelock

from onnx_fuse import fileio

log = logging.getLogger("onnx_fuse.session")

FORMAT = 1
DEFAULT_SIZE_LIMIT = 2 * 1024**3
MANIFEST = "manifest.json"
MODEL_NAME = "model.onnx"
# A lock held longer than this by another process (a huge model being optimized) makes us give up
# on the cache for this session and optimize in memory instead of waiting forever.
LOCK_TIMEOUT_S = 900.0
# Temp files in tmp/ that no lock vouches for (a digest memo's temp file) are swept after this.
STALE_TMP_S = 600.0
# Digest memos not rewritten for this long are swept too (the worst case is one rehash).
STALE_DIGEST_S = 30 * 86400.0
_RACY_S = 2.0
_KEY_LEN = 64  # hex sha256

#: The cache folder (fileio holds the one definition).
default_cache_dir = fileio.cache_dir


# ---------------------------------------------------------------------------------------------
# Hashing


def _fingerprint(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _file_sums(path: Path) -> tuple[str, int]:
    """sha256 and CRC-32 of a file in one read (at commit, for the manifest)."""
    sha, crc = hashlib.sha256(), 0
    with fileio.open_regular(path, nofollow=True) as f:
        while chunk := f.read(fileio.CHUNK):
            sha.update(chunk)
            crc = zlib.crc32(chunk, crc)
    return sha.hexdigest(), crc


def _crc32(path: Path) -> int:
    """CRC-32 of a file through a read-only map: no copies into Python bytes (about 20% faster)."""
    with fileio.open_regular(path, nofollow=True) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 0
        crc, step = 0, 64 * 1024 * 1024
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m, memoryview(m) as view:
            for start in range(0, size, step):
                with view[start:start + step] as part:
                    crc = zlib.crc32(part, crc)
        return crc


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

    def file_digest(self, path: str | os.PathLike) -> str:
        """sha256 of a source file (model or weights), memoized by its stat fingerprint.

        Entry files are never served from this memo: ``lookup`` reads them in full.
        """
        path = Path(path).resolve()
        memo = self._memo_path(path)
        st = path.stat()
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(memo.read_text())
            if data["path"] == str(path) and data["stat"] == _fingerprint(st):
                return data["sha256"]
        digest = fileio.sha256_file(path)  # refuses FIFOs and devices unread
        self.files_hashed += 1
        after = path.stat()
        unchanged = _fingerprint(after) == _fingerprint(st)
        if unchanged and time.time() - after.st_mtime > _RACY_S:
            fileio.write_json(memo, {"path": str(path), "stat": _fingerprint(after), "sha256": digest})
        return digest

    # -- keys ------------------------------------------------------------------------------------

    def key_for(self, source: str | os.PathLike | bytes, options: Mapping[str, Any],
                external: Sequence[str] | None = None) -> tuple[str, dict[str, Any]]:
        """The entry key for a model and the options that shape its optimized graph.

        ``external``: the model's external-data locations, already validated by the caller
        (``external_data.check_external_data``); None validates them here. Nothing outside the
        model's folder and no special file is ever read. Returns the hex key and the parts it
        hashes (kept in the manifest for humans). Raises OSError for unreadable files and
        UserError for unsafe external data.
        """
        parts: dict[str, Any] = {"format": FORMAT, "options": dict(options), "versions": versions()}
        if isinstance(source, (bytes, bytearray, memoryview)):
            parts["model"] = hashlib.sha256(source).hexdigest()
            parts["external"] = []
        else:
            path = Path(source).resolve()
            if external is None:
                external = self._external_locations(path)
            parts["model"] = self.file_digest(path)
            parts["external"] = [[loc, self.file_digest(path.parent / loc)] for loc in external]
        blob = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest(), parts

    @staticmethod
    def _external_locations(path: Path) -> list[str]:
        """Sorted external-data locations of a model file, each checked before anything reads it."""
        from onnx_fuse.external_data import external_info, iter_model_tensors
        from onnx_fuse.model_io import load_proto

        import onnx

        proto, _ = load_proto(path, check=False, map_weights=True)  # validates external data
        return sorted({external_info(t).get("location", "") for t in iter_model_tensors(proto)
                       if t.data_location == onnx.TensorProto.EXTERNAL
                       and not external_info(t).get("location", "") == path.name} - {""})

    # -- entries ---------------------------------------------------------------------------------

    def lock(self, key: str) -> filelock.FileLock:
        return filelock.FileLock(str(self.locks / f"{key}.lock"), timeout=LOCK_TIMEOUT_S)

    def lookup(self, key: str) -> Entry | None:
        """The valid entry for ``key`` (touched as used), or None. A broken entry is moved aside.

        Call with the entry lock held.
        """
        path = self.entries / key
        if not os.path.lexists(path):
            return None
        manifest, problem = self._check(path, key)
        if problem:
            log.warning("onnx-fuse cache entry %s is broken (%s); rebuilding it", path, problem)
            self._remove(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path / MANIFEST)  # LRU clock
        return Entry(key, path, manifest)

    @staticmethod
    def _check(path: Path, key: str) -> tuple[dict[str, Any], str | None]:
        """The entry's manifest and None, or why the entry cannot be used (contents read in full)."""
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return {}, "not a folder"
            manifest = json.loads((path / MANIFEST).read_text())
            files = manifest["files"]
            if manifest.get("key") != key or MODEL_NAME not in files:
                return {}, "manifest does not match its key"
            for name, want in files.items():
                f = path / name
                st = os.lstat(f)
                if not stat.S_ISREG(st.st_mode):
                    return {}, f"{name} is not a regular file"
                if st.st_size != want["size"]:
                    return {}, f"{name} has {st.st_size} bytes, manifest says {want['size']}"
                if "crc32" not in want:
                    return {}, f"{name} has no checksum (older cache format)"
                if _crc32(f) != want["crc32"]:
                    return {}, f"{name} checksum differs from the manifest (corrupted on disk)"
        except FileNotFoundError as exc:
            return {}, f"{Path(exc.filename or '?').name} is missing"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return {}, f"unreadable manifest ({exc})"
        return manifest, None

    @contextlib.contextmanager
    def staging(self, key: str) -> Iterator[Path]:
        """A fresh staging folder for building ``key``; removed afterwards unless committed.

        Call with the entry lock held: the lock is what tells the sweeper the folder is in use.
        """
        stage = self.tmp / f"{key}-{uuid.uuid4().hex[:12]}"
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
                sha, crc = _file_sums(f)
                files[f.name] = {"size": f.stat().st_size, "sha256": sha, "crc32": crc}
        manifest = {"key": key, "format": FORMAT, "created": time.time(), "files": files, **info}
        fileio.write_json(stage / MANIFEST, manifest, indent=1, sort_keys=True)
        final = self.entries / key
        if os.path.lexists(final):
            self._remove(final)
        os.replace(stage, final)
        return Entry(key, final, manifest)

    def _remove(self, path: Path) -> None:
        """Move an entry aside in one rename (readers never see half of it), then delete it.

        Whatever is there: a folder, a plain file or a symlink (never followed) in its place.
        """
        trash = self.tmp / f"trash-{path.name[:16]}-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(path, trash)
        except FileNotFoundError:
            return
        _delete(trash)

    # -- eviction --------------------------------------------------------------------------------

    def list_entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, folder) for every entry, oldest first."""
        out = []
        for path in self.entries.iterdir():
            if not path.is_dir() or path.is_symlink():
                with contextlib.suppress(OSError):
                    self._remove(path)  # never a valid entry: a plain file or a link in its place
                continue
            try:
                used = (path / MANIFEST).stat().st_mtime
                size = _tree_bytes(path)
            except OSError:
                continue  # being removed, never finished, or not a folder (lookup removes it)
            out.append((used, size, path))
        return sorted(out)

    def staging_bytes(self) -> int:
        """Bytes in tmp/: staging folders being filled now, and leftovers not yet swept."""
        return _tree_bytes(self.tmp)

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.list_entries()) + self.staging_bytes()

    def evict(self, *, keep: Sequence[str] = ()) -> list[str]:
        """Remove least recently used entries until the cache fits its limit; return their keys.

        Staging folders count towards the limit. Entries in ``keep`` and entries whose lock
        another session holds are skipped.
        """
        removed: list[str] = []
        try:
            with filelock.FileLock(str(self.locks / "evict.lock"), timeout=0):
                self._sweep_tmp()
                entries = self.list_entries()
                total = sum(size for _, size, _ in entries) + self.staging_bytes()
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
        """Remove what dead processes left in tmp/ and old digest memos.

        A staging folder is named after its entry key; if nobody holds that entry's lock, the
        process that was filling it is gone (killed mid-save) and the folder goes now, not after
        a timeout. Trash folders are always leftovers. Other temp files go after STALE_TMP_S.
        """
        now = time.time()
        for p in self.tmp.iterdir():
            key = p.name.split("-", 1)[0]
            with contextlib.suppress(OSError):
                if p.name.startswith("trash-"):
                    _delete(p)
                elif len(key) == _KEY_LEN and p.is_dir():
                    try:
                        with self.lock(key).acquire(timeout=0):
                            _delete(p)
                    except filelock.Timeout:
                        pass  # being filled right now
                elif now - p.lstat().st_mtime > STALE_TMP_S:
                    _delete(p)
        for p in self.digests.iterdir():
            with contextlib.suppress(OSError):
                if now - p.lstat().st_mtime > STALE_DIGEST_S:
                    _delete(p)


def _delete(path: Path) -> None:
    """Delete a folder tree, a file or a symlink (the link, not its target)."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed); missing parts count 0."""
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total
