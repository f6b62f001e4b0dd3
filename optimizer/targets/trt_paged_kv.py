"""Paged KV (level 4, target trt): the graph-global half of the `trt-paged-kv` lowering.

The lowering itself is a rule (rules/attention/paged_trt.yaml): every canonical AttentionKV
(recognize.yaml turns each exporter's KV-cache attention into one) becomes
onnx_fuse::PagedAttention over a block-paged pool, and its `graph_io` block swaps the model's
past_key_values.N.* inputs and present.N.* outputs for the pools, block_tables and seq_lens
(docs/paged_kv.md). What no single match can do lives here, as the readers hook
``kv-cache-positions`` the rule names: the past tensors also told the rest of the graph

- the batch size, ``Shape(past)[0:1]``: it becomes ``Shape(seq_lens)``;
- the past length, ``Shape(past)[2:3]``, as ``cache_position = Range(0, S) + past_len`` (or
  the constant ``[0 .. S-1]`` where a static S was folded, e.g. a decode export with S = 1): a
  paged batch is ragged, so positions become per sequence, ``seq_lens[b] - S + i`` ([B, S]), which is
  only sound where the positions flow elementwise into RoPE's cos/sin ([1, S, 1] -> [B, S, 1]) or
  index a position-embedding table added to a [B, S, H] tensor (GPT-2's wpe);
- position ids computed some other way from the past length (OPT: attention_mask's cumsum sliced at
  the past length) that index a position-embedding table: accepted when their values are the cache
  positions P + i + c (trt_paged_positions.py probes them), then ``seq_lens[b] - S + i + c``;
- ``Shape(x)[0:1]`` of another graph input with the past's batch dim (the padding mask, kept only
  for its batch size): ``Shape(seq_lens)``, so that input can go.

``check`` refuses (the rule then fires nowhere, and the report says why) when a past tensor is
read in any other way, or when a past-like graph input is left that no lowered attention reads
(a model is never half paged). ``apply`` rewrites those readers once every attention is lowered.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import raw_axes
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN
from onnx_fuse.rewrite._graph_io import ReadersHook, register_readers_hook
from onnx_fuse.rewrite._rule import CANONICAL_DOMAIN
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous

__all__ = ["paged_inputs_from_contiguous", "gather_pool", "KV_CACHE_POSITIONS"]


class _Refuse(Exception):
    """A reader of the past tensors that has no paged equivalent."""


def _prod(v: ir.Value | None) -> ir.Node | None:
    return v.producer() if v is not None else None


def _users(v: ir.Value) -> list[ir.Node]:
    return [n for n, _ in v.uses()]


def _scalar(v: ir.Value | None) -> float | None:
    if v is None or v.const_value is None:
        return None
    arr = v.const_value.numpy()
    return float(arr.reshape(-1)[0]) if arr.size == 1 else None


def _live(graph: ir.Graph, dead_outputs: set[int], matched: set[ir.Node], replaced: set[int] = frozenset()) -> set[int]:
    """Nodes still needed once the lowered attentions read only q, k and v (inputs 0-2), and the
    values ``replaced`` (ids: position ids apply() re-derives) are no longer computed."""
    live: set[int] = set()
    stack = [o for o in graph.outputs if id(o) not in dead_outputs]
    while stack:
        v = stack.pop()
        node = _prod(v) if id(v) not in replaced else None
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        ins = node.inputs[:3] if node in matched else node.inputs
        stack.extend(i for i in ins if i is not None)
    return live


@dataclasses.dataclass
class _ShapeUse:
    batch: list[ir.Node] = dataclasses.field(default_factory=list)      # Shape(past, 0:1)
    batch_scalar: list[ir.Node] = dataclasses.field(default_factory=list)  # Gather(Shape(past), 0)
    cache_pos: list[ir.Node] = dataclasses.field(default_factory=list)  # Add(Range(0, S, 1), past_len)
    rope_unsq: list[ir.Node] = dataclasses.field(default_factory=list)  # Unsqueeze(cache_pos, [0, 2]) -> RoPE
    abs_unsq: list[ir.Node] = dataclasses.field(default_factory=list)   # Unsqueeze(cache_pos, [0]) -> wpe Gather
    # position ids computed another way (OPT: from attention_mask's cumsum), proven P + i + c by
    # their values (trt_paged_positions.py): (the positions, c)
    probed: list[tuple[ir.Value, int]] = dataclasses.field(default_factory=list)


_ROPE_PATH_OPS = {"Cast", "Mul", "Div", "Add", "Cos", "Sin", "Expand", "Concat", "Unsqueeze"}


def _shape_uses(pasts: list[ir.Value], live: set[int], matched: set[ir.Node], opset: int = 18,
                new_dim=None) -> _ShapeUse:
    uses = _ShapeUse()
    for past in pasts:
        probe = (past, opset, new_dim)
        for user in _users(past):
            if id(user) not in live or user in matched:
                continue
            if user.op_type != "Shape":
                raise _Refuse(f"past {past.name!r} is read by {user.op_type} {user.name!r}")
            start = user.attributes["start"].value if "start" in user.attributes else 0
            end = user.attributes["end"].value if "end" in user.attributes else None
            if (start, end) == (0, 1):
                uses.batch.append(user)
            elif (start, end) == (2, 3):
                _past_len_uses(user.outputs[0], live, uses, probe)
            elif (start, end) == (0, None):  # the whole shape, read dim by dim (Gather of one index)
                for g in _users(user.outputs[0]):
                    if id(g) not in live:
                        continue
                    axis = g.attributes["axis"].value if "axis" in g.attributes else 0
                    i = _scalar(g.inputs[1]) if g.op_type == "Gather" and len(g.inputs) > 1 else None
                    if g.op_type != "Gather" or axis != 0 or i is None or g.inputs[1].shape is None \
                            or len(g.inputs[1].shape) != 0:
                        raise _Refuse(f"Shape(past) is read by {g.op_type} {g.name!r}, not one dim at a time")
                    if int(i) in (0, -4):
                        uses.batch_scalar.append(g)
                    elif int(i) in (2, -2):
                        _past_len_uses(g.outputs[0], live, uses, probe)
                    else:
                        raise _Refuse(f"Shape(past)[{int(i)}] has no paged equivalent")
            else:
                raise _Refuse(f"Shape(past)[{start}:{end}] has no paged equivalent")
    return uses


def _past_len_uses(length: ir.Value, live: set[int], uses: _ShapeUse, probe: tuple) -> None:
    """``length``: the past length ([1] or a scalar); its readers must compute cache_position,
    or position ids whose values are the cache positions (``_probed_positions``)."""
    vals = [length]
    vals += [u.outputs[0] for u in _users(length) if id(u) in live and u.op_type == "Squeeze"]
    for v in vals:
        others = [u for u in _users(v) if id(u) in live and u.op_type != "Squeeze"
                  and (u.op_type != "Add" or _arange(u) is None)]
        if others:
            _probed_positions(others, live, uses, *probe)
        for user in _users(v):
            if id(user) not in live or user.op_type == "Squeeze" or user in others:
                continue
            uses.cache_pos.append(user)
            for u2 in _users(user.outputs[0]):
                if id(u2) not in live:
                    continue
                if u2.op_type == "Unsqueeze" and raw_axes(u2) == [0]:
                    _check_position_embedding(u2, live)
                    uses.abs_unsq.append(u2)
                    continue
                if u2.op_type != "Unsqueeze" or raw_axes(u2) != [0, 2]:
                    raise _Refuse(f"cache_position feeds {u2.op_type} {u2.name!r}, not the RoPE positions")
                _check_rope_path(u2, live)
                uses.rope_unsq.append(u2)


_INT_OPS_LIMIT = 256


def _probed_positions(starts: list[ir.Node], live: set[int], uses: _ShapeUse, past: ir.Value,
                      opset: int, new_dim=None) -> None:
    """The past length read by ``starts`` must only reach position ids (the index of a constant
    embedding table, or [1, S] / [S] ids on their way to RoPE), through integer ops; those must be
    the new tokens' cache positions P + i + c, checked on their values. ``new_dim``: the paged
    attentions' query length as their shapes say (_query_len), a source of S where the
    positions' own dim is unknown."""
    from onnx_fuse.rewrite._expr import EvalFailure
    from onnx_fuse.targets.trt_paged_positions import position_offset

    found: dict[int, ir.Value] = {}
    stack, seen = list(starts), set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > _INT_OPS_LIMIT or node.domain not in ("", "ai.onnx"):
            raise _Refuse(f"the past length feeds {node.op_type} {node.name!r}, not cache_position")
        for out in node.outputs:
            if out.is_graph_output() or out.dtype is None or not (out.dtype.is_integer()
                                                                   or out.dtype == ir.DataType.BOOL):
                raise _Refuse(f"the past length feeds {node.op_type} {node.name!r}, not cache_position")
            reads = [(u, i) for u, i in out.uses() if id(u) in live]
            if reads and all(_position_read(u, i, out) for u, i in reads):
                found[id(out)] = out  # position ids: what reads them is checked below
                continue
            for user, idx in reads:
                if user.op_type == "Gather" and idx == 1 and user.inputs[0].const_value is not None:
                    found[id(out)] = out
                else:
                    stack.append(user)
    for pos in found.values():
        try:
            c, per_row = position_offset(pos, past, opset, tuple(new_dim or ()))
        except EvalFailure as exc:
            raise _Refuse(f"the past length feeds the position ids {pos.name!r}, which are not the cache "
                          f"positions: {exc}") from None
        if _new_tokens_source(pos.graph, pos, new_dim) is None:
            raise _Refuse(f"the position ids {pos.name!r} are the cache positions, but no graph input gives "
                          "the number of new tokens")
        if pos.shape is not None and len(pos.shape) == 1:
            _check_position_row(pos, live)  # [S] -> [B, S]: only on the way to [1, S, 1] / [1, S]
        elif not (per_row or _batch_shaped(pos, past)):
            _check_positions_value(pos, live)  # [1, S] -> [B, S] must keep the consumers' shapes
        if all(p is not pos for p, _ in uses.probed):
            uses.probed.append((pos, c))


