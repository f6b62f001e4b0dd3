"""Whether an attention mask is an attention-mask input's key padding, decided on its values: the
expression functions ``padding_mask``, ``padding_input``, ``padding_window``, ``padding_fill``,
``key_padding``, ``causal_key_padding`` (prefill) and ``cache_key_padding``, ``cache_padding_input``,
``cache_padding_fill``, ``cache_padding_cut`` (S new tokens over a cache of P) of rule checks
(docs/rules.md).

The mask's cone is cut out and run in ONNX Runtime as _mask_probe.py does for causal masks
(_cone, _run_probe: shapes bound, positions P..P+S-1, other integer inputs varied and refused if
the mask changes with them), twice: with the attention mask all ones, then with every third key
dropped from another first key in each batch row (left, right and inner padding at once). The mask
is key padding when the second run keeps exactly the first run's keys less those dropped in its own
row. That form must hold at the other shapes the model takes where a constant of the cone can flip
a comparison (_other_shapes: the query or cache length either side of each constant, the batch either
side of each and past them), not only past every constant. The attention mask is a [B, T] graph
input (named like one, else the one such input whose values the mask reads), or else a boolean
[B, S] value the mask is computed from (a key mask from lengths, a strided Slice of attention_mask),
fed in its place with the cone cut there: a bool holds 0 / 1, so the proof covers every value it
can take. A mask over keys of another length
(cross-attention) is probed with those keys bound to their own count. Proofs are kept per mask
while the nodes of its cone are unchanged (every layer reads the same mask).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import same_dim
from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._mask_probe import (_BATCH_PROBE_SIZE, _CONE_LIMIT, _HEAVY, _MASK_INVERTED, _MASK_ROLE, _MASKED,
                                           _MAX_SQUARE_PROBE, _NEW, _SINGLE_PROBE_SIZE, _band_starts, _bind,
                                           _boundary_lengths, _cone, _const, _far_length, _int_constants,
                                           _is_mask_input, _memo_get, _memo_put, _probe_batches, _run_probe,
                                           _window_rows)

_PAD_BATCH = 2   # batch rows probed where the batch is not fixed: each drops other keys
# batches x lengths _other_shapes may probe (a few ms each); a cone with more constants is not proven
_MAX_SHAPE_PROBES = 768


def _kept(arr: np.ndarray, what: str) -> np.ndarray:
    """A mask's kept keys (a boolean keep-mask as is; a bias: 0 kept, <= _MASKED masked)."""
    if arr.dtype == np.bool_:
        return arr
    arr = arr.astype(np.float64)
    kept = arr == 0
    if not np.all(kept | (arr <= _MASKED)):
        raise EvalFailure(f"the mask adds a bias to kept keys (neither 0 nor masked) {what}")
    return kept


def padding_mask(ctx: Any, mask: Any, q: Any) -> bool:
    """True when ``mask`` (an additive bias or a boolean keep-mask, broadcast to [B,H,S,S]) over
    q's S tokens ([B,H,S,D] or [B,S,E], prefill) is the key padding of an attention-mask input
    [B, T] on top of a causal band or of nothing: run with attention_mask all ones it keeps every
    key, or a band (sliding_window's form); run with some of attention_mask's entries zero, a
    different set in each batch row, it keeps exactly that less the keys zeroed in its own row.
    Decided on values (the cone run in ONNX Runtime, a batch of 2 where the batch is not fixed),
    whatever ops build the mask. Where no graph input proves it, each boolean [B, S] value the mask
    is computed from (S: q's length; AudioFlamingo 3's ``arange < lengths``, a strided Slice of
    attention_mask, a mask from features) is fed as the attention mask instead, the cone cut there,
    provided the rest of the cone reads no graph input's values (only shapes): a bool holds 0 / 1,
    so the proof covers every value it takes. Raises EvalFailure with the reason otherwise (no
    attention-mask input, a bias on kept keys, keys dropped other than attention_mask's)."""
    _padding(ctx, mask, q)
    return True


def padding_input(ctx: Any, mask: Any, q: Any) -> ir.Value:
    """The attention mask whose key padding ``mask`` is (padding_mask() holds): a [B, T] graph
    input, or a boolean [B, S] value the mask is computed from (a key mask made from lengths)."""
    return _padding(ctx, mask, q)[0]


def padding_window(ctx: Any, mask: Any, q: Any) -> int:
    """The causal part of a padding mask (padding_mask() holds): -1 for none (every key kept with
    attention_mask all ones), 0 for a plain causal one, W for a band of W keys (probed past every
    constant of the cone, so a window written as a constant shows). Raises EvalFailure otherwise."""
    _, base, s, _, _ = _padding(ctx, mask, q)
    if base.all():
        return -1
    exact, need = _window_rows(base.reshape(-1, s, s)[:1], 0, s)
    if not exact:
        return 0
    if len(exact) > 1 or min(exact) < need:
        raise EvalFailure(f"the mask's causal part is no single window (rows see {sorted(exact)} keys)")
    return next(iter(exact))


def padding_fill(ctx: Any, mask: Any, q: Any) -> float:
    """The highest value a padding mask (padding_mask() holds) gives a masked key in its probes
    (-inf for a boolean keep-mask): how far it pushes masked keys down."""
    return _padding(ctx, mask, q)[3]


def key_padding(ctx: Any, mask: Any, q: Any, k: Any = None) -> bool:
    """True when ``mask`` is attention_mask's key padding and nothing else: padding_mask() holds,
    every key is kept with attention_mask all ones (no causal part: padding_window() is -1), and
    every masked key gets one value, padding_fill(). The mask is then Where(attention_mask[b, j]
    != 0, 0, fill) for every head and query row, what a 2-D key mask with that fill computes
    (com.microsoft's mask_index / key_padding_mask with mask_filter_value = fill). Needs
    attention_mask's key axis and ``k``'s keys (axis -2, when given) to be q's length, provably
    (self-attention: the probe feeds attention_mask q's length), and every reader of ``mask`` to be
    an attention op (or a dims read), so that the ops building it die. Never fails: False where any
    of it is not proven."""
    return _key_mask(ctx, mask, q, k, causal=False)


