"""Key padding over any fixed pattern of keys, decided on its values: ``banded_key_padding`` and
``padding_base`` (rule expression functions, docs/rules.md).

Moonshine Streaming's encoder masks each layer with a window that looks ahead (``sliding_windows``
of (left, right) keys: query i sees keys i - left + 1 .. i + right - 1) And-ed with a frame mask
computed from the conv stem (``Greater(conv1d(mask), 0)``). padding_mask()'s proof
(_key_padding_proof.py) takes key padding over nothing or a causal band only. Where the query
length is static (audio of a fixed sample count), the keys kept with the key mask all ones are a
constant [S, S] pattern whatever it is: the same proof, run with ``any_base``, checks on the values
that the mask is ``pattern[i, j] and km[b, j]`` with one fill for every masked key (fully padded
rows included, at every batch size probed), and the lowerings rebuild it as
``Where(pattern & km[:, None, None, :], 0, fill)`` from a constant (rules/attention/lower.yaml,
banded-key-padding-bias), so the index-grid glue between km and the attention dies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import same_dim
from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._key_padding_proof import _attention_reader, _memoized, _padding_proof

# proofs by mask, as _key_padding_proof._PROOFS (every layer reading one mask shares its proof)
_PROOFS: dict[int, tuple] = {}


def _base_padding(ctx: Any, mask: Any, q: Any) -> tuple[ir.Value, np.ndarray, int, float, float]:
    if not isinstance(mask, ir.Value) or not isinstance(q, ir.Value):
        return _padding_proof(ctx, mask, q, any_base=True)
    key = (repr(q.shape), getattr(getattr(ctx, "facts", None), "opset", None) or 18)
    return _memoized(_PROOFS, mask, key, lambda: _padding_proof(ctx, mask, q, any_base=True))


def banded_key_padding(ctx: Any, mask: Any, q: Any, k: Any = None) -> bool:
    """True when ``mask`` (prefill self-attention, q's length S static) is a key mask's padding
    (an attention-mask input [B, S], or a boolean [B, S] value it is computed from) And-ed with a
    fixed [S, S] pattern of kept keys that is not every key, with one value for every masked key:
    Where(pattern[i, j] and km[b, j], 0, fill). ``k``'s keys must be q's length and every reader of
    the mask an attention op (or a dims read), as for key_padding(). Never fails."""
    if not isinstance(mask, ir.Value) or not isinstance(q, ir.Value) or q.shape is None or len(q.shape) < 2:
        return False
    d = q.shape.dims[-2]
    kd = k.shape.dims[-2] if isinstance(k, ir.Value) and k.shape is not None and len(k.shape) >= 2 else d
    if not isinstance(d, int) or not same_dim(kd, d) or mask.is_graph_output() or any(
            not _attention_reader(u.node) for u in mask.uses()):
        return False
    try:
        am, base, _, top, low = _base_padding(ctx, mask, q)
    except EvalFailure:
        return False
    return not base.all() and top == low and same_dim(am.shape.dims[1], d)


def padding_base(ctx: Any, mask: Any, q: Any) -> np.ndarray:
    """The keys a mask banded_key_padding() proves keeps with its key mask all ones, as a bool
    [1, 1, S, S] constant."""
    base = _base_padding(ctx, mask, q)[1]
    return np.ascontiguousarray(base[:1, :1])


def base_padding_input(ctx: Any, mask: Any, q: Any) -> ir.Value:
    """The key mask (an attention-mask input or a computed bool [B, S]) of banded_key_padding()."""
    return _base_padding(ctx, mask, q)[0]


def base_padding_fill(ctx: Any, mask: Any, q: Any) -> float:
    """The one value a mask banded_key_padding() proves gives its masked keys."""
    return _base_padding(ctx, mask, q)[3]