def _position_read(user: ir.Node, idx: int, out: ir.Value) -> bool:
    """``out`` read as position ids: the index of a constant embedding table, [1, S] unsqueezed
    to [1, S, 1] on the way to RoPE's cos/sin, or one row [S] (Range(P, P + S)) unsqueezed to
    [1, S, 1] or [1, S], cast first or not, or to [1, 1, S] cast into inv_freq's MatMul
    (_check_positions_value checks the rest)."""
    if user.op_type == "Gather":
        return idx == 1 and user.inputs[0].const_value is not None
    rank = len(out.shape) if out.shape is not None else None
    if rank == 1 and idx == 0 and user.op_type == "Cast":
        return all(_position_read(u, i, user.outputs[0]) for u, i in user.outputs[0].uses())
    if rank == 1:
        if user.op_type != "Unsqueeze" or idx != 0 or raw_axes(user) not in _ROW_AXES:
            return False
        # [1, 1, S] only as HF's inv_freq MatMul reads it (a mask's [1, 1, S] view is walked on)
        return raw_axes(user) != [0, 1] or all(
            c.op_type == "Cast" and all(_keeps_batch_axis(m, j) for m, j in c.outputs[0].uses())
            for c, _ in user.outputs[0].uses())
    if user.op_type == "RotaryEmbedding" and idx == 3 and user.domain in ("", "ai.onnx"):
        return rank == 2   # [B, S] ids into RotaryEmbedding-23 (the GroupQueryAttention rewrite's do_rotary)
    return (user.op_type == "Unsqueeze" and idx == 0 and raw_axes(user) in ([1], [2], [-1])
            and rank == 2)