def causal_key_padding(ctx: Any, mask: Any, q: Any, k: Any = None) -> bool:
    """key_padding()'s proof for attention_mask's key padding over a plain causal part (CLIP's text
    tower, a decoder's prefill): padding_mask() holds, the causal part is plain causal
    (padding_window() is 0: query i keeps keys 0..i with attention_mask all ones), and every masked
    key, causal or padded, gets one value, padding_fill(). The mask is then Where(key j <= query i
    and attention_mask[b, j] != 0, 0, fill), what com.microsoft's MultiHeadAttention / Attention
    compute from the 2-D key mask with unidirectional=1 and mask_filter_value = fill where the fill
    is the lowest float (ORT 1.32 CPU masks future keys with the lowest float whatever
    mask_filter_value says: the rules ask for padding_fill() == lowest('float')). The same
    conditions on ``k``, the lengths and the readers as key_padding(). Never fails: False where any
    of it is not proven."""
    return _key_mask(ctx, mask, q, k, causal=True)


def _key_mask(ctx: Any, mask: Any, q: Any, k: Any, causal: bool) -> bool:
    if not isinstance(q, ir.Value) or q.shape is None or (k is not None and (
            not isinstance(k, ir.Value) or k.shape is None or len(k.shape) < 2)):
        return False
    d = q.shape.dims[-2] if len(q.shape) >= 2 else None
    kd = k.shape.dims[-2] if k is not None else d
    if not isinstance(mask, ir.Value) or mask.is_graph_output() or any(
            not _attention_reader(u.node) for u in mask.uses()):
        return False   # the 4-D mask stays for another reader (ModernBERT's local band): nothing saved
    if not same_dim(kd, d) and (causal or mask.shape is None or not len(mask.shape)
                                or not same_dim(mask.shape.dims[-1], kd)):
        return False   # keys of another length: key padding alone, proven over those keys (_cross_keys)
    try:
        am, base, s, top, low = _padding(ctx, mask, q)
        if causal and (base.all() or padding_window(ctx, mask, q) != 0):
            return False
    except EvalFailure:
        return False
    return (causal or bool(base.all())) and top == low and same_dim(am.shape.dims[-1], kd)


def padding_inverted(ctx: Any, mask: Any, q: Any) -> bool:
    """True when padding_input()'s key mask marks the masked keys (a bool [B, 1, 1, T] graph input, True =
    masked: _key_mask_4d) rather than the kept ones (attention_mask's 1s)."""
    am = _padding(ctx, mask, q)[0]
    return am.shape is not None and len(am.shape) == 4 and bool(mask.meta.get(_MASK_INVERTED))


def _attention_reader(node: ir.Node) -> bool:
    """An attention op (canonical or lowered), which takes the 2-D form too, or a dims read."""
    return "Attention" in node.op_type or node.op_type in ("Shape", "Size")


# padding proofs by mask: a lowering asks key_padding, causal_key_padding, padding_input and
# padding_fill about one mask, and every layer's attention reads the same one; (the mask, (q's
# shape, the opset), the cone's nodes with their inputs, the result or the failure)
_PROOFS: dict[int, tuple] = {}


def _padding(ctx: Any, mask: Any, q: Any) -> tuple[ir.Value, np.ndarray, int, float, float]:
    """padding_mask()'s proof (_padding_proof), once per mask while its cone is unchanged: the
    proof reads q's shape only, so the layers sharing a mask share it."""
    if not isinstance(mask, ir.Value) or not isinstance(q, ir.Value):
        return _padding_proof(ctx, mask, q)
    key = (repr(q.shape), getattr(getattr(ctx, "facts", None), "opset", None) or 18)
    return _memoized(_PROOFS, mask, key, lambda: _padding_proof(ctx, mask, q))


def _memoized(store: dict[int, tuple], value: ir.Value, key: tuple, prove: Any) -> Any:
    """``prove()`` (a tuple whose first item is the key mask it found) once per ``value`` and
    ``key`` while the nodes it read are unchanged; a failure is kept and raised again."""
    hit = _memo_get(store, value, key)
    if hit is not None:
        if isinstance(hit[0], EvalFailure):
            raise EvalFailure(str(hit[0]))
        return hit[0]
    try:
        res: Any = prove()
    except EvalFailure as exc:
        res = exc
    try:   # the nodes the proof read: cut at a computed key mask, else the whole cone
        cut = res[0] if isinstance(res, tuple) and not res[0].is_graph_input() else None
        cone, _ = _cone(value, cut=cut)
    except EvalFailure:
        cone = None
    if cone is not None:
        _memo_put(store, value, key, cone, res)
    if isinstance(res, EvalFailure):
        raise res
    return res


