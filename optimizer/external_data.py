"""Safety checks for tensors stored outside the .onnx file (external data).

A model file names its weight files by relative path. A hostile or broken model can point them
anywhere: ``../../etc/passwd``, an absolute path, a symlink or hardlink to a file elsewhere, or an
offset past the end of the file, or a FIFO or device (/dev/zero) that never ends. We refuse all
of these before any byte is read, for model files (``check_external_data``) and for onnx-ir models
handed to the API (``check_ir_external_data``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator
from pathlib import Path

import onnx
import onnx_ir as ir

from onnx_fuse.errors import UserError
from onnx_fuse.fileio import file_kind


class UnsafeExternalDataError(UserError):
    """An external-data reference that we refuse to follow (outside the folder, a link, a special
    file, a range past the end, or no folder to resolve it in)."""


def _iter_graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _iter_graph_tensors(attr.g)
            for g in attr.graphs:
                yield from _iter_graph_tensors(g)


def iter_model_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, Constant attributes, subgraphs, functions."""
    yield from _iter_graph_tensors(model.graph)
    for func in model.functions:
        for node in func.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                if attr.HasField("g"):
                    yield from _iter_graph_tensors(attr.g)


def external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _file_size(where: str, location: str, base: Path, sizes: dict[Path, int]) -> int:
    """Size of the regular file ``location`` names inside ``base``, after every safety check."""
    if not location:
        raise UnsafeExternalDataError(f"{where}: external data has no location")
    if "\0" in location:
        raise UnsafeExternalDataError(f"{where}: external data location contains a NUL byte")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
        raise UnsafeExternalDataError(f"{where}: external data location {location!r} is absolute; "
                        "only paths relative to the model's folder are allowed")
    # Normalize without following links first, to catch ``..`` escapes on their own.
    normalized = Path(os.path.normpath(base / location))
    if base != normalized and base not in normalized.parents:
        raise UnsafeExternalDataError(f"{where}: external data location {location!r} points outside the "
                        f"model's folder {str(base)!r}")
    if normalized in sizes:
        return sizes[normalized]
    try:
        st = os.lstat(normalized)
    except FileNotFoundError:
        raise UnsafeExternalDataError(f"{where}: external data file {location!r} not found beside the "
                        "model") from None
    except OSError as exc:
        raise UnsafeExternalDataError(f"{where}: external data file {location!r} unreadable "
                        f"({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeExternalDataError(f"{where}: external data file {location!r} is a symlink; refusing "
                        "to follow it")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeExternalDataError(f"{where}: external data {location!r} is {file_kind(st.st_mode)}, "
                        "not a regular file")
    if st.st_nlink > 1:
        raise UnsafeExternalDataError(f"{where}: external data file {location!r} has {st.st_nlink} hard "
                        "links; refusing a file that may alias one outside the model's folder")
    # A symlinked folder on the way also escapes: compare the real path.
    real = normalized.resolve()
    if base != real and base not in real.parents:
        raise UnsafeExternalDataError(f"{where}: external data location {location!r} resolves outside "
                        "the model's folder")
    sizes[normalized] = st.st_size
    return st.st_size


def _check_range(where: str, location: str, offset: str | int | None, length: str | int | None,
                 file_size: int) -> int:
    try:
        start = int(offset or 0)
        count = int(length) if length not in (None, "") else file_size - start
    except ValueError:
        raise UnsafeExternalDataError(f"{where}: external data offset/length are not integers") from None
    if start < 0 or count < 0 or start + count > file_size:
        raise UnsafeExternalDataError(f"{where}: external data range [{start}, {start + count}) lies beyond "
                        f"the end of {location!r} ({file_size} bytes)")
    return count


def has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in iter_model_tensors(model))


def check_external_data(model: onnx.ModelProto, base_dir: str | os.PathLike,
                        mapped: Collection[int] = ()) -> int:
    """Validate every external reference of ``model`` against ``base_dir``; return bytes referenced.

    ``mapped``: indices of main-graph initializers that we turned into references to the .onnx
    file itself (proto_stream); they were not in the file and need no check.

    Raises UserError naming the tensor and the problem on the first unsafe reference. Nothing is
    read: only names and ``lstat`` results are looked at.
    """
    base = Path(base_dir).resolve()
    sizes: dict[Path, int] = {}
    total = 0
    held = [model.graph.initializer[i] for i in mapped]  # alive, so their ids stay theirs
    skip = {id(t) for t in held}
    for tensor in iter_model_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL or id(tensor) in skip:
            continue
        info = external_info(tensor)
        where = f"tensor {tensor.name!r}"
        location = info.get("location", "")
        size = _file_size(where, location, base, sizes)
        total += _check_range(where, location, info.get("offset"), info.get("length"), size)
    return total


def external_tensors(model: ir.Model) -> Iterator[ir.ExternalTensor]:
    """Every external tensor of an onnx-ir model: initializers and tensor attributes, subgraphs too."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                yield value.const_value
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
                    yield attr.value


def check_ir_external_data(model: ir.Model, base_dir: str | os.PathLike | None) -> None:
    """The same checks for an onnx-ir model's external tensors, each against its own base folder
    (or ``base_dir`` where it has none). A tensor with no folder to resolve against is refused:
    its relative path would otherwise be read from the current directory."""
    sizes: dict[Path, int] = {}
    for tensor in external_tensors(model):
        where = f"tensor {tensor.name!r}"
        folder = tensor.base_dir or base_dir
        if not folder:
            raise UnsafeExternalDataError(f"{where}: the model refers to external data ({tensor.location!r}) "
                            "but no folder to find it in; load the model from its file or pass "
                            "base_dir= (the folder of its weight files)")
        size = _file_size(where, os.fspath(tensor.location), Path(folder).resolve(), sizes)
        _check_range(where, os.fspath(tensor.location), tensor.offset, tensor.length, size)
        if not tensor.base_dir:
            tensor.base_dir = os.fspath(folder)