#: Unsqueeze axes of one row of positions [S]: [1, S, 1] (RoPE's cos/sin), [1, S] (position ids) and
#: [1, 1, S] (HF's inv_freq [1, D/2, 1] @ positions [B, 1, S], its two Unsqueezes merged into one:
#: transformers 4.53's dynamo export, where the [1, S] position ids have no other reader)
_ROW_AXES = ([0, 2], [0], [0, 1])


def _batch_shaped(pos: ir.Value, past: ir.Value) -> bool:
    """Positions already [B, S] (B: the past's batch dim) keep their shape when paged."""
    return (pos.shape is not None and len(pos.shape) == 2 and past.shape is not None
            and not isinstance(pos.shape.dims[0], int) and pos.shape.dims[0] == past.shape.dims[0])


def _arange(add: ir.Node) -> tuple[ir.Value, ir.Value | int] | None:
    """``add`` = arange(S) + past_len: (the arange value, S) where one input is Range(0, S, 1) or,
    once a static S has been folded, the constant [0, 1, .., S-1] (int64); else None."""
    for v in add.inputs:
        rng = _prod(v)
        if rng is not None and rng.op_type == "Range" and _scalar(rng.inputs[0]) == 0 \
                and _scalar(rng.inputs[2]) == 1:
            return v, rng.inputs[1]
        if v is not None and v.const_value is not None:
            arr = v.const_value.numpy()
            if arr.ndim == 1 and arr.dtype == np.int64 and np.array_equal(arr, np.arange(arr.size)):
                return v, int(arr.size)
    return None


def _check_position_embedding(unsq: ir.Node, live: set[int]) -> None:
    """position ids [1, S] may become [B, S] only if they index a position-embedding table whose
    rows are added to a [B, S, H] tensor (so the sum keeps its shape), or reach RotaryEmbedding's
    position_ids input (GPT-J's gathered sin/cos), through Cast / Expand."""
    _check_positions_value(unsq.outputs[0], live)


