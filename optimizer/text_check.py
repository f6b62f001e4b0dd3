"""Refuse models whose text fields (names, op types, domains, doc strings...) are not UTF-8.

ONNX declares them as protobuf ``string``, which must be UTF-8; the parser does not check it and
hands invalid ones to Python as ``bytes``, which the checker, onnx-ir and ORT then trip over deep
inside (a SerdeError, a UnicodeDecodeError). One walk over the text fields after parsing turns
that into a one-line user error naming the field. ``bytes`` fields (weights, string tensors,
string attributes) are never touched, so embedded weights are not copied.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from onnx_fuse.errors import UserError

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


_PLAN: dict[str, list[tuple[str, bool, bool]]] = {}


def _plan(msg: Message) -> list[tuple[str, bool, bool]]:
    """(field name, is text, is repeated) of the text and message fields of ``msg``'s type."""
    desc = msg.DESCRIPTOR
    plan = _PLAN.get(desc.full_name)
    if plan is None:
        plan = [(f.name, f.type == _STRING, f.is_repeated) for f in desc.fields
                if f.type in (_STRING, _MESSAGE)]
        _PLAN[desc.full_name] = plan
    return plan


def _first_bad(msg: Message, path: str) -> tuple[str, bytes] | None:
    """(field path, raw value) of the first text field that is not valid UTF-8, else None."""
    for name, text, repeated in _plan(msg):
        if repeated:
            items = getattr(msg, name)
            if not items:
                continue
        elif text:
            items = (getattr(msg, name),)
        elif msg.HasField(name):
            items = (getattr(msg, name),)
        else:
            continue
        for i, item in enumerate(items):
            if text:
                if isinstance(item, bytes):
                    return (f"{path}.{name}[{i}]" if repeated else f"{path}.{name}"), item
            else:
                found = _first_bad(item, f"{path}.{name}[{i}]" if repeated else f"{path}.{name}")
                if found:
                    return found
    return None


def check_text(proto: Message, what: str) -> None:
    """UserError when some text field of ``proto`` (a ModelProto) is not valid UTF-8."""
    found = _first_bad(proto, "model")
    if found:
        where, raw = found
        shown = raw[:40].decode("utf-8", "backslashreplace")
        raise UserError(f"{what}: {where} is not valid UTF-8 ({shown!r}); ONNX names and text "
                        "fields must be UTF-8")
