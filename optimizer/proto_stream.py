"""ONNX files with weights inside, read and written without holding the whole protobuf in memory.

Reading (``skeleton_with_mapped_weights``): a 1.8 GB .onnx would cost its size twice (the file's
bytes, then the parsed message). Instead the protobuf wire format is walked over a read-only mmap:
every large ``raw_data`` initializer is replaced by an external reference to its byte range in the
.onnx file itself, so the parsed skeleton is small and onnx-ir maps each weight lazily like any
external tensor.

Writing (``write_embedded``): the model is serialized without its large initializers, then each one
is appended as its own ``graph { initializer { ... } }`` record. Protobuf merges repeated
occurrences of a message field and appends repeated fields, so the file parses as one ModelProto;
only one weight is in memory at a time.

Field numbers: ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto: raw_data = 9,
external_data = 13, data_location = 14; StringStringEntryProto: key = 1, value = 2.
"""

from __future__ import annotations

import mmap
import os
from typing import BinaryIO

import onnx
import onnx_ir as ir

_LEN = 2  # wire type of length-delimited fields
#: initializers smaller than this stay inside the skeleton / the serialized model
MAP_MIN_BYTES = 1024


class WireError(ValueError):
    """The bytes are not the protobuf we expected; callers fall back to a plain parse."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf, start: int, end: int):
    """(field number, wire type, field start, payload start, payload end) for each field."""
    pos = start
    while pos < end:
        field_start = pos
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos, end)
            payload = (pos, pos)
        elif wire == 1:
            pos += 8
            payload = (pos - 8, pos)
        elif wire == _LEN:
            length, pos = _varint(buf, pos, end)
            payload = (pos, pos + length)
            pos += length
        elif wire == 5:
            pos += 4
            payload = (pos - 4, pos)
        else:
            raise WireError(f"unsupported wire type {wire}")
        if pos > end or number == 0:
            raise WireError("field runs past its message")
        yield number, wire, field_start, payload[0], payload[1]


def _enc_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _enc_len_field(number: int, payload: bytes | bytearray) -> bytes:
    return _enc_varint(number << 3 | _LEN) + _enc_varint(len(payload)) + bytes(payload)


def _entry(key: str, value: str) -> bytes:
    return _enc_len_field(13, _enc_len_field(1, key.encode()) + _enc_len_field(2, value.encode()))


def _tensor(buf, start: int, end: int, location: str) -> tuple[bytearray, int]:
    """The tensor with a large raw_data turned into a reference to ``location``; bytes mapped."""
    fields = list(_fields(buf, start, end))
    if any(number in (13, 14) for number, *_ in fields):
        return bytearray(buf[start:end]), 0  # already external: leave it to the normal checks
    raw = [(s, e) for number, wire, _, s, e in fields if number == 9 and wire == _LEN]
    if len(raw) != 1 or raw[0][1] - raw[0][0] < MAP_MIN_BYTES:
        return bytearray(buf[start:end]), 0
    out = bytearray()
    for number, wire, field_start, _, payload_end in fields:
        if number != 9:
            out += buf[field_start:payload_end]
    offset, stop = raw[0]
    out += _entry("location", location) + _entry("offset", str(offset))
    out += _entry("length", str(stop - offset))
    out += _enc_varint(14 << 3 | 0) + _enc_varint(onnx.TensorProto.EXTERNAL)
    return out, stop - offset


def skeleton_with_mapped_weights(f: BinaryIO, location: str) -> tuple[bytes, list[int]]:
    """Serialized ModelProto of the open .onnx file ``f`` with every large initializer turned into
    an external reference to ``location`` (the file's own name in its folder); also the indices
    (in ``graph.initializer``) of the tensors turned so.

    Raises WireError when the file is not well-formed protobuf (the caller then parses it plainly
    and reports what is wrong).
    """
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise WireError("empty file")
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        out, mapped, index = bytearray(), [], 0
        for number, wire, field_start, start, end in _fields(buf, 0, size):
            if number != 7 or wire != _LEN:
                out += buf[field_start:end]
                continue
            graph = bytearray()
            for g_number, g_wire, g_start, t_start, t_end in _fields(buf, start, end):
                if g_number == 5 and g_wire == _LEN:
                    tensor, n = _tensor(buf, t_start, t_end, location)
                    graph += _enc_len_field(5, tensor)
                    if n:
                        mapped.append(index)
                    index += 1
                else:
                    graph += buf[g_start:t_end]
            out += _enc_len_field(7, graph)
    return bytes(out), mapped


# ---------------------------------------------------------------------------------------------
# Writing


def _tensor_record(tensor: ir.TensorProtocol, name: str) -> tuple[bytes, bytes]:
    """(header, payload) of ``graph { initializer { tensor } }`` with the weight's bytes as payload."""
    if tensor.dtype == ir.DataType.STRING:
        meta = ir.serde.serialize_tensor(tensor)
        meta.name = name
        data = b""
    else:
        meta = onnx.TensorProto(name=name, data_type=tensor.dtype.value,
                                dims=[int(d) for d in tensor.shape])
        if tensor.doc_string:
            meta.doc_string = tensor.doc_string
        data = tensor.tobytes()
    head = meta.SerializeToString()
    raw_head = _enc_varint(9 << 3 | _LEN) + _enc_varint(len(data)) if data else b""
    tensor_len = len(head) + len(raw_head) + len(data)
    init_head = _enc_varint(5 << 3 | _LEN) + _enc_varint(tensor_len)
    graph_head = _enc_varint(7 << 3 | _LEN) + _enc_varint(len(init_head) + tensor_len)
    return graph_head + init_head + head + raw_head, data


def embedded_nbytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
               if v.const_value is not None)


def write_embedded(model: ir.Model, f: BinaryIO) -> None:
    """Write ``model`` with every weight inside (external tensors are read in), one at a time."""
    _inline_other_externals(model)
    graph = model.graph
    values = list(graph.initializers.values())
    big = [v for v in values if v.const_value is not None and
           (isinstance(v.const_value, ir.ExternalTensor) or v.const_value.nbytes >= MAP_MIN_BYTES)]
    for v in big:
        graph.initializers.pop(v.name)
    try:
        skeleton = ir.serde.serialize_model(model)
    finally:
        for v in values:
            if v.name in graph.initializers:
                graph.initializers.pop(v.name)
        for v in values:
            graph.initializers.add(v)
    big_names = {v.name for v in big}
    # The detached weights are no inputs or outputs of any node-free value: drop the value_info
    # entries serialization gave them, the initializers carry their types.
    keep = [vi for vi in skeleton.graph.value_info if vi.name not in big_names]
    del skeleton.graph.value_info[:]
    skeleton.graph.value_info.extend(keep)
    f.write(skeleton.SerializeToString())
    del skeleton
    for v in big:
        head, data = _tensor_record(v.const_value, v.name)
        f.write(head)
        f.write(data)
        del data
        if isinstance(v.const_value, ir.ExternalTensor):
            v.const_value.release()  # unmap: its pages would otherwise stay resident


def _inline_other_externals(model: ir.Model) -> None:
    """External tensors outside the main graph's initializers (subgraph initializers, Constant
    attributes: rare and small) are read into memory so the skeleton does not point at them."""
    for g in model.graphs():
        if g is not model.graph:
            for v in g.initializers.values():
                if isinstance(v.const_value, ir.ExternalTensor):
                    v.const_value = ir.Tensor(v.const_value.numpy(), name=v.name)
        for node in g:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
                    node.attributes[attr.name] = ir.AttrTensor(
                        attr.name, ir.Tensor(attr.value.numpy(), name=attr.value.name))