def _check_positions_value(out: ir.Value, live: set[int]) -> None:
    if out.is_graph_output():
        raise _Refuse("position ids reach a graph output")
    for gather, idx in out.uses():
        if id(gather) not in live:
            continue
        if gather.op_type in ("Cast", "Expand") and idx == 0 or _position_offset(gather, idx):
            _check_positions_value(gather.outputs[0], live)
            continue
        if gather.op_type == "RotaryEmbedding" and idx == 3:
            continue
        if gather.op_type == "Unsqueeze" and idx == 0 and raw_axes(gather) in ([1], [2], [-1]) \
                and out.shape is not None and len(out.shape) == 2:
            _check_rope_path(gather, live)  # [1, S] -> [1, S, 1] (TorchScript: two Unsqueezes) -> RoPE
            continue
        if (gather.op_type != "Gather" or idx != 1 or gather.inputs[0].const_value is None
                or gather.attributes.get("axis", ir.AttrInt64("axis", 0)).value != 0):
            raise _Refuse(f"position ids feed {gather.op_type} {gather.name!r}, not a position embedding")
        emb = gather.outputs[0]
        for add, _ in emb.uses():
            if id(add) not in live:
                continue
            other = next((i for i in add.inputs if i is not emb), None)
            if (add.op_type != "Add" or other is None or other.shape is None or add.outputs[0].shape is None
                    or len(other.shape) != 3 or list(other.shape) != list(add.outputs[0].shape)):
                raise _Refuse(f"position embeddings feed {add.op_type} {add.name!r}, not an Add to [B, S, H]")


def _position_offset(node: ir.Node, idx: int) -> bool:
    """``ids + c`` / ``ids - c`` with c a scalar constant (PaliGemma counts positions from 1): still one
    value per token, so [1, S] ids widened to [B, S] keep their meaning."""
    if node.op_type not in ("Add", "Sub") or (node.op_type == "Sub" and idx != 0):
        return False
    other = node.inputs[1 - idx]
    return _scalar(other) is not None and other.const_value.numpy().size == 1


def _keeps_batch_axis(node: ir.Node, idx: int) -> bool:
    """Ops of HF's rotary embedding that keep axis 0 as the batch: inv_freq [1, D/2, 1] (a
    constant, batch 1) @ positions [B, 1, S], and the Transpose of the result that keeps axis 0."""
    if node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        return perm is not None and list(perm.value)[0] == 0
    if node.op_type == "MatMul" and idx == 1:
        w = node.inputs[0].const_value
        return w is not None and w.shape is not None and len(w.shape) == 3 and w.shape[0] == 1
    return False


def _attention_qk(user: ir.Node, idx: int) -> bool:
    """RoPE left unfused (no RotaryEmbedding below opset 23): the rotated q / k [B, H, S, D],
    elementwise in cos / sin, are the attention's own q and k: the canonical AttentionKV's inputs
    0 / 1 (check()), or once lowered, the heads-merge Reshape [0, 0, -1] (after the Transpose that
    _keeps_batch_axis passes) read only by PagedAttention's q / k (apply())."""
    if user.op_type == "AttentionKV" and user.domain == CANONICAL_DOMAIN:
        return idx in (0, 1)
    if user.op_type != "Reshape" or idx != 0 or user.inputs[1] is None or user.inputs[1].const_value is None:
        return False
    target = user.inputs[1].const_value.numpy().reshape(-1).tolist()
    uses = list(user.outputs[0].uses())
    return (target == [0, 0, -1] and bool(uses) and not user.outputs[0].is_graph_output()
            and all(u.op_type == "PagedAttention" and u.domain == PLUGIN_DOMAIN and i in (0, 1) for u, i in uses))


def _check_rope_path(start: ir.Node, live: set[int]) -> None:
    """Positions [1, S, 1] may become [B, S, 1] only if they flow elementwise into RoPE cos/sin."""
    stack, seen = [start], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for out in node.outputs:
            if out.is_graph_output():
                raise _Refuse("RoPE positions reach a graph output")
            for user, idx in out.uses():
                if id(user) not in live:
                    continue
                if user.op_type == "RotaryEmbedding" and idx in (1, 2) and len(user.inputs) <= 3:
                    continue
                if _attention_qk(user, idx):
                    continue
                if not _keeps_batch_axis(user, idx) and (user.op_type not in _ROPE_PATH_OPS or (
                        user.op_type == "Concat" and user.attributes["axis"].value != -1)):
                    raise _Refuse(f"positions flow into {user.op_type} {user.name!r}, not RoPE")
                stack.append(user)


def _past_like(graph: ir.Graph) -> list[ir.Value]:
    return [v for v in graph.inputs if v.name.startswith(("past_key", "past_value"))
            or (v.shape is not None and len(v.shape) == 4 and any(u.op_type == "Concat" for u in _users(v)))]


