"""NumPy reference implementations of the ops in domain ``onnx_fuse`` (docs/ops.md).

They are the oracle for CPU tests (graphs with our ops run through them) and GPU kernel tests.
"""

from onnx_fuse.reference.attention import (
    append_kv,
    fused_attention,
    fused_attention_op,
    paged_attention,
    paged_attention_op,
    resolve_scale,
)

__all__ = [
    "append_kv",
    "fused_attention",
    "fused_attention_op",
    "paged_attention",
    "paged_attention_op",
    "resolve_scale",
]
