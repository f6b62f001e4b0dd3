"""Safety checks for tensors stored outside the .onnx file (external data).

A model file names its weight files by relative path. A hostile or broken model can point them
anywhere: ``../../etc/passwd``, an absolute path, a symlink or hardlink to a file elsewhere, or an
offset past the end of the file. We refuse all of these before any byte is read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import onnx

from onnx_fuse.errors import UserError


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


def check_external_data(model: onnx.ModelProto, base_dir: str | os.PathLike) -> int:
    """Validate every external reference of ``model`` against ``base_dir``; return bytes referenced.

    Raises UserError naming the tensor and the problem on the first unsafe reference.
    """
    base = Path(base_dir).resolve()
    sizes: dict[Path, int] = {}
    total = 0
    for tensor in iter_model_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = external_info(tensor)
        location = info.get("location", "")
        where = f"tensor {tensor.name!r}"
        if not location:
            raise UserError(f"{where}: external data has no location")
        if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
            raise UserError(f"{where}: external data location {location!r} is absolute; "
                            "only paths relative to the model's folder are allowed")
        joined = base / location
        # Resolve without following the final link first, to catch ``..`` escapes on their own.
        normalized = Path(os.path.normpath(joined))
        if base != normalized and base not in normalized.parents:
            raise UserError(f"{where}: external data location {location!r} points outside the "
                            f"model's folder {str(base)!r}")
        if normalized not in sizes:
            try:
                st = os.lstat(normalized)
            except FileNotFoundError:
                raise UserError(f"{where}: external data file {location!r} not found beside the "
                                "model") from None
            if stat.S_ISLNK(st.st_mode):
                raise UserError(f"{where}: external data file {location!r} is a symlink; refusing "
                                "to follow it")
            if not stat.S_ISREG(st.st_mode):
                raise UserError(f"{where}: external data {location!r} is not a regular file")
            if st.st_nlink > 1:
                raise UserError(f"{where}: external data file {location!r} has {st.st_nlink} hard "
                                "links; refusing a file that may alias one outside the model's folder")
            # A symlinked folder on the way also escapes: compare the real path.
            real = normalized.resolve()
            if base != real and base not in real.parents:
                raise UserError(f"{where}: external data location {location!r} resolves outside "
                                "the model's folder")
            sizes[normalized] = st.st_size
        file_size = sizes[normalized]
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else file_size - offset
        except ValueError:
            raise UserError(f"{where}: external data offset/length are not integers") from None
        if offset < 0 or length < 0 or offset + length > file_size:
            raise UserError(f"{where}: external data range [{offset}, {offset + length}) lies beyond "
                            f"the end of {location!r} ({file_size} bytes)")
        total += length
    return total