def _check(graph: ir.Graph, retiring: list[ir.Value], matched: set[ir.Node]) -> str | None:
    ids = {id(v) for v in retiring}
    stray = [v.name for v in _past_like(graph) if id(v) not in ids]
    if stray:
        return f"past input(s) {stray} are not read by a lowered attention (a model is never half paged)"
    presents = {id(o) for n in matched for o in n.outputs[1:]}
    try:
        su = _shape_uses(retiring, _live(graph, presents, matched), matched, _opset(graph),
                         _query_len(graph, matched))
    except _Refuse as exc:
        return str(exc)
    return _mask_read_elsewhere(graph, retiring, matched, presents, su)


def _mask_read_elsewhere(graph: ir.Graph, retiring: list[ir.Value], matched: set[ir.Node], presents: set[int],
                         su: _ShapeUse) -> str | None:
    """A graph input whose values make an attention's mask (the padding mask) is padded to one
    length for the whole batch; a paged batch is ragged (seq_lens), so nothing may still read it
    once the attentions are paged but its batch size (``Shape(x)[0:1]``, re-derived by apply()).
    Positions counted from its length (Shape(attention_mask)[1] - S) would be one sequence's for
    all, and its zeros would be ignored: refused rather than paged with a mask input that means
    something else."""
    live = _live(graph, presents, matched, {id(p) for p, _ in su.probed})
    skip = {id(v) for v in retiring}
    for x in _mask_inputs(n.inputs[3] for n in matched if n.op_type == "AttentionKV" and len(n.inputs) > 3):
        for user in _users(x) if id(x) not in skip else ():
            if id(user) in live and not (user.op_type == "Shape" and (
                    user.attributes["start"].value if "start" in user.attributes else 0) == 0
                    and "end" in user.attributes and user.attributes["end"].value == 1):
                return (f"the padding mask {x.name!r} is still read by {user.op_type} {user.name!r} once the "
                        "attentions are paged (its length or values); a paged batch is ragged and has no padding "
                        "mask (seq_lens gives each sequence's length)")
    return None


def _mask_inputs(masks) -> list[ir.Value]:
    """Graph inputs whose values (not only their shapes: Shape stops the walk) reach ``masks``."""
    found, seen = {}, set()
    stack = [m for m in masks if m is not None]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.is_graph_input():
            found[id(v)] = v
        node = v.producer()
        if node is not None and node.op_type not in ("Shape", "Size"):
            stack.extend(i for i in node.inputs if i is not None)
    return list(found.values())


def _apply(graph: ir.Graph, retiring: list[ir.Value], new_inputs: dict[str, ir.Value]) -> None:
    try:
        new_dim = _query_len(graph, set())
        su = _shape_uses(retiring, _live(graph, set(), set()), set(), _opset(graph), new_dim)
    except _Refuse as exc:  # check() accepted the same readers before the lowering
        from onnx_fuse.errors import InternalError

        raise InternalError(f"kv-cache-positions: {exc}") from None
    seq_lens = new_inputs["seq_lens"]
    probed = [p.producer() for p, _ in su.probed if p.producer() is not None]
    for pos, c in su.probed:
        probed += _replace_probed(graph, pos, c, seq_lens, new_dim)
    su.batch += _batch_only_readers(graph, retiring, new_inputs)
    if su.batch or su.batch_scalar:
        bshape = ir.node("Shape", [seq_lens], attributes={"start": 0, "end": 1}, name="paged_kv_batch")
        bscalar = ir.node("Squeeze", [bshape.outputs[0]], name="paged_kv_batch_scalar")
        graph.insert_before(graph.node(0), [bshape, bscalar])
        for s in su.batch:
            s.outputs[0].replace_all_uses_with(bshape.outputs[0])
        for g in su.batch_scalar:
            g.outputs[0].replace_all_uses_with(bscalar.outputs[0])
    for add in su.cache_pos:
        arange, length = _arange(add)
        if isinstance(length, int):
            length = _const(graph, f"{add.name}_paged_len", length)
        lens64 = ir.node("Cast", [seq_lens], attributes={"to": ir.DataType.INT64}, name=f"{add.name}_paged_lens")
        col = ir.node("Unsqueeze", [lens64.outputs[0], _const(graph, f"{add.name}_paged_ax1", [1])],
                      name=f"{add.name}_paged_col")
        start = ir.node("Sub", [col.outputs[0], length], name=f"{add.name}_paged_start")
        pos = ir.node("Add", [start.outputs[0], arange], name=f"{add.name}_paged_pos")  # [B, S]
        new_nodes = [lens64, col, start, pos]
        rope = [u for u in su.rope_unsq if u.inputs[0] is add.outputs[0]]
        absolute = [u for u in su.abs_unsq if u.inputs[0] is add.outputs[0]]
        for u in rope:
            uq = ir.node("Unsqueeze", [pos.outputs[0], _const(graph, f"{u.name}_paged_ax2", [2])],
                         name=f"{u.name}_paged")
            new_nodes.append(uq)
            u.outputs[0].replace_all_uses_with(uq.outputs[0])
        for u in absolute:
            u.outputs[0].replace_all_uses_with(pos.outputs[0])  # [B, S] position ids
        anchor = (rope or absolute or [None])[0]
        if anchor is not None:
            graph.insert_before(anchor, new_nodes)
    _remove_dead(graph, [*su.batch, *su.batch_scalar, *su.rope_unsq, *su.abs_unsq, *probed])


