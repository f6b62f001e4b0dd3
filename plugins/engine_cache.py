"""The engine cache of ``onnx-fuse build``. File writes, hashes and the cache folder come from
``onnx_fuse.fileio`` (one definition each): a crash never leaves a half-written plan where a
complete one is expected, and files follow the umask like every other output."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from onnx_fuse import fileio
from onnx_fuse.fileio import sha256_bytes as sha256_hex


def default_cache_dir() -> Path:
    """The engine cache: ``engines/`` in onnx-fuse's cache folder (fileio.cache_dir)."""
    return fileio.cache_dir() / "engines"


def atomic_write(path: Path, data: bytes | memoryview) -> None:
    fileio.write_bytes(path, data)


def write_json(path: Path, obj: dict) -> None:
    fileio.write_json(path, obj, indent=2)


class EngineCache:
    """``<dir>/<key[:2]>/<key>.plan`` plus ``<key>.json`` holding the plan's size and sha256.

    An entry is only used when both files exist and the plan matches its checksum; anything
    else (truncated copy, bit rot, a crash between the two writes) is reported and rebuilt.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    def paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.plan", d / f"{key}.json"

    def lock(self, key: str):
        from filelock import FileLock

        d = self.root / key[:2]
        d.mkdir(parents=True, exist_ok=True)
        return FileLock(str(d / f"{key}.lock"), timeout=3600)

    def get(self, key: str) -> tuple[bytes | None, dict | None, str]:
        """(plan, meta, "") on a hit; (None, None, why) on a miss or a bad entry."""
        plan_path, meta_path = self.paths(key)
        if not plan_path.exists() and not meta_path.exists():
            return None, None, ""
        try:
            meta = json.loads(meta_path.read_text())
            data = plan_path.read_bytes()
        except (OSError, ValueError) as exc:
            return None, None, f"cache entry {key[:12]} unreadable ({type(exc).__name__})"
        if len(data) != meta.get("plan_bytes") or sha256_hex(data) != meta.get("plan_sha256"):
            return None, None, (f"cache entry {key[:12]} is corrupt ({len(data)} bytes, expected "
                                f"{meta.get('plan_bytes')} with a matching sha256)")
        return data, meta, ""

    def put(self, key: str, plan: bytes | memoryview, meta: dict) -> None:
        plan_path, meta_path = self.paths(key)
        atomic_write(plan_path, plan)
        write_json(meta_path, meta)   # written last: its presence marks a complete entry

    def drop(self, key: str) -> None:
        for p in self.paths(key):
            with contextlib.suppress(OSError):
                p.unlink()


