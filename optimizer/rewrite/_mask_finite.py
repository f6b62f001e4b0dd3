"""Whether an additive float32 attention mask leaves every query row a finite key for every 0/1
attention mask, decided on its values: the expression function ``finite_rows(mask, q, past)`` of
rule checks (docs/rules.md).

A contrib attention op (MultiHeadAttention, GroupQueryAttention, packed Attention) gives NaN for a
query row whose scores are all -inf; the export's IsNaN / Where guard (the canonical op's
nan_rows_zero) turns that row into 0. A mask that gives every row at least one finite entry never
makes a row all -inf (fully padded rows included: their keys at the finite fill give the mean of
V, in the export and in the contrib op alike), so the guard has nothing to zero and the lowering
leaves it out. value_range (finite_mask) proves finiteness from constants alone; decoders' masks
(Optimum's ``(1 - m) * min`` added to a causal where(c, 0, -inf), TorchScript's causal masks) keep
a finite key per row only because attention_mask holds 0 or 1, which no interval bound knows. This
module proves it on the values instead.

The mask's cone (_mask_probe._cone: attention_mask, positions, shapes) runs in ONNX Runtime at a
few lengths (P cached and S new tokens: P past every integer constant of the cone with S = 3 and
1, and P = 0; a prefill probes S past every constant and S = 3), each with four attention masks
over the batch rows (two rows where the batch is dynamic):

  A  all ones                     (no padding: the causal part alone)
  B  all zeros                    (fully padded rows)
  C  left-padded / every third key dropped (a different pattern per row)
  D  rows of all zeros and all ones

Assumed: the mask's value at (b, ., i, j) is a function of P, S, i, j and attention_mask[b, j] alone
(an elementwise combination of a causal / positional part and the expanded attention mask: every
masking code of transformers and Optimum), and attention_mask holds only 0 and 1. Checked on the
probes: A's and B's batch rows are equal, and C's and D's values are exactly A's where
attention_mask[b, j] is 1 and B's where it is 0.
Under that assumption a 0/1 attention mask of a probed length gives entry (i, j) A's or B's value,
so a key j finite in both A and B keeps row i finite whatever the mask. Proven: no NaN or +inf in
A or B, and every row of every head and batch row has such a key (a causal mask's own diagonal:
kept, or at the finite padding fill). Not assumed: which keys are masked (a causal band, a window,
padding: the values decide), nor the fill's value (finfo.min, -1e4; -inf only where another key of
the row is finite both ways). Refused (False): a mask of another dtype (a float16 fill plus a
score overflows to -inf), a cone that does not run at the far length, a mask that changes with
integer inputs other than attention_mask and positions (_mask_probe._varies), more than one
attention-mask input, a value that depends on more than attention_mask[b, j].
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._mask_probe import (_NEW, _bind, _cone, _const, _far_length, _int_constants,
                                           _is_mask_input, _run_probe, _MAX_SQUARE_PROBE)

_ROWS = 2   # batch rows probed where the batch is not fixed: C and D differ between them


def finite_rows(ctx: Any, mask: Any, q: Any, past: Any = None) -> bool:
    """True when the float32 additive ``mask`` (broadcast to [B,H,S,P+S]) over q's S new tokens
    ([B,H,S,D] or [B,S,E]) after ``past``'s P cached ones ([B,Hkv,P,D]; None: prefill) gives every
    query row a finite key, with no NaN or +inf, for every 0/1 attention mask (the module
    docstring says what is assumed and what the probes check). Never fails: False where it is not
    proven."""
    if not isinstance(mask, ir.Value) or mask.dtype != ir.DataType.FLOAT or not isinstance(q, ir.Value):
        return False
    if past is not None and (not isinstance(past, ir.Value) or past.shape is None or len(past.shape) != 4):
        return False
    if q.shape is None or len(q.shape) not in (3, 4) or mask.is_graph_input():
        return False
    const = _const(mask)
    if const is not None:
        c = np.asarray(const, np.float64)
        return bool(c.ndim >= 1 and not np.isnan(c).any() and not (c == np.inf).any()
                    and np.isfinite(c).any(axis=-1).all())
    try:
        return _finite(ctx, mask, q, past)
    except EvalFailure:
        return False


def _finite(ctx: Any, mask: ir.Value, q: ir.Value, past: ir.Value | None) -> bool:
    cone, as_const = _cone(mask)
    ams = list({id(i): i for n in cone for i in n.inputs
                if i is not None and i.is_graph_input() and _is_mask_input(i)}.values())
    if len(ams) > 1:
        return False
    am = ams[0] if ams else None
    if am is not None and (am.shape is None or len(am.shape) != 2):
        return False
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    consts = _int_constants(cone)
    sd = q.shape.dims[-2]
    news = (sd,) if isinstance(sd, int) else (_NEW, 1)
    if past is None:
        far = sd if isinstance(sd, int) else _far_length(consts, _NEW)
        if far > _MAX_SQUARE_PROBE:
            return False
        lengths = [(0, far)] + ([(0, _NEW)] if not isinstance(sd, int) and far != _NEW else [])
    else:
        pd = past.shape.dims[2]
        far = pd if isinstance(pd, int) else _far_length(consts)
        lengths = [(far, s) for s in news] + ([(0, s) for s in news if s > 1] if not isinstance(pd, int) else [])
    bd = am.shape.dims[0] if am is not None else None
    rows = bd if isinstance(bd, int) else _ROWS
    ran = 0
    for p, s in lengths:
        env = _bind(q, past, s, p, rows)
        if past is not None and not isinstance(past.shape.dims[0], int) and getattr(past.shape.dims[0], "value", None):
            env[past.shape.dims[0].value] = rows
        got = _probes(cone, as_const, mask, am, p, s, env, opset, rows)
        if got is None:
            if (p, s) == lengths[0]:
                return False   # the far length must run: the model runs there
            continue           # a length the cone cannot run at is one the model cannot
        if not got:
            return False
        ran += 1
    return ran > 0


def _probes(cone: list, as_const: set, mask: ir.Value, am: ir.Value | None, p: int, s: int,
            env: dict, opset: int, rows: int) -> bool | None:
    """Whether every row keeps a finite key for every 0/1 attention mask at these lengths (A .. D of the
    module docstring); None where the cone does not run at them."""
    t = p + s
    j = np.arange(t)
    left = (j >= t // 2).astype(np.int64)           # left padding: the first half dropped
    third = ((j + 1) % 3 != 0).astype(np.int64)     # every third key: inner and last keys
    mixed = np.stack([(left, third)[b % 2] for b in range(rows)])
    halves = np.stack([np.full(t, b % 2, np.int64) for b in range(rows)])
    drops = [None, np.zeros((rows, t), np.int64)] + ([mixed, halves] if am is not None else [])
    vals = []
    for drop in drops:
        arr, why = _run_probe(cone, as_const, mask, p, s, env, opset, batch=rows,
                              drop=None if drop is None or am is None else (am, drop))
        if why is not None:   # the cone does not run at this length (one that varies raised)
            return None if drop is None else False
        arr = np.asarray(arr)
        if arr.ndim != 4 or arr.shape[-1] != t or arr.shape[0] not in (1, rows) or arr.shape[-2] not in (1, s):
            return False
        vals.append(np.broadcast_to(arr, (rows, arr.shape[1], s, t)))
    ones, zeros = vals[0], vals[1]
    if not (np.all(ones == ones[:1]) and np.all(zeros == zeros[:1])):
        return False   # the value depends on the batch row itself, not only on its attention_mask
    if np.isnan(ones).any() or np.isnan(zeros).any() or (ones == np.inf).any() or (zeros == np.inf).any():
        return False
    # a key finite whatever attention_mask[b, j] holds, in every row: no 0/1 mask leaves a row all -inf
    if not (np.isfinite(ones) & np.isfinite(zeros)).any(axis=-1).all():
        return False
    for drop, arr in zip(drops[2:], vals[2:]):
        want = np.where(drop[:, None, None, :] != 0, ones, zeros)
        if not np.array_equal(arr, want):
            return False   # the value depends on more than attention_mask[b, j]: not proven
    return True