def _batch_only_readers(graph: ir.Graph, retiring: list[ir.Value], new_inputs: dict[str, ir.Value]) -> list[ir.Node]:
    """``Shape(x)[0:1]`` of a graph input ``x`` that nothing else reads once the attentions are
    paged (the padding mask, kept only for the batch size shape CSE took from it): its first dim
    is the past's batch dim, so it is ``Shape(seq_lens)`` and ``x`` can go."""
    bdims = {p.shape.dims[0] for p in retiring if p.shape is not None and len(p.shape)
             and not isinstance(p.shape.dims[0], int)}
    live = _live(graph, set(), set())
    keep = {id(v) for v in retiring} | {id(v) for v in new_inputs.values()}
    found = []
    for x in graph.inputs:
        if id(x) in keep or x.shape is None or not len(x.shape) or x.shape.dims[0] not in bdims:
            continue
        readers = [u for u in _users(x) if id(u) in live]
        if readers and all(u.op_type == "Shape" and u.attributes.get("start", ir.AttrInt64("start", 0)).value == 0
                           and "end" in u.attributes and u.attributes["end"].value == 1 for u in readers):
            found += readers
    return found


def _opset(graph: ir.Graph) -> int:
    return int(graph.opset_imports.get("", 18) or 18)


def _query_len(graph: ir.Graph, matched: set[ir.Node]) -> list:
    """S of the attentions being paged as their shapes say it, static dims and named symbols, V
    first (RoPE's broadcast against q and k can leave theirs unnamed): dim 2 of a matched canonical
    AttentionKV's v, k, q [B, H, S, D], or once lowered dim 1 of a PagedAttention's v, k, q
    [B, S, H*D]. RoPE positions broadcast against q and k and position embeddings add to
    [B, S, H], so positions of the new tokens have this length."""
    cands = [(n.inputs[i], 2) for n in matched if n.op_type == "AttentionKV" for i in (2, 1, 0)]
    cands += [(n.inputs[i], 1) for n in graph if n.op_type == "PagedAttention" and n.domain == PLUGIN_DOMAIN
              for i in (2, 1, 0)]
    dims = []
    for v, axis in cands:
        if v is not None and v.shape is not None and len(v.shape) > axis:
            d = v.shape.dims[axis]
            if (isinstance(d, int) or getattr(d, "value", None)) and d not in dims:
                dims.append(d)
    return dims


def _new_tokens_source(graph: ir.Graph, pos: ir.Value, new_dim=None) -> int | tuple[ir.Value, int] | None:
    """Where S (positions [.., S]) comes from: a static dim, a graph input carrying the same
    symbolic dim (input, axis), the same for the attentions' query length ``new_dim`` where the
    positions' dim is unknown (Range(P, P + S): shape inference names it afresh), else the token
    ids (one id per new token, the index of a constant embedding table: input, 1); None when none
    is found."""
    d = pos.shape.dims[-1] if pos.shape is not None and len(pos.shape) else None
    for dim in (d, *(new_dim or ())):
        if isinstance(dim, int):
            return dim
        for x in graph.inputs:
            for a, xd in enumerate(x.shape.dims if x.shape is not None and dim is not None else ()):
                if not isinstance(xd, int) and xd == dim:
                    return x, a
    for x in graph.inputs:
        if x.shape is not None and len(x.shape) == 2 and x.dtype is not None and x.dtype.is_integer() and any(
                u.op_type == "Gather" and i == 1 and u.inputs[0].const_value is not None for u, i in x.uses()):
            return x, 1
    return None


def _new_tokens(graph: ir.Graph, pos: ir.Value, new_dim=None) -> ir.Value:
    """S, [1] int64, for positions [.., S] (``_new_tokens_source``, which check() required)."""
    src = _new_tokens_source(graph, pos, new_dim)
    if isinstance(src, int):
        return _const(graph, f"{pos.name}_paged_len", [src])
    x, a = src
    shape = ir.node("Shape", [x], attributes={"start": a, "end": a + 1}, name=f"{pos.name}_paged_s")
    graph.insert_before(graph.node(0), [shape])
    return shape.outputs[0]


