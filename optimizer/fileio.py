"""File plumbing in one place: the cache folder, safe reads, content hashes, and output writes.

Reads: ``open_regular`` opens without blocking (a FIFO would otherwise hang the open) and refuses
anything that is not a regular file (FIFOs, devices such as /dev/zero, folders) before a byte is
read; ``nofollow`` refuses a symlink too.

Writes follow what ``cp`` does with an existing destination: a regular file is replaced
atomically (temp file beside it, fsync, rename), a symlink is followed and its target replaced the
same way, and a special file (FIFO, /dev/null, /dev/stdout, a terminal) is opened and written
through, since renaming over it would replace the device node or the pipe with a plain file.
New files get the usual ``0666 & ~umask`` mode; a replaced file keeps its mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from onnx_fuse.errors import UserError

CHUNK = 8 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# The cache folder (InferenceSession's model cache, build's engine cache, AOT PTX)


def cache_dir() -> Path:
    """$ONNX_FUSE_CACHE_DIR, else $XDG_CACHE_HOME/onnx-fuse, else ~/.cache/onnx-fuse.

    A relative $XDG_CACHE_HOME is ignored, as the XDG spec says.
    """
    env = os.environ.get("ONNX_FUSE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "onnx-fuse"
    return Path.home() / ".cache" / "onnx-fuse"


# ---------------------------------------------------------------------------------------------
# Reading


class NotRegularFileError(UserError):
    """A path that must be a regular file is a FIFO, a device, a folder or a symlink."""


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike, *, nofollow: bool = False) -> BinaryIO:
    """Open ``path`` for reading if (and only if) it is a regular file.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer; the fstat of
    the opened descriptor then decides, so a file swapped between a check and the open is caught.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if nofollow and os.path.islink(path):
            raise NotRegularFileError(f"{path}: is a symlink; refusing to follow it") from None
        raise exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{path}: is {file_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike) -> bytes:
    with open_regular(path) as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# Hashing


def hash_stream(f: BinaryIO, h: Any = None) -> Any:
    """Feed an open binary file into ``h`` (a new sha256 by default) in chunks; return ``h``."""
    h = hashlib.sha256() if h is None else h
    while chunk := f.read(CHUNK):
        h.update(chunk)
    return h


def sha256_file(path: str | os.PathLike, h: Any = None, *, nofollow: bool = False) -> str:
    """Hex sha256 of a regular file, read in chunks (special files are refused, never read)."""
    with open_regular(path, nofollow=nofollow) as f:
        return hash_stream(f, h).hexdigest()


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Writing


def is_special_output(path: str | os.PathLike) -> bool:
    """True when ``path`` exists (after following links) and is not a regular file or folder.

    Paths under /dev and /proc count as special even when they lead to a regular file
    (``/dev/stdout`` redirected to a file): writing through them is what the caller means.
    """
    text = os.path.abspath(os.fspath(path))
    if text.startswith(("/dev/", "/proc/")):
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def resolve_output(path: str | os.PathLike) -> Path:
    """Where a write to ``path`` lands: symlinks followed (a dangling one: its target is created)."""
    return Path(os.path.realpath(path))


def _new_mode(existing: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(existing).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def output_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Write ``path`` like cp: atomically for regular files, through for special files.

    Yields a binary file to write to. For a regular destination (or a new one) that is a temp
    file beside the symlink-resolved target, renamed over it when the block ends without an
    exception and removed otherwise, so the destination is either the old or the new content.
    """
    if is_special_output(path):
        with open(path, "wb") as f:
            yield f
        return
    target = resolve_output(path)
    mode = _new_mode(target)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # after writing: the temp file is private until it is complete
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def user_write(path: str | os.PathLike, what: str) -> Iterator[None]:
    """A write the user asked for: an OSError inside (disk full, a read-only file system, a file
    size limit, permission refused at write time although the folder looked writable, as it
    does to root) is the environment's, not a bug, so it becomes one line naming the file."""
    try:
        yield
    except OSError as exc:
        raise UserError(f"{path}: cannot write the {what} ({exc.strerror or exc})") from None


def write_bytes(path: str | os.PathLike, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``path`` with ``output_file``'s semantics, creating missing folders."""
    if not is_special_output(path):
        resolve_output(path).parent.mkdir(parents=True, exist_ok=True)
    with output_file(path) as f:
        f.write(data)


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2,
               sort_keys: bool = False) -> None:
    write_bytes(path, (json.dumps(obj, indent=indent, sort_keys=sort_keys) + "\n").encode())