def _padding_proof(ctx: Any, mask: Any, q: Any, any_base: bool = False,
                   ) -> tuple[ir.Value, np.ndarray, int, float, float]:
    """padding_mask()'s proof: (the attention mask: a [B, T] graph input, else a computed boolean
    [B, S] key mask (_computed_key_masks), the keys kept with it all ones, S, the highest masked
    value, the lowest masked value; both -inf for a boolean keep-mask). ``any_base``: the keys kept
    with it all ones may be any pattern of a static S (_band_padding.py), not only a causal band."""
    for v, what in ((mask, "mask"), (q, "q")):
        if not isinstance(v, ir.Value):
            raise EvalFailure(f"padding_mask() needs the {what} as a graph value")
    if mask.dtype is None or not (mask.dtype.is_floating_point() or mask.dtype == ir.DataType.BOOL):
        raise EvalFailure("the mask is neither an additive float bias nor a boolean keep-mask")
    if mask.is_graph_input():
        raise EvalFailure(f"the mask is the graph input {mask.name!r}, whose values are not known")
    if _const(mask) is not None:
        raise EvalFailure("the mask is a constant: it reads no attention mask")
    if q.shape is None or len(q.shape) not in (3, 4):
        raise EvalFailure("q must be 4-D (or 3-D, [B,S,E]) with a known shape")
    try:
        cone, as_const = _cone(mask)
    except EvalFailure as exc:   # a key mask computed from an activation's values: cut there, below
        cone, as_const, first = None, set(), exc
    if cone is not None:
        try:
            return _input_padding(ctx, mask, q, cone, as_const, any_base=any_base)
        except EvalFailure as exc:
            first = exc
    for km in _computed_key_masks(mask, q.shape.dims[-2]):
        try:
            sub, sub_const = _cone(mask, cut=km)
        except EvalFailure:
            continue
        read = [i for n in sub if n.op_type not in ("Shape", "Size") for i in n.inputs
                if i is not None and i.is_graph_input()]
        if read:   # the probe feeds km alone: any other value the mask reads is unknown to it
            continue
        try:
            return _prove(ctx, mask, q, km, sub, sub_const, cut=km, any_base=any_base)
        except EvalFailure:
            continue
    if not any_base:
        for km in _binarized_key_masks(mask, q):
            try:
                return _key_mask_4d(ctx, mask, q, None, set(), computed=km)
            except EvalFailure:
                continue
    raise first