def _replace_probed(graph: ir.Graph, pos: ir.Value, c: int, seq_lens: ir.Value, new_dim=None) -> list[ir.Node]:
    """positions [.., S] = P + i + c  ->  seq_lens[b] - S + i + c, [B, S]; one row [S] read as
    [1, S, 1] / [1, S] (``_check_position_row``) is read as [B, S, 1] / [B, S]. Returns the
    replaced readers (dead now)."""
    name = pos.name or "positions"
    s = _new_tokens(graph, pos, new_dim)
    lens64 = ir.node("Cast", [seq_lens], attributes={"to": ir.DataType.INT64}, name=f"{name}_paged_lens")
    col = ir.node("Unsqueeze", [lens64.outputs[0], _const(graph, f"{name}_paged_ax1", [1])], name=f"{name}_paged_col")
    start = ir.node("Sub", [col.outputs[0], s], name=f"{name}_paged_start")
    s0 = ir.node("Squeeze", [s], name=f"{name}_paged_s0")
    ar = ir.node("Range", [_const(graph, f"{name}_paged_zero", 0), s0.outputs[0],
                           _const(graph, f"{name}_paged_one", 1)], name=f"{name}_paged_arange")
    at = ir.node("Add", [start.outputs[0], ar.outputs[0]], name=f"{name}_paged_at")
    nodes = [lens64, col, start, s0, ar, at]
    out = at.outputs[0]
    if c:
        off = ir.node("Add", [out, _const(graph, f"{name}_paged_offset", c)], name=f"{name}_paged_pos")
        nodes.append(off)
        out = off.outputs[0]
    if pos.dtype != ir.DataType.INT64:
        cast = ir.node("Cast", [out], attributes={"to": pos.dtype}, name=f"{name}_paged_cast")
        nodes.append(cast)
        out = cast.outputs[0]
    anchor = next(n for n in graph if any(i is pos for i in n.inputs))
    graph.insert_before(anchor, nodes)
    if pos.shape is not None and len(pos.shape) == 1:
        return [r for user, _ in list(pos.uses()) for r in _rebatch_row(graph, user, out)]
    pos.replace_all_uses_with(out)
    return []


def _rebatch_row(graph: ir.Graph, user: ir.Node, rows: ir.Value) -> list[ir.Node]:
    """``user`` read one row of positions [S]; make what it computed from ``rows`` [B, S]: a Cast
    stays a Cast, Unsqueeze [0, a] ([1, S, 1] / [1, 1, S]) becomes Unsqueeze [a] (axis 0 is now the
    batch), Unsqueeze [0] ([1, S]) ``rows`` itself; any other reader is dead (check() saw every live
    one) and stays for the cleanup. Returns the readers replaced."""
    if user.op_type == "Unsqueeze" and raw_axes(user) not in _ROW_AXES or user.op_type not in ("Cast", "Unsqueeze"):
        return []
    if user.op_type == "Cast":
        cast = ir.node("Cast", [rows], attributes={"to": user.attributes["to"].value}, name=f"{user.name}_paged")
        graph.insert_before(user, [cast])
        return [user, *(r for u, _ in list(user.outputs[0].uses()) for r in _rebatch_row(graph, u, cast.outputs[0]))]
    if raw_axes(user) == [0]:
        user.outputs[0].replace_all_uses_with(rows)
        return [user]
    axes = _const(graph, f"{user.name}_paged_ax", raw_axes(user)[1:])
    uq = ir.node("Unsqueeze", [rows, axes], name=f"{user.name}_paged")
    graph.insert_before(user, [uq])
    user.outputs[0].replace_all_uses_with(uq.outputs[0])
    return [user]


def _check_position_row(pos: ir.Value, live: set[int]) -> None:
    """One row of positions [S] may become [B, S] only where it is read as [1, S, 1] or [1, 1, S] on
    the way into RoPE's cos/sin, or as position ids [1, S] (``_check_positions_value``), cast or not."""
    if pos.is_graph_output():
        raise _Refuse("position ids reach a graph output")
    for user, idx in pos.uses():
        if id(user) not in live:
            continue
        if user.op_type == "Cast" and idx == 0:
            _check_position_row(user.outputs[0], live)
        elif user.op_type == "Unsqueeze" and idx == 0 and raw_axes(user) in ([0, 2], [0, 1]):
            _check_rope_path(user, live)
        elif user.op_type == "Unsqueeze" and idx == 0 and raw_axes(user) == [0]:
            _check_positions_value(user.outputs[0], live)
        else:
            raise _Refuse(f"positions [S] feed {user.op_type} {user.name!r}, not RoPE or a position embedding")


