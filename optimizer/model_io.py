"""Loading and saving models: lazy weights, safety checks, atomic writes, bounded memory.

Load: the protobuf is parsed without external data; every external reference is validated
(``external_data.check_external_data``) and then memory-mapped lazily by onnx-ir, so a 4 GiB model
costs almost no resident memory until a pass needs a tensor's values. Weights stored inside a large
.onnx are mapped the same way, from the .onnx file itself (``proto_stream``). A ModelProto or
onnx-ir model with external data needs the folder of its weight files (``base_dir``); relative
paths are never resolved against the current directory.

Save: with external data everything is written into a temporary folder beside the output and moved
into place, weights first and the .onnx last, so a crash never leaves a half-written model.
Embedded weights are streamed one tensor at a time (``proto_stream.write_embedded``) through
``fileio.output_file``: atomic for regular files, written through for FIFOs and devices, symlinks
followed to their target. Models whose weights exceed the 2 GB protobuf limit (or that came with
external data) are saved with their weights in ``<output name>.data`` beside the output; asking
for embedded weights over the limit is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_fuse import fileio
from onnx_fuse.errors import UserError
from onnx_fuse.graph_order import as_ort_domain, ort_default_domain_nodes, sort_nodes
from onnx_fuse.passes._scoped_names import free_name
from onnx_fuse.external_data import (check_external_data, check_ir_external_data, external_info,
                                     has_external_data, iter_model_tensors)
from onnx_fuse.proto_stream import WireError, embedded_nbytes, skeleton_with_mapped_weights, write_embedded
from onnx_fuse.sparse_initializers import densify_sparse_initializers, widen_sparse_indices
from onnx_fuse.structure_check import check_structure, skeleton_from_proto
from onnx_fuse.text_check import check_text

# The protobuf hard limit is 2 GiB; leave room for the graph itself.
_PROTO_LIMIT = 1_800_000_000
# ONNX opsets this build of onnx knows; newer models are refused rather than half-understood.
MAX_ONNX_OPSET = onnx.defs.onnx_opset_version()
MIN_ONNX_OPSET = 7
# Model files at least this big have their embedded weights mapped instead of read (proto_stream);
# below it reading the file costs less than walking it.
MAP_FILES_FROM = 32 * 1024 * 1024
# Model files whose embedded weights were mapped: references to them are not "external data" when
# save decides where the weights go.
_MAPPED_MODEL_FILES: set[Path] = set()


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


def _check_tensors(proto: onnx.ModelProto, what: str) -> None:
    """Every stored tensor is what it declares: a known dtype, dims >= 0, and as many bytes as
    its dims need (raw or external). Without this, a 16-byte tensor declaring 2^40 elements
    reaches the passes, which read past its end or allocate for its claim."""
    for tensor in iter_model_tensors(proto):
        where = f"{what}: tensor {tensor.name!r}"
        try:
            dtype = ir.DataType(tensor.data_type)
        except ValueError:
            dtype = None
        if dtype is None or dtype == ir.DataType.UNDEFINED:
            raise UserError(f"{where}: unknown data type {tensor.data_type}")
        if any(d < 0 for d in tensor.dims):
            raise UserError(f"{where}: negative dimension in {list(tensor.dims)}")
        count = 1
        for d in tensor.dims:
            count *= d
        if dtype == ir.DataType.STRING:
            continue
        need = (count * dtype.bitwidth + 7) // 8
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            length = external_info(tensor).get("length")
            if length is not None and length.isdigit() and int(length) != need:
                raise UserError(f"{where}: dims {list(tensor.dims)} need {need} bytes but its "
                                f"external data holds {length}")
        elif tensor.HasField("raw_data") and len(tensor.raw_data) != need:
            raise UserError(f"{where}: dims {list(tensor.dims)} need {need} bytes but it holds "
                            f"{len(tensor.raw_data)}")


def _check_outputs(count: int, what: str) -> None:
    """The checker and ORT accept a graph without outputs, but it computes nothing: optimizing
    it would delete every node and still report success."""
    if not count:
        raise UserError(f"{what}: the graph has no outputs, so it computes nothing; declare the "
                        "outputs you want in graph.output")


def _check_graph(proto: onnx.ModelProto, what: str) -> None:
    """Structure, types and op schemas; external references were already checked by us."""
    _check_outputs(len(proto.graph.output), what)
    for attempt in (0, 1):
        skeleton = skeleton_from_proto(proto)
        if ort_default_domain_nodes(proto.graph):  # ORT's own op there (graph_order.py)
            as_ort_domain(skeleton)
        try:
            check_structure(skeleton)
            return
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid graph"
            # out of order, as ORT's float16 converter leaves it: ORT sorts on load, so do we
            if attempt or "topologically sorted" not in first or not sort_nodes(proto.graph):
                raise UserError(f"{what}: invalid ONNX graph: {first}") from None


def _read_model_file(path: Path, what: str, map_weights: bool) -> tuple[onnx.ModelProto, list[int]]:
    """Parse a model file (refusing FIFOs and devices unread); with ``map_weights`` large embedded
    weights become references to the file itself. Returns the proto and the mapped indices."""
    try:
        f = fileio.open_regular(path)
    except fileio.NotRegularFileError as exc:
        raise UserError(str(exc).replace(", not a regular file", "; give an ONNX model file")) from None
    except OSError as exc:
        raise UserError(f"{what}: cannot read ({exc.strerror or exc})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if map_weights and size >= MAP_FILES_FROM:
            try:
                data, mapped = skeleton_with_mapped_weights(f, path.resolve().name)
                return _parse(data, what), mapped
            except (WireError, UserError, OSError):
                f.seek(0)  # not what we expected: parse it plainly, which says what is wrong
        try:
            data = f.read()
        except OSError as exc:
            raise UserError(f"{what}: cannot read ({exc.strerror or exc})") from None
    return _parse(data, what), []


def load_proto(source: str | os.PathLike | bytes, *, check: bool = True,
               map_weights: bool = False) -> tuple[onnx.ModelProto, str | None]:
    """Parse and validate a model; return the proto (external data not loaded) and its folder.

    ``map_weights``: see ``_read_model_file``; only for callers that hand the proto to onnx-ir
    with the returned folder as base directory.
    """
    mapped: list[int] = []
    if isinstance(source, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(source), "<bytes>")
        base_dir = None
        what = "<bytes>"
    else:
        if not os.fspath(source):   # Path("") is ".", which would be "a folder"
            raise UserError("the model path is empty")
        path = Path(source)
        what = str(path)
        if not path.exists():
            raise UserError(f"{what}: no such file")
        if path.is_dir():
            raise UserError(f"{what}: is a folder, not a file")
        proto, mapped = _read_model_file(path, what, map_weights)
        base_dir = str(path.resolve().parent)
        if mapped:
            _MAPPED_MODEL_FILES.add(path.resolve())
    check_text(proto, what)  # non-UTF-8 names would fail deep inside the checker or onnx-ir
    _check_opsets(proto, what)
    if base_dir is not None:
        check_external_data(proto, base_dir, mapped)
    elif has_external_data(proto):
        raise UserError("<bytes>: model refers to external data but was given as bytes; load it "
                        "from its file instead")
    _check_tensors(proto, what)
    widen_sparse_indices(proto)
    if check:
        _check_graph(proto, what)
    return proto, base_dir


def load_model(source: str | os.PathLike | bytes | onnx.ModelProto | ir.Model, *, check: bool = True,
               base_dir: str | os.PathLike | None = None) -> ir.Model:
    """Load a model into onnx-ir with weights mapped lazily. Never modifies the input.

    ``base_dir``: for a ModelProto or onnx-ir model with external data, the folder its weight
    files are in (an onnx-ir model loaded from a file already knows it).
    """
    model = _load_model(source, check=check, base_dir=base_dir)
    _unique_node_names(model)
    _empty_dim_names_unknown(model)
    return model


def _empty_dim_names_unknown(model: ir.Model) -> None:
    """A dim whose dim_param is the empty string becomes an unknown dim. It names nothing (ONNX
    Runtime runs x: ['', 4] and y: ['', 4] at different sizes), but the passes read two equal names
    as one size, so Shape(x)[0] - Shape(y)[0] folded to 0."""
    for graph in model.graphs():
        values = [*graph.inputs, *graph.outputs, *graph.initializers.values(),
                  *(v for node in graph for v in node.outputs)]
        for v in values:
            if v.shape is not None and any(not isinstance(d, int) and d.value == "" for d in v.shape):
                v.shape = ir.Shape([None if not isinstance(d, int) and d.value == "" else d for d in v.shape])


def _unique_node_names(model: ir.Model) -> None:
    """A node name used twice in one graph gets a suffix on its later uses: ONNX Runtime refuses
    such a graph ("two nodes with same node name"), and onnx's checker does not, so the optimized
    model would be written and fail to load. Names are no part of the interface."""
    for graph in model.graphs():
        taken = {n.name for n in graph if n.name}
        seen: set[str] = set()
        for node in graph:
            if not node.name:
                continue
            if node.name in seen:
                node.name = free_name(node.name, taken, "_")
            seen.add(node.name)


def _load_model(source: str | os.PathLike | bytes | onnx.ModelProto | ir.Model, *, check: bool,
                base_dir: str | os.PathLike | None) -> ir.Model:
    if isinstance(source, ir.Model):
        # Work on a copy: the caller's model must stay untouched.
        model = source.clone()
        if check:
            _check_outputs(len(model.graph.outputs), "<model>")
        check_ir_external_data(model, base_dir)
        return model
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
        check_text(proto, "<model>")
        _check_opsets(proto, "<model>")
        if has_external_data(proto):
            if base_dir is None:
                raise UserError("<model>: the ModelProto refers to external data; pass base_dir= "
                                "(the folder of its weight files) or load the model from its file")
            check_external_data(proto, base_dir)
        _check_tensors(proto, "<model>")
        widen_sparse_indices(proto)
        if check:
            _check_graph(proto, "<model>")
        densify_sparse_initializers(proto, None if base_dir is None else os.fspath(base_dir), "<model>")
        model = ir.serde.deserialize_model(proto)
        if base_dir is not None:
            ir.external_data.set_base_dir(model.graph, os.fspath(Path(base_dir).resolve()))
        return model
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        raise UserError(f"model must be a path, bytes, an onnx.ModelProto or an onnx_ir.Model, not "
                        f"{type(source).__name__}")
    proto, folder = load_proto(source, check=check, map_weights=True)
    what = "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)
    densify_sparse_initializers(proto, folder, what)
    model = ir.serde.deserialize_model(proto)
    del proto
    if folder is not None:
        ir.external_data.set_base_dir(model.graph, folder)
    return model


def _external_files(model: ir.Model) -> set[Path]:
    files = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                files.add((Path(tensor.base_dir) / tensor.location).resolve())
    return files


def check_output_path(path: str | os.PathLike, *, what: str = "output model") -> Path:
    """Fail early, before any work, on an output path that cannot be written; return its folder.

    A symlink is checked where it leads (that is where the file is written); a special file
    (FIFO, /dev/null, /dev/stdout) must be writable itself.
    """
    if not os.fspath(path):   # Path("") is ".", which would be "a folder"
        raise UserError(f"the {what} path is empty")
    out = Path(path)
    longest = max((len(os.fsencode(part)) for part in out.parts), default=0)
    if longest > 255 - 20:  # a name component, with room for the temp file's affixes
        raise UserError(f"{_short(out)}: a file or folder name in the path is too long "
                        f"({longest} bytes; at most 235)")
    if fileio.is_special_output(out):
        if not os.access(out, os.W_OK):
            raise UserError(f"{out}: not writable")
        return out.parent
    if out.is_dir():
        raise UserError(f"{out}: is a folder; give a file name for the {what}")
    target = fileio.resolve_output(out)
    parent = target.parent
    if not parent.is_dir():
        raise UserError(f"{out}: output folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{out}: output folder {str(parent)!r} is not writable")
    if len(os.fsencode(target.name)) > 255 - 20:  # a symlink may lead to a long name
        raise UserError(f"{out}: the file name it leads to is too long")
    return parent


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else text[:60] + "..." + text[-40:]


def save_model(model: ir.Model, path: str | os.PathLike, *, external_data: bool | None = None) -> list[Path]:
    """Save ``model`` to ``path``; return the files written.

    external_data: True puts weights in ``<name>.data`` beside the output, False embeds them
    (refused over the 2 GB protobuf limit), None decides: external when the model came with
    external data or is over the limit. A symlink is followed and its target replaced; a special
    file (FIFO, /dev/stdout) is written through and can only take embedded weights.
    """
    out = Path(path)
    check_output_path(out)
    with fileio.user_write(out, "output model"):
        return _write_model(model, out, external_data)


def _write_model(model: ir.Model, out: Path, external_data: bool | None) -> list[Path]:
    special = fileio.is_special_output(out)
    sources = _external_files(model)
    weights = embedded_nbytes(model)
    if external_data is None:
        external_data = not special and (bool(sources - _MAPPED_MODEL_FILES) or weights > _PROTO_LIMIT)
    if not external_data and weights > _PROTO_LIMIT:
        raise UserError(f"{out}: the model has {weights / 1e9:.1f} GB of weights; a single ONNX "
                        "file holds at most 2 GB, so they must go to external data "
                        "(--external-data yes, or save(external_data=True))")
    if special:
        if external_data:
            raise UserError(f"{out}: is not a regular file, so no weights file can go beside it; "
                            "save with embedded weights (--external-data no) or to a file")
        with fileio.output_file(out) as f:
            write_embedded(model, f)
        return [out]
    target = fileio.resolve_output(out)
    if not external_data:
        if target in sources:
            raise UserError(f"{out}: writing here would overwrite {target.name!r}, which the model "
                            "still reads its weights from; choose another output name")
        with fileio.output_file(target) as f:
            write_embedded(model, f)
        return [target]
    parent = target.parent
    data_name = target.name + ".data"
    for dest in (target, parent / data_name):
        if dest.resolve() in sources:
            raise UserError(f"{out}: writing here would overwrite {dest.name!r}, which the model "
                            "still reads its weights from; choose another output name")
    written: list[Path] = []
    tmp_dir = Path(tempfile.mkdtemp(prefix=".onnx-fuse-", dir=parent))
    try:
        tmp_model = tmp_dir / target.name
        ir.save(model, tmp_model, external_data=data_name, size_threshold_bytes=1024)
        tmp_data = tmp_dir / data_name
        if tmp_data.exists():
            os.replace(tmp_data, parent / data_name)
            written.append(parent / data_name)
        os.replace(tmp_model, target)
        written.append(target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return written
