"""Position ids decided on their values, for the paged-KV readers hook (trt_paged_kv.py).

Some exporters compute the position ids of the new tokens from the padding mask and the past
length rather than as ``Range(0, S) + past_len`` (OPT: ``(cumsum(attention_mask) * attention_mask
- 1)[:, past_len:] + 2``). A paged batch has no padding (docs/paged_kv.md, contract limits), so
whatever the formula, it is replaced by ``seq_lens[b] - S + i + c`` when its values say so: the
nodes computing it are run (rewrite/_mask_probe.py's cut-out, attention_mask all ones, the
past's shape a constant) at two past lengths, and must give ``P + i + c`` for new token ``i``,
one constant ``c`` for both.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._mask_probe import _MIN_PAST, _NEW, _cone, _probe_model

_PROBE_PASTS = (_MIN_PAST, _MIN_PAST + 7)
_BATCH = 2  # rows of the probe: positions computed per sequence come out [2, S]


def position_offset(value: ir.Value, past: ir.Value, opset: int, new_dims=()) -> tuple[int, bool]:
    """``(c, per_row)`` where ``value`` holds the positions ``P + i + c`` of the S new tokens after
    P cached ones (any leading axes); ``per_row``: they are [B, S] already, one row per sequence
    (probed at batch 2). ``new_dims``: S as the paged attentions' shapes say it (static, or
    symbols bound to the probe's S), for positions whose own length is unknown (Range(P, P + S)
    of a decode step whose S is fixed at 1 on the hidden state only). Raises EvalFailure with
    the reason otherwise."""
    if value.dtype is None or not value.dtype.is_integer():
        raise EvalFailure(f"the positions {value.name!r} are not integers")
    if past.shape is None or len(past.shape) != 4 or value.shape is None or not len(value.shape):
        raise EvalFailure("the past and the positions need known ranks")
    cone, as_const = _cone(value)
    sd = value.shape.dims[-1]
    static = [d for d in (sd, *new_dims) if isinstance(d, int)]
    s = static[0] if static else _NEW
    offsets, per_row = set(), True
    for p in _PROBE_PASTS:
        bind = ((past.shape.dims[2], p), (past.shape.dims[0], _BATCH), (sd, s), *((d, s) for d in new_dims))
        env = {d.value: v for d, v in bind if not isinstance(d, int) and getattr(d, "value", None)}
        model, feeds = _probe_model(cone, as_const, value, p, s, env, opset)
        from onnx_fuse.verify import make_session

        try:
            arr = np.asarray(make_session(model, threads=1, quiet=True).run(None, feeds)[0])
        except Exception as exc:  # noqa: BLE001 - a cone that cannot run proves nothing
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise EvalFailure(f"the position probe did not run ({text})") from None
        if arr.ndim == 0 or arr.shape[-1] != s:
            raise EvalFailure(f"the positions have shape {list(arr.shape)} for {s} new tokens")
        delta = arr.reshape(-1, s).astype(np.int64) - (p + np.arange(s))
        if not np.all(delta == delta.flat[0]):
            raise EvalFailure(f"the positions {arr.reshape(-1, s)[0].tolist()} of {s} new tokens after "
                              f"{p} cached ones are not consecutive from the past length")
        offsets.add(int(delta.flat[0]))
        per_row = per_row and arr.shape == (_BATCH, s)
    if len(offsets) != 1:
        raise EvalFailure("the positions do not follow the past length")
    return offsets.pop(), per_row