def _remove_dead(graph: ir.Graph, frontier: list[ir.Node]) -> None:
    """The readers replaced above and what only they fed (up to the Shape nodes of the past)."""
    while frontier:
        dead = [n for n in dict.fromkeys(frontier)
                if n.graph is graph and not any(o.uses() or o.is_graph_output() for o in n.outputs)]
        frontier = []
        for n in dead:
            ins = [i for i in n.inputs if i is not None]
            graph.remove(n, safe=True)
            frontier += [p for i in ins if (p := i.producer()) is not None]


def _const(graph: ir.Graph, name: str, values: list[int] | int) -> ir.Value:
    v = ir.Value(name=name, const_value=ir.tensor(np.array(values, np.int64)))
    graph.register_initializer(v)
    return v


def _explain_none(graph: ir.Graph) -> str | None:
    """Past inputs there but no AttentionKV (recognize.yaml) to page: say what the first past's
    cache looks like instead of Concat(past, new) as the present output."""
    pasts = _past_like(graph)
    if not pasts:
        return None  # no KV cache to page (an encoder, a decoder exported without one)
    named = [v for v in pasts if v.name.startswith(("past_key", "past_value"))]
    pasts = named or pasts  # the exporters' names where there are (not q/k/v inputs of a bare block)
    past = pasts[0]
    names = [v.name for v in pasts]
    head = (f"no attention over the KV cache was recognized (canonical AttentionKV: the present output "
            f"is Concat(past, new) on the sequence axis and attention reads it), so the past input(s) "
            f"{names[:4]}{' ...' if len(names) > 4 else ''} stay contiguous")
    concats = [u for u in _users(past) if u.op_type == "Concat"]
    if not concats:
        ops = sorted({u.op_type for u in _users(past)})
        return f"{head}: {past.name!r} is read by {ops}, never concatenated with the new keys/values"
    cat = concats[0].outputs[0]
    if cat.is_graph_output():
        via = _path_to_attention(cat, 6)
        if via is not None:
            att, ops = via
            why = " (a repetition of the K/V heads that attention-repeat-kv did not fold)" if "Expand" in ops else ""
            return (f"{head}: {cat.name!r} = Concat({past.name!r}, new) reaches the attention {att.name!r} "
                    f"only through {ops}{why}, and PagedAttention reads the cache as it is")
        return f"{head}: {cat.name!r} = Concat({past.name!r}, new), but no attention reading it was recognized"
    for n, _ in _reachable(cat, 4):
        for o in n.outputs:
            if o.is_graph_output():
                what = f"{n.op_type} {n.name!r}" if n.name else n.op_type
                return (f"{head}: the cache output {o.name!r} is {what} of Concat({past.name!r}, "
                        "new), not the Concat itself (a cache that keeps only a window of positions?)")
    return f"{head}: Concat({past.name!r}, new) is no graph output (no present output carries the cache)"


_ATTENTION_OPS = {"Attention", "FusedAttention", "MultiHeadAttention", "GroupQueryAttention"}


def _path_to_attention(v: ir.Value, depth: int) -> tuple[ir.Node, list[str]] | None:
    """The first attention op within ``depth`` nodes downstream of ``v`` and the ops between."""
    parent: dict[int, ir.Node | None] = {}
    frontier: list[tuple[ir.Node, ir.Node | None]] = [(n, None) for n in _users(v)]
    for _ in range(depth):
        nxt = []
        for n, up in frontier:
            if id(n) in parent:
                continue
            parent[id(n)] = up
            if n.op_type in _ATTENTION_OPS:
                ops, at = [], up
                while at is not None:
                    ops.append(at.op_type)
                    at = parent[id(at)]
                return (n, ops[::-1]) if ops else None
            nxt += [(u, n) for o in n.outputs for u in _users(o)]
        frontier = nxt
    return None


def _reachable(v: ir.Value, depth: int):
    """(node, depth) downstream of ``v``, breadth first, up to ``depth`` nodes deep."""
    seen, frontier = set(), [v]
    for d in range(depth):
        nxt = []
        for val in frontier:
            for n in _users(val):
                if id(n) not in seen:
                    seen.add(id(n))
                    yield n, d
                    nxt += list(n.outputs)
        frontier = nxt


KV_CACHE_POSITIONS = ReadersHook(check=_check, apply=_apply, explain_none=_explain_none)
register_readers_hook("kv-cache-positions", KV_CACHE_POSITIONS)