# ops that make a bool of a float key mask whatever its values (a comparison with one number, a Cast to bool)
_BINARIZE = ("Cast", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")


def _binarized_key_masks(mask: ir.Value, q: ir.Value) -> list[ir.Value]:
    """Bool [B, 1, 1, T] values the mask is computed from, each made by one comparison with a constant number (or a
    Cast to bool) of a float [B, 1, 1, T] graph input (B q's batch): a float key mask (0 / large negative, or 0 / 1)
    read through an op that makes it a bool whatever its values, so the bool's two values are all the probe must
    cover (glue50). A float mask added to the scores as it is reads arbitrary values and is no such value (it stays
    a bias)."""
    found, todo, seen = [], [mask], {id(mask)}
    while todo and len(seen) < _CONE_LIMIT:
        v = todo.pop(0)
        node = v.producer()
        if node is None or node.op_type in _HEAVY or node.domain not in ("", "ai.onnx"):
            continue
        if v.dtype == ir.DataType.BOOL and v.shape is not None and len(v.shape) == 4 and node.op_type in _BINARIZE \
                and v.shape.dims[1] == 1 and v.shape.dims[2] == 1 and same_dim(v.shape.dims[0], q.shape.dims[0]):
            fed = [i for i in node.inputs if i is not None and _const(i) is None]
            consts = [_const(i) for i in node.inputs if i is not None and _const(i) is not None]
            x = fed[0] if len(fed) == 1 else None
            if x is not None and x.is_graph_input() and x.dtype is not None and x.dtype.is_floating_point() \
                    and x.shape is not None and len(x.shape) == 4 and list(x.shape.dims) == list(v.shape.dims) \
                    and (node.op_type == "Cast" or (len(consts) == 1 and consts[0].size == 1)):
                found.append(v)
                continue
        for i in node.inputs:
            if i is not None and id(i) not in seen:
                seen.add(id(i))
                todo.append(i)
    return found[:_MAX_KEY_MASKS]


# computed [B, S] key masks tried per mask (nearest the graph inputs first)
_MAX_KEY_MASKS = 3


def _computed_key_masks(mask: ir.Value, d: Any) -> list[ir.Value]:
    """Boolean [B, S] values the mask is computed from (S: q's length, provably), not graph
    inputs: a key mask made from lengths (``arange(S) < lengths[:, None]``: AudioFlamingo 3, LASR),
    a strided slice of attention_mask (Nemotron 3's subsampled frames), any such value (S: ``d``, q's
    length; None: any, the probe decides). _padding_proof feeds each in turn as the attention mask,
    furthest from the mask first (more of the glue dies)."""
    dist: dict[int, tuple[int, ir.Value]] = {}
    todo, seen = [(mask, 0)], {id(mask)}
    while todo and len(seen) < _CONE_LIMIT:
        v, k = todo.pop(0)
        node = v.producer()
        if (v is not mask and v.dtype == ir.DataType.BOOL and v.shape is not None and len(v.shape) == 2
                and (d is None or same_dim(v.shape.dims[1], d))
                and not same_dim(v.shape.dims[0], v.shape.dims[1] if d is None else d)   # [S, S]: a causal part
                and not v.is_graph_input() and _const(v) is None):
            dist[id(v)] = (k, v)
        if node is None or node.op_type in _HEAVY or node.domain not in ("", "ai.onnx"):
            continue
        for i in node.inputs:
            if i is not None and id(i) not in seen:
                seen.add(id(i))
                todo.append((i, k + 1))
    return [v for _, v in sorted(dist.values(), key=lambda kv: -kv[0])][:_MAX_KEY_MASKS]


def _cross_keys(mask: ir.Value, q: ir.Value) -> Any:
    """The key count of a mask whose last axis is provably not q's length (cross-attention: the
    encoder's keys): its dim (an int with q's an int, else a named symbol other than q's), or None."""
    sd = q.shape.dims[-2]
    kd = mask.shape.dims[-1] if mask.shape is not None and len(mask.shape) == 4 else None
    if kd is None or same_dim(kd, sd):
        return None
    if isinstance(kd, int) and isinstance(sd, int):
        return kd
    if isinstance(kd, int) or isinstance(sd, int) or not getattr(kd, "value", None) or not getattr(sd, "value", None):
        return None
    # both named on the graph's inputs (an exporter's names: sequence, encoder_sequence), never names
    # shape inference made up (unk__N), which say nothing about equality
    declared = {getattr(d, "value", None) for i in mask.graph.inputs if i.shape is not None for d in i.shape.dims}
    return kd if kd.value in declared and sd.value in declared else None


def _input_padding(ctx: Any, mask: ir.Value, q: ir.Value, cone: list[ir.Node], as_const: set[int],
                   **kw: Any) -> tuple[ir.Value, np.ndarray, int, float, float]:
    """_padding_proof over an attention-mask graph input (named like one, else the one [B, T]
    input whose values the mask reads); ``kw``: _prove's past and at."""
    two_d = list({id(i): i for n in cone for i in n.inputs if i is not None and i.is_graph_input()
                  and i.shape is not None and len(i.shape) == 2}.values())
    ams = [i for i in two_d if _is_mask_input(i)]
    if not ams:  # names are the exporter's: else the one [B, T] input whose values (not only its shape) the
        # mask reads, fed as the attention mask; the probe below proves what it does either way
        in_cone = {id(n) for n in cone}
        ams = [i for i in two_d if "pos" not in (i.name or "").lower()  # positions are fed as positions
               and any(n.op_type != "Shape" for n in i.consumers() if id(n) in in_cone)]
        if len(ams) == 1:
            ams[0].meta[_MASK_ROLE] = True
            try:
                return _input_padding(ctx, mask, q, cone, as_const, **kw)
            except EvalFailure:
                del ams[0].meta[_MASK_ROLE]
                raise
    if not ams and not any(kw.values()):   # prefill over any key mask: a [B, 1, 1, T] bool input
        return _key_mask_4d(ctx, mask, q, cone, as_const)
    if len(ams) != 1:
        raise EvalFailure("the mask reads no [batch, keys] attention-mask input" if not ams else
                          f"the mask reads {len(ams)} attention-mask inputs")
    return _prove(ctx, mask, q, ams[0], cone, as_const, **kw)


def _key_mask_4d(ctx: Any, mask: ir.Value, q: ir.Value, cone: list[ir.Node] | None, as_const: set[int],
                 computed: ir.Value | None = None) -> tuple[ir.Value, np.ndarray, int, float, float]:
    """_padding_proof over a bool key mask given as a [B, 1, 1, T] graph input (its dims 1 and 2 declared 1;
    the one such input whose values the mask reads): fed as the attention mask (the drop pattern on its batch
    and key axes), keeping the kept keys (True = kept) or, tried next, marking the masked ones (True = masked,
    masked_fill(m, min): fed negated; padding_inverted() says which, on the mask's meta). The lowerings view
    it [B, T] (key-keep-2d) or use it as it is (key-keep-4d). ``computed``: such a bool value made of a float key mask
    input (_binarized_key_masks), fed in its place with the cone cut there."""
    if computed is not None:
        cone, as_const = _cone(mask, cut=computed)
        if any(i.is_graph_input() for n in cone if n.op_type not in ("Shape", "Size") for i in n.inputs
               if i is not None):   # the probe feeds the bool alone: any other value the mask reads is unknown to it
            raise EvalFailure("the mask reads graph inputs besides its binarized key mask")
        four = [computed]
    else:
        in_cone = {id(n) for n in cone}
        four = [i for i in {id(i): i for n in cone for i in n.inputs if i is not None and i.is_graph_input()}.values()
                if i.dtype == ir.DataType.BOOL and i.shape is not None and len(i.shape) == 4
                and i.shape.dims[1] == 1 and i.shape.dims[2] == 1
                and any(n.op_type not in ("Shape", "Size") for n in i.consumers() if id(n) in in_cone)]
    if len(four) != 1:
        raise EvalFailure("the mask reads no [batch, keys] attention-mask input")
    m4, first = four[0], None
    for inverted in (False, True):
        m4.meta[_MASK_INVERTED] = inverted
        try:
            res = _prove(ctx, mask, q, m4, cone, as_const, cut=m4)
        except EvalFailure as exc:
            first = first or exc
            continue
        finally:
            del m4.meta[_MASK_INVERTED]
        mask.meta[_MASK_INVERTED] = inverted
        return res
    raise first


def _prove(ctx: Any, mask: ir.Value, q: ir.Value, am: ir.Value, cone: list[ir.Node], as_const: set[int],
           cut: ir.Value | None = None, past: ir.Value | None = None, at: tuple[int, int] | None = None,
           any_base: bool = False) -> tuple[ir.Value, np.ndarray, int, float, float]:
    """The padding proof with ``am`` fed as the attention mask (``cut``: am is a computed value);
    ``past`` and ``at`` = (P, S): S new tokens after P cached ones (``past``'s length), keys P + S
    (the base then [rows, heads, S, P + S]); prefill (P = 0) otherwise. ``any_base``: prefill
    self-attention over a static S, whose keys kept with attention_mask all ones may be any [S, S]
    pattern the same in every batch row and head (a band with look-ahead), not only a causal band."""
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    sd, bd = q.shape.dims[-2], am.shape.dims[0]
    if bd == 1 and len(q.shape) == 4 and q.shape.dims[0] != 1:   # one mask row broadcast over q's [B, H, S, D]
        # batch is no [B, T] key padding (the lowerings view it [B, T]: a [1, T] key_padding_mask ORT refuses;
        # fuzz50). (A 3-D q may fold heads into its first dim: not read.)
        raise EvalFailure("a mask of one batch row broadcast over the queries' batch")
    if any_base and (at is not None or not isinstance(sd, int)):
        raise EvalFailure("a key padding over any pattern needs a prefill of a static length")
    p, s = at if at is not None else (0, sd if isinstance(sd, int) else _far_length(_int_constants(cone), 3))
    kd = _cross_keys(mask, q) if at is None else None
    if kd is not None:   # cross-attention: T keys of their own (T - S is no past: nothing reads positions)
        if any("pos" in (i.name or "").lower() for n in cone for i in n.inputs if i is not None and i.is_graph_input()):
            raise EvalFailure("a mask over keys of another length that reads positions")
        p = (kd if isinstance(kd, int) else s + 2) - s
    t = p + s
    if t > _MAX_SQUARE_PROBE:
        raise EvalFailure(f"a probe of {s} x {t} tokens is too large")
    rows = bd if isinstance(bd, int) else _PAD_BATCH
    env = _bind(q, past, s, p, rows)
    if kd is not None and not isinstance(kd, int):
        env[kd.value] = t
    # every third key dropped, from a different first key in each row (a key in the middle and
    # the last ones: left, right and inner padding at once)
    pattern = _drops(rows, t, False)
    if pattern.all():  # one or two tokens in too few rows: drop the last key of the last row, so the
        pattern[-1, -1] = 0  # fill is read from a masked key, never assumed (-inf for a finite fill)
    # then batch row 0 fully padded: its query rows, with no kept key, must get the fill on every key too
    # (a mask that lets them attend every key, transformers 4's _unmask_unattended, is no key padding)
    empty = pattern.copy()
    empty[0] = 0
    got, top, low = [], -np.inf, np.inf
    for drop in (None, (am, pattern), (am, empty)):
        arr, why = _run_probe(cone, as_const, mask, p, s, env, opset, batch=rows, drop=drop, cut=cut)
        if why is not None:
            raise EvalFailure(why)
        if arr.ndim != 4 or arr.shape[-1] != t or arr.shape[-2] not in (1, s) or arr.shape[0] not in (1, rows):
            raise EvalFailure(f"the mask has shape {list(arr.shape)} for a batch of {rows}, {s} queries over {t} keys")
        kept = _kept(arr, "(attention mask " + ("all ones)" if drop is None else "with keys dropped)"))
        if arr.dtype != np.bool_ and not kept.all():
            top = max(top, float(arr[~kept].astype(np.float64).max()))
            low = min(low, float(arr[~kept].astype(np.float64).min()))
        got.append(np.broadcast_to(kept, (rows, arr.shape[1], s, t)))
    base, *padded = got
    if kd is not None and not base.all():
        raise EvalFailure("a mask over keys of another length (cross-attention) that masks keys with attention_mask all ones")
    # a causal part: one band per row, the same in every batch row and head
    if any_base and (kd is not None or not np.array_equal(base, np.broadcast_to(base[:1, :1], base.shape))):
        raise EvalFailure("the keys kept with attention_mask all ones differ between batch rows or heads"
                          if kd is None else "a pattern over keys of another length")
    starts = None if base.all() or any_base else _band_starts(base, p, s)
    for pat, arr in zip((pattern, empty), padded):
        bad = np.argwhere(arr != (base & (pat[:, None, None, :] != 0)))
        if len(bad):
            b, _, i, j = (int(x) for x in bad[0])
            what = "keeps" if arr[tuple(bad[0])] else "masks"
            raise EvalFailure(f"with attention_mask[{b}, {j}] = {int(pat[b, j])} the mask {what} key {j} of "
                              f"query {i} (not attention_mask's key padding)")
    widths = {p + i - lo + 1 for i, lo in enumerate(starts) if lo} if starts is not None else set()
    if len(widths) > 1:
        raise EvalFailure(f"the mask's causal part is no single window (rows see {sorted(widths)} keys)")
    w = next(iter(widths), 0)

    def form(p_: int, s_: int) -> np.ndarray:
        """The keys this proof's form keeps with attention_mask all ones for S new tokens after P: every
        key, or the band of its causal part (a window W: the last W positions)."""
        if any_base:   # a static S: _other_shapes probes other batches at this S only
            return base[0, 0] if (p_, s_) == (p, s) else np.zeros((s_, p_ + s_), bool)
        if starts is None:
            return np.ones((s_, p_ + s_), bool)
        pos, j = p_ + np.arange(s_)[:, None], np.arange(p_ + s_)[None, :]
        return (j <= pos) & (j > pos - w) if w else j <= pos

    def probe(n: int, p_: int, s_: int, pat: np.ndarray) -> None:
        """Run at a batch of n, S new tokens after P, attention_mask ``pat``: the form less each row's
        dropped keys, masked keys within the fills found above (nothing where the cone does not run)."""
        t_ = p_ + s_
        env_ = _bind(q, past, s_, p_, n)
        if kd is not None and not isinstance(kd, int):
            env_[kd.value] = t_
        arr, why = _run_probe(cone, as_const, mask, p_, s_, env_, opset, batch=n, drop=(am, pat), cut=cut)
        if why is not None:   # a shape the cone cannot run at is one the model cannot
            return
        if arr.ndim != 4 or arr.shape[-1] != t_ or arr.shape[-2] not in (1, s_) or arr.shape[0] not in (1, n):
            raise EvalFailure(f"the mask has shape {list(arr.shape)} for a batch of {n}, {s_} queries over {t_} keys")
        kept = np.broadcast_to(_kept(arr, "(another shape)"), (n, arr.shape[1], s_, t_))
        bad = np.argwhere(kept != (form(p_, s_)[None, None] & (pat[:, None, None, :] != 0)))
        if len(bad):
            b, _, i, j = (int(x) for x in bad[0])
            raise EvalFailure(f"with a batch of {n}, {s_} queries after {p_} and attention_mask[{b}, {j}] = "
                              f"{int(pat[b, j])} the mask {'keeps' if kept[tuple(bad[0])] else 'masks'} key {j} of "
                              f"query {i} (not the same key padding at every shape)")
        masked = arr[~_kept(arr, "")].astype(np.float64) if arr.dtype != np.bool_ else np.zeros(0)
        if masked.size and (masked.min() < low or masked.max() > top):
            raise EvalFailure(f"with a batch of {n}, {s_} queries after {p_} the mask fills masked keys with "
                              f"other values ({masked.min()} .. {masked.max()})")

    _other_shapes(probe, rows, p, s, q, past, kd, bd, _int_constants(cone), at is not None)
    return am, base, s, top, (-np.inf if low == np.inf else low)


def _drops(rows: int, t: int, empty: bool) -> np.ndarray:
    """Every third key dropped from another first key per row (batch row 0 fully padded: ``empty``)."""
    pat = ((np.arange(t)[None, :] + np.arange(rows)[:, None]) % 3 != 2).astype(np.int64)
    if empty:
        pat[0] = 0
    return pat


def _other_batches(consts: list[int], far: int, rows: int) -> list[int]:
    """The batches a padding proof runs besides ``rows``: the other mask proofs' and 1 (a mask may
    ignore attention_mask at a batch of 1 only)."""
    return [n for n in (1, *_probe_batches(consts, far)) if n != rows]


def _empty_rows(n: int) -> tuple[bool, ...]:
    """Whether row 0 is fully padded (``_drops``' ``empty``) at a batch of ``n``: always above 1, where
    the other rows drop keys; a batch of 1 both ways."""
    return (True,) if n > 1 else (False, True)


def _other_shapes(probe: Any, rows: int, p: int, s: int, q: ir.Value, past: ir.Value | None, kd: Any, bd: Any,
                  consts: list[int], cache: bool) -> None:
    """The padding proof at the other shapes the model takes where its cone's constants can flip a
    comparison: the query length (prefill, cross keys; over a cache too, past them as well) or the cache
    length either side of each constant, with keys dropped and with row 0 fully padded; the batch either
    side of each and past them (a mask may compare a row index or the batch size with a constant: rows
    past the second keeping every key), at P, S or, where that mask is too large, S = 3 after 2 cached,
    and at each of those other lengths (a batch condition may hold at some lengths only).
    ``probe(rows, P, S, pattern)`` raises unless the mask keeps the proof's form less the pattern's keys
    there (skipped where too large)."""
    sd = q.shape.dims[-2]
    shapes: list[tuple[int, int]] = []
    if cache:
        if not isinstance(past.shape.dims[2], int):
            shapes = [(y, s) for y in _boundary_lengths(consts, 0, p) if y != p]
        if not isinstance(sd, int) and s > 1:   # and the new tokens' count (a chunk of 5..9 keeping every
            # key), from the proof at several new tokens (one new token shows no causal band to extend)
            far_s = _far_length(consts, 3)
            shapes += [(p, x) for x in sorted({*_boundary_lengths(consts, 1, far_s), far_s}) if x != s]
    elif not isinstance(sd, int):
        for x in _boundary_lengths(consts, 1, s):
            t = kd if isinstance(kd, int) else x + (2 if kd is not None else 0)
            if x != s and t >= x:
                shapes.append((t - x, x))
    for p_, s_ in shapes:
        if rows * s_ * (p_ + s_) <= _BATCH_PROBE_SIZE:
            # row 0 fully padded at a batch of 1 too: a fixed batch of 1 runs no other batch, and its
            # base shape alone would not show a mask that lets an empty row see every key at this length
            for empty in (False, True):
                probe(rows, p_, s_, _drops(rows, p_ + s_, empty))
        elif (rows == 1 or not isinstance(bd, int)) and s_ * (p_ + s_) <= _SINGLE_PROBE_SIZE:
            for empty in (False, True):   # too large at 2 rows: one row dropping keys, then none kept
                probe(1, p_, s_, _drops(1, p_ + s_, empty))
        else:   # a length never run would be assumed padded
            raise EvalFailure(f"a probe of {s_} queries after {p_} is too large (the key padding is not "
                              f"proven at every length beside a constant)")
    if isinstance(bd, int):
        return
    small = (p if kd is not None or not cache or isinstance(past.shape.dims[2], int) else min(p, 2),
             s if isinstance(sd, int) or kd is not None else min(s, 3))
    far = _far_length(consts, 3)
    batches = _other_batches(consts, far, rows)   # ``rows`` ran above
    if len(batches) * (len(shapes) + 1) > _MAX_SHAPE_PROBES:
        raise EvalFailure(f"{len(batches)} batches at {len(shapes) + 1} lengths: too many shapes to probe")
    for n in batches:
        at = (p, s) if n * s * (p + s) <= _BATCH_PROBE_SIZE else small
        for empty in _empty_rows(n):
            if n * at[1] * sum(at) <= _BATCH_PROBE_SIZE:
                probe(n, *at, _drops(n, sum(at), empty))
            # and at the other lengths probed above: a batch condition may hold only together with a
            # length between two constants (rows past the second keeping every key at 2..4 tokens)
            for p_, s_ in shapes:
                if n * s_ * (p_ + s_) <= _BATCH_PROBE_SIZE:
                    probe(n, p_, s_, _drops(n, p_ + s_, empty))


# cache proofs by mask: (the mask, q's and the past's shapes, the opset, the cone's signature, the
# (attention mask, fill, whether it is cut to the keys) or None)
_CACHE_PROOFS: dict[int, tuple] = {}


def cache_key_padding(ctx: Any, mask: Any, q: Any, past: Any) -> bool:
    """causal_key_padding() for S new tokens over a cache of P (``past``'s length, axis 2): the mask,
    [B, ., S, P + S], is Where(key j <= P + i and attention_mask[b, j] != 0, 0, fill) with one fill
    for causal and padded keys, proven on its values with an attention-mask input [B, P + S]: run
    with it all ones it keeps exactly keys 0..P + i in row i, with every third key dropped (another
    first key per batch row) exactly those less. Probed with P past every integer constant of the
    cone, at S = q's length (3 and 1 where dynamic), the fill the same at each, then at P either side
    of each constant and other batch sizes (_other_shapes). Every reader of the
    mask must be an attention op (or a dims read). Never fails: False where any of it is not proven."""
    return _cache_proof(ctx, mask, q, past) is not None


def cache_padding_input(ctx: Any, mask: Any, q: Any, past: Any) -> ir.Value:
    """The attention-mask input of a mask cache_key_padding() proves."""
    return _cache_proof_or_raise(ctx, mask, q, past)[0]


def cache_padding_fill(ctx: Any, mask: Any, q: Any, past: Any) -> float:
    """The one value a mask cache_key_padding() proves gives causal and padded keys."""
    return _cache_proof_or_raise(ctx, mask, q, past)[1]


def cache_padding_cut(ctx: Any, mask: Any, q: Any, past: Any) -> bool:
    """Whether the model takes an attention mask longer than P + S for a mask cache_key_padding()
    proves, reading its first P + S columns (_reads_first_keys): the rebuild then slices it."""
    return _cache_proof_or_raise(ctx, mask, q, past)[2]


def _cache_proof_or_raise(ctx: Any, mask: Any, q: Any, past: Any) -> tuple[ir.Value, float, bool]:
    res = _cache_proof(ctx, mask, q, past)
    if res is None:
        raise EvalFailure("the mask is not proven attention_mask's key padding over a causal part with a cache")
    return res


def _reads_first_keys(cone: list[ir.Node], as_const: set[int], mask: ir.Value, q: ir.Value, past: ir.Value,
                      am: ir.Value, p: int, news: tuple[int, ...], opset: int) -> bool:
    """Whether the cone takes an attention mask longer than the P + S keys and reads its first
    P + S columns (True: a rebuild must cut it there too, else it would fail on inputs the model
    accepts), decided by probes with one more column, that one masked, at each of the S ``news``,
    with the first P + S columns all kept and with every third key dropped (a term only a longer
    mask turns on may keep or hide keys: every kept key is causal at one new token). False when the
    cone fails on the longer mask or gives a key per column at each (the model takes no longer
    mask); EvalFailure when it reads other columns, or takes it at some S only."""
    if mask.shape is not None and len(mask.shape) and same_dim(am.shape.dims[-1], mask.shape.dims[-1]):
        return False   # declared as long as the keys
    rows = am.shape.dims[0] if isinstance(am.shape.dims[0], int) else _PAD_BATCH
    takes = set()
    for s in news:
        env = _bind(q, past, s, p, rows)
        t = p + s
        causal = np.arange(t)[None, :] <= p + np.arange(s)[:, None]
        for pat in (np.ones((rows, t), np.int64), _drops(rows, t, False)):
            longer = np.concatenate([pat, np.zeros((rows, 1), np.int64)], axis=1)   # the extra column masked
            arr, why = _run_probe(cone, as_const, mask, p, s, env, opset, batch=rows, drop=(am, longer),
                                  extra_keys=1)
            if why is not None or arr.shape[-1] == t + 1:
                takes.add(False)
                continue
            want = causal[None, None] & (pat[:, None, None, :] != 0)
            if arr.ndim != 4 or arr.shape[-1] != t or arr.shape[0] not in (1, rows) or not np.array_equal(
                    np.broadcast_to(_kept(arr, "(a longer attention mask)"), (rows, arr.shape[1], s, t)),
                    np.broadcast_to(want, (rows, arr.shape[1], s, t))):
                raise EvalFailure("with an attention mask longer than the keys the mask is not the key padding "
                                  "of its first columns")
            takes.add(True)
    if len(takes) > 1:
        raise EvalFailure("the mask takes an attention mask longer than the keys at some lengths only")
    return takes.pop()


def _cache_proof(ctx: Any, mask: Any, q: Any, past: Any) -> tuple[ir.Value, float, bool] | None:
    if not all(isinstance(v, ir.Value) for v in (mask, q, past)) or any(
            v.shape is None or len(v.shape) != 4 for v in (q, past)):
        return None
    if mask.dtype is None or not (mask.dtype.is_floating_point() or mask.dtype == ir.DataType.BOOL) or (
            mask.is_graph_input() or mask.is_graph_output() or _const(mask) is not None):
        return None
    if any(not _attention_reader(u.node) for u in mask.uses()):
        return None
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    key = (repr(q.shape), repr(past.shape), opset)
    hit = _memo_get(_CACHE_PROOFS, mask, key)
    if hit is not None:
        return hit[0]
    try:
        cone, as_const = _cone(mask)
    except EvalFailure:
        return None
    res: tuple[ir.Value, float] | None = None
    try:
        sd, pd = q.shape.dims[2], past.shape.dims[2]
        p = pd if isinstance(pd, int) else _far_length(_int_constants(cone))
        fills, ams = set(), set()
        news = (sd,) if isinstance(sd, int) else (_NEW, 1)
        for s in news:
            am, base, _, top, low = _input_padding(ctx, mask, q, cone, as_const, past=past, at=(p, s))
            causal = np.arange(p + s)[None, :] <= p + np.arange(s)[:, None]
            if top != low or not np.array_equal(base, np.broadcast_to(causal, base.shape)):
                raise EvalFailure("not causal with one fill")
            fills.add(top)
            ams.add(id(am))
        if len(fills) == 1 and len(ams) == 1 and am.is_graph_input():
            res = (am, fills.pop(), _reads_first_keys(cone, as_const, mask, q, past, am, p, news, opset))
    except EvalFailure:
        res = None
    _memo_put(_CACHE_PROOFS, mask, key, cone, res)
    return res


# --------------------------------------------------------------------------- per-key reductions

# reduction proofs by value: (the value, (the opset,), the cone's signature, (km, negated) or the failure)
_REDUCED: dict[int, tuple] = {}


def key_mask_reduction(ctx: Any, r: Any) -> bool:
    """True when ``r`` ([B, 1.., T], any dtype holding 0 / 1) is a key mask km's per-key value,
    km[b, j] or its negation at every key j, whatever ops compute it from km: a 4-D mask built
    from km reduced over its query axis (LASR's conv module reads ``all(~mask, dim=query)`` as a
    frame mask: Not, Cast, ReduceMin), so that it can read km itself and the 4-D mask dies. km is a
    boolean [B, T] value r is computed from (T: r's last dim; a key mask from lengths) or an
    attention-mask input [B, T]. Decided on values: r's cone, cut at km, runs with km all ones,
    with every third key dropped from another first key per row, with that pattern flipped and with
    batch row 0 fully padded (a batch of 2 where not fixed), then at the lengths either side of each
    constant of the cone and batches either side of each and past them; nothing else of the cone may
    read an input's values. Raises
    EvalFailure with the reason otherwise."""
    _reduced(ctx, r)
    return True


def reduced_key_mask(ctx: Any, r: Any) -> ir.Value:
    """The key mask km of a key_mask_reduction() ``r``."""
    return _reduced(ctx, r)[0]


def reduced_key_mask_negated(ctx: Any, r: Any) -> bool:
    """Whether a key_mask_reduction() ``r`` is ~km (True) or km (False)."""
    return _reduced(ctx, r)[1]


def _reduced(ctx: Any, r: Any) -> tuple[ir.Value, bool]:
    if not isinstance(r, ir.Value):
        raise EvalFailure("key_mask_reduction() needs a graph value")
    key = (getattr(getattr(ctx, "facts", None), "opset", None) or 18,)
    return _memoized(_REDUCED, r, key, lambda: _reduced_proof(r, key[0]))


def _reduced_proof(r: ir.Value, opset: int) -> tuple[ir.Value, bool]:
    if r.is_graph_input() or _const(r) is not None:
        raise EvalFailure("a graph input or a constant is no reduction of a key mask")
    if r.shape is None or len(r.shape) < 2 or r.dtype is None:
        raise EvalFailure("the value needs a known type and rank >= 2 ([batch, 1.., keys])")
    # (any [B, T]: shape inference may name r's keys and km's apart; the probe compares the shapes)
    cands = _computed_key_masks(r, None)
    seen = {id(n) for n in _ancestors(r)}
    cands += [i for i in r.graph.inputs if i.shape is not None and len(i.shape) == 2 and _is_mask_input(i)
              and any(id(u.node) in seen for u in i.uses())]
    if not cands:
        raise EvalFailure("the value is computed from no [batch, keys] key mask")
    first = None
    for km in cands:
        try:
            return _reduced_by(r, km, opset)
        except EvalFailure as exc:
            first = first or exc
    raise first


def _ancestors(v: ir.Value) -> list[ir.Node]:
    """The nodes ``v`` is computed from (_CONE_LIMIT of them at most)."""
    out, todo, seen = [], [v], {id(v)}
    while todo and len(out) < _CONE_LIMIT:
        node = todo.pop().producer()
        if node is None:
            continue
        out.append(node)
        for i in node.inputs:
            if i is not None and id(i) not in seen:
                seen.add(id(i))
                todo.append(i)
    return out


def _reduced_by(r: ir.Value, km: ir.Value, opset: int) -> tuple[ir.Value, bool]:
    """key_mask_reduction()'s proof with ``km`` fed as the key mask."""
    cut = None if km.is_graph_input() else km
    cone, as_const = _cone(r, cut=cut)
    if any(i is not None and i.is_graph_input() and i is not km for n in cone if n.op_type not in ("Shape", "Size")
           for i in n.inputs):
        raise EvalFailure("the value reads an input's values besides the key mask")
    bd, kd = km.shape.dims[0], km.shape.dims[1]
    s = kd if isinstance(kd, int) else _far_length(_int_constants(cone), 3)
    rows = bd if isinstance(bd, int) else _PAD_BATCH
    env = {d.value: v for d, v in ((bd, rows), (kd, s)) if not isinstance(d, int) and getattr(d, "value", None)}
    pattern = _drops(rows, s, False)
    empty = _drops(rows, s, True)   # and batch row 0 fully padded (a mask whose empty rows attend every key is no key padding)
    same = negated = True
    for pat in (np.ones_like(pattern), pattern, 1 - pattern, empty):
        arr, why = _run_probe(cone, as_const, r, 0, s, env, opset, batch=rows, drop=(km, pat), cut=cut)
        if why is not None:
            raise EvalFailure(why)
        if arr.ndim != len(r.shape) or arr.shape[0] != rows or arr.shape[-1] != s or any(
                d != 1 for d in arr.shape[1:-1]):
            raise EvalFailure(f"the value has shape {list(arr.shape)} for a key mask [{rows}, {s}]")
        vals = arr.reshape(rows, s).astype(np.float64)
        if not np.all((vals == 0) | (vals == 1)):
            raise EvalFailure("the value holds other than 0 and 1")
        same = same and bool(np.array_equal(vals != 0, pat != 0))
        negated = negated and bool(np.array_equal(vals != 0, pat == 0))
    if not (same or negated):
        raise EvalFailure(f"the value is not {km.name!r}'s per-key value (nor its negation)")
    # the other lengths either side of each constant of the cone, and batches either side of each and past
    # them at each length (_other_shapes'), row 0 fully padded, the others dropping keys
    consts = _int_constants(cone)
    far = _far_length(consts, 3)
    shapes = [(rows, x, e) for x in _boundary_lengths(consts, 1, s) if x != s for e in (False, True)
              ] if not isinstance(kd, int) else []
    if not isinstance(bd, int):   # at each of those lengths too (a batch condition may hold at some only),
        lens = [s, *sorted({x for _, x, _ in shapes})]
        shapes += [(n, x, e) for n in _other_batches(consts, far, rows) for x in lens for e in _empty_rows(n)]
    if len(shapes) > _MAX_SHAPE_PROBES:
        raise EvalFailure(f"{len(shapes)} shapes to probe: too many")
    for n, s_, empty_row in shapes:
        if n * s_ > _BATCH_PROBE_SIZE:
            continue
        pat = _drops(n, s_, empty_row)
        env_ = {d.value: v for d, v in ((bd, n), (kd, s_)) if not isinstance(d, int) and getattr(d, "value", None)}
        arr, why = _run_probe(cone, as_const, r, 0, s_, env_, opset, batch=n, drop=(km, pat), cut=cut)
        if why is not None:   # a shape the cone cannot run at is one the model cannot
            continue
        if arr.shape[0] != n or arr.size != n * s_ or not np.array_equal(
                arr.reshape(n, s_).astype(np.float64) != 0, (pat == 0) if negated else (pat != 0)):
            raise EvalFailure(f"the value is not {km.name!r}'s per-key value with a batch of {n} over {s_} keys")
    return km, negated
