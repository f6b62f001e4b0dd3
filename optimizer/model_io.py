"""Loading and saving models: lazy external weights, safety checks, atomic writes.

Load: the protobuf is parsed without external data; every external reference is validated
(``external_data.check_external_data``) and then memory-mapped lazily by onnx-ir, so a 4 GiB model
costs almost no resident memory until a pass needs a tensor's values.

Save: everything is written into a temporary folder beside the output and moved into place with
``os.replace``, weights first and the .onnx last, so a crash never leaves a half-written model.
Models whose weights exceed the 2 GB protobuf limit (or that came with external data) are saved
with their weights in ``<output name>.data`` beside the output.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_fuse.errors import UserError
from onnx_fuse.external_data import check_external_data
from onnx_fuse.structure_check import check_structure, skeleton_from_proto

# The protobuf hard limit is 2 GiB; leave room for the graph itself.
_PROTO_LIMIT = 1_800_000_000
# ONNX opsets this build of onnx knows; newer models are refused rather than half-understood.
MAX_ONNX_OPSET = onnx.defs.onnx_opset_version()
MIN_ONNX_OPSET = 7


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    if not data:
        raise UserError(f"{what}: file is empty, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise UserError(f"{what}: not a valid ONNX protobuf (truncated or corrupt: {exc})") from None
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise UserError(f"{what}: parses as protobuf but is not an ONNX model (no graph or "
                        "ir_version)")
    return proto


def _check_opsets(proto: onnx.ModelProto, what: str) -> None:
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx"):
            if opset.version > MAX_ONNX_OPSET:
                raise UserError(f"{what}: ONNX opset {opset.version} is newer than this onnx "
                                f"package supports ({MAX_ONNX_OPSET}); upgrade onnx")
            if opset.version < MIN_ONNX_OPSET:
                raise UserError(f"{what}: ONNX opset {opset.version} is too old (need >= "
                                f"{MIN_ONNX_OPSET}); convert it with onnx.version_converter first")


def _check_graph(proto: onnx.ModelProto, what: str) -> None:
    """Structure, types and op schemas; external references were already checked by us."""
    try:
        check_structure(skeleton_from_proto(proto))
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid graph"
        raise UserError(f"{what}: invalid ONNX graph: {first}") from None


def load_proto(source: str | os.PathLike | bytes, *, check: bool = True) -> tuple[onnx.ModelProto, str | None]:
    """Parse and validate a model; return the proto (external data not loaded) and its folder."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(source), "<bytes>")
        base_dir = None
        what = "<bytes>"
    else:
        path = Path(source)
        what = str(path)
        if not path.exists():
            raise UserError(f"{what}: no such file")
        if not path.is_file():
            raise UserError(f"{what}: not a file")
        proto = _parse(path.read_bytes(), what)
        base_dir = str(path.resolve().parent)
    _check_opsets(proto, what)
    if base_dir is not None:
        check_external_data(proto, base_dir)
    elif any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise UserError("<bytes>: model refers to external data but was given as bytes; load it "
                        "from its file instead")
    if check:
        _check_graph(proto, what)
    return proto, base_dir


def load_model(source: str | os.PathLike | bytes | onnx.ModelProto | ir.Model, *, check: bool = True) -> ir.Model:
    """Load a model into onnx-ir with external weights mapped lazily. Never modifies the input."""
    if isinstance(source, ir.Model):
        # Work on a copy: the caller's model must stay untouched.
        return ir.from_proto(ir.to_proto(source))
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
        _check_opsets(proto, "<model>")
        if check:
            _check_graph(proto, "<model>")
        return ir.serde.deserialize_model(proto)
    proto, base_dir = load_proto(source, check=check)
    model = ir.serde.deserialize_model(proto)
    if base_dir is not None:
        ir.external_data.set_base_dir(model.graph, base_dir)
    return model


def _external_files(model: ir.Model) -> set[Path]:
    files = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                files.add((Path(tensor.base_dir) / tensor.location).resolve())
    return files


def _weights_bytes(model: ir.Model) -> int:
    total = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return total


def check_output_path(path: str | os.PathLike, *, what: str = "output model") -> Path:
    """Fail early, before any work, on an output path that cannot be written; return its folder."""
    out = Path(path)
    if out.exists() and out.is_dir():
        raise UserError(f"{out}: is a folder; give a file name for the {what}")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise UserError(f"{out}: output folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{out}: output folder {str(parent)!r} is not writable")
    return parent


def save_model(model: ir.Model, path: str | os.PathLike, *, external_data: bool | None = None) -> list[Path]:
    """Atomically save ``model`` to ``path``; return the files written.

    external_data: True puts weights in ``<name>.data`` beside the output, False embeds them,
    None decides (external when the model came with external data or is over the protobuf limit).
    """
    out = Path(path)
    parent = check_output_path(out)
    sources = _external_files(model)
    if external_data is None:
        external_data = bool(sources) or _weights_bytes(model) > _PROTO_LIMIT
    data_name = out.name + ".data"
    for target in (parent / out.name, parent / data_name):
        if target.resolve() in sources:
            raise UserError(f"{out}: writing here would overwrite {target.name!r}, which the model "
                            "still reads its weights from; choose another output name")
    written: list[Path] = []
    tmp_dir = Path(tempfile.mkdtemp(prefix=".onnx-fuse-", dir=parent))
    try:
        tmp_model = tmp_dir / out.name
        if external_data:
            ir.save(model, tmp_model, external_data=data_name, size_threshold_bytes=1024)
        else:
            ir.save(model, tmp_model)
        tmp_data = tmp_dir / data_name
        if tmp_data.exists():
            os.replace(tmp_data, parent / data_name)
            written.append(parent / data_name)
        os.replace(tmp_model, parent / out.name)
        written.append(parent / out.name)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return written
