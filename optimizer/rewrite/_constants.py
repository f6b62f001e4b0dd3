"""The constant a value holds, as the rule engine reads it (the matcher's GraphFacts and the local checker):
an initializer that is not also a graph input (an input can be overridden), or a Constant node's output; its
array only up to MAX_CONST_ELEMENTS entries, so scalar / value constraints never materialize large weights (and the
local checker feeds random data for a larger constant: no rule read its values)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

MAX_CONST_ELEMENTS = 1 << 20


def const_tensor(v: ir.Value) -> ir.TensorProtocol | None:
    """The value's tensor when it is an initializer (not a graph input) or a Constant node's output."""
    if v.is_graph_input():
        return None          # an initializer that is also an input can be overridden
    if v.const_value is not None:
        return v.const_value
    prod = v.producer()
    if prod is not None and prod.op_type == "Constant" and prod.domain in ("", "ai.onnx"):
        attrs = prod.attributes
        if "value" in attrs:
            return attrs["value"].value
        for key in ("value_float", "value_floats", "value_int", "value_ints"):
            if key in attrs:
                return ir.tensor(np.asarray(attrs[key].value, dtype=np.float32 if "float" in key else np.int64))
    return None


def const_array(v: ir.Value) -> np.ndarray | None:
    """const_tensor's values, None above MAX_CONST_ELEMENTS entries or when unreadable (an external tensor)."""
    t = const_tensor(v)
    if t is None:
        return None
    size = 1
    for d in t.shape:
        size *= int(d)
    if size > MAX_CONST_ELEMENTS:
        return None
    try:
        return np.asarray(t.numpy())
    except Exception:  # an unreadable external tensor: treat as an input
        return None
