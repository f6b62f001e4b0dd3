"""Paged-KV rewriting (level 4, target trt): contiguous past/present KV tensors -> a block-paged
pool read and written by onnx_fuse::PagedAttention (docs/ops.md, docs/paged_kv.md).

Handled form (what the dynamo exporter writes for a Hugging Face decoder with a KV cache, LLaMA
and GPT-2 checked; the level-3 attention rules do not fuse it, the Concat sits inside their
pattern):

    present_k = Concat(past_k, k_new, axis=2)             past_k: graph input [B, Hkv, P, D]
    present_v = Concat(past_v, v_new, axis=2)
    krep/vrep = Reshape(Expand(Unsqueeze(present, 2)))    optional GQA head repetition
    p = Softmax(MatMul(Mul?(q, c), Mul?(Transpose(krep, 0,1,3,2), c)) * s? + mask)   [Where(IsNaN)]
    y = Reshape(Transpose(MatMul(p, vrep), 0,2,1,3))      [B, S, Hq*D] or [B*S, Hq*D]

becomes ``y, kpool', vpool' = onnx_fuse::PagedAttention(q3, k3, v3, kpool, vpool, block_tables,
seq_lens)`` with new graph inputs ``kv_pool_k.{i}`` / ``kv_pool_v.{i}`` [num_blocks, block_size,
Hkv, D], ``block_tables`` int32 [B, max_blocks], ``seq_lens`` int32 [B] (cache length INCLUDING
the new tokens, per the contract) and new outputs ``kv_pool_k_out.{i}`` / ``kv_pool_v_out.{i}`` (the
updated pools; aliases of the inputs in TensorRT) in place of ``present.*``. The past inputs go;
so does the padding mask input when nothing else reads it (seq_lens carries the lengths).

What the past tensors told the rest of the graph is re-derived: the batch size (Shape(past, 0:1))
from seq_lens, and the positions (cache_position = Range(0, S) + past length, feeding RoPE cos/sin
or a position-embedding Gather) per sequence as seq_lens[b] - S + i, since sequences of a paged
batch have different lengths.

Refused (nothing changes, a ``refused:<reason>`` stat says why): present consumed by anything but
its attention and the graph output, past not a rank-4 [B, Hkv, P, D] graph input concatenated on
axis 2, a mask that is not the causal one, past lengths used other than by RoPE positions, mixed
models where only some past inputs are rewritable. The rewrite is all or nothing per model.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous

from onnx_fuse.plugin_ids import PLUGIN_DOMAIN, PLUGIN_DOMAIN_VERSION, PLUGIN_NAMESPACE, PLUGIN_VERSIONS

PLUGIN_VERSION = PLUGIN_VERSIONS["PagedAttention"]

__all__ = ["PagedKVPass", "paged_inputs_from_contiguous", "gather_pool"]


class _Refuse(Exception):
    """This model (or attention) is outside what the PagedAttention contract can express."""


@dataclasses.dataclass
class _Plan:
    layer: str
    q: ir.Value            # [B, Hq, S, D]
    k_new: ir.Value        # [B, Hkv, S, D]
    v_new: ir.Value
    past_k: ir.Value
    past_v: ir.Value
    concat_k: ir.Node
    concat_v: ir.Node
    out_node: ir.Node      # the Reshape producing y [B, S, Hq*D]
    mask: ir.Value
    num_heads: int
    kv_num_heads: int
    head_dim: int
    scale: float


def _prod(v: ir.Value | None) -> ir.Node | None:
    return v.producer() if v is not None else None


def _users(v: ir.Value) -> list[ir.Node]:
    return [n for n, _ in v.uses()]


def _only_user(v: ir.Value, node: ir.Node) -> None:
    if v.is_graph_output() or any(u is not node for u in _users(v)):
        raise _Refuse(f"intermediate {v.name!r} has another consumer")


def _scalar(v: ir.Value | None) -> float | None:
    if v is None or v.const_value is None:
        return None
    arr = v.const_value.numpy()
    return float(arr.reshape(-1)[0]) if arr.size == 1 else None


def _ints_attr(node: ir.Node, name: str) -> list[int] | None:
    a = node.attributes.get(name)
    return list(a.value) if a is not None else None


def _axes(node: ir.Node) -> list[int] | None:
    if len(node.inputs) > 1 and node.inputs[1] is not None and node.inputs[1].const_value is not None:
        return [int(x) for x in node.inputs[1].const_value.numpy().reshape(-1)]
    return _ints_attr(node, "axes")


def _static(v: ir.Value, axis: int) -> int | None:
    if v.shape is None or len(v.shape) <= axis:
        return None
    d = v.shape[axis]
    return d if isinstance(d, int) else None


def _strip_scale(v: ir.Value, user: ir.Node) -> tuple[ir.Value, float, ir.Node]:
    """Look through Mul(x, const scalar) / Div(x, const scalar); returns (x, factor, x's reader)."""
    node = _prod(v)
    factor = 1.0
    while node is not None and node.op_type in ("Mul", "Div") and node.domain == "":
        a, b = node.inputs
        c = _scalar(b) if node.op_type == "Div" else (_scalar(b) if _scalar(b) is not None else _scalar(a))
        if c is None:
            break
        x = a if (node.op_type == "Div" or _scalar(b) is not None) else b
        _only_user(v, user)
        factor *= (1.0 / c) if node.op_type == "Div" else c
        user, v, node = node, x, _prod(x)
    return v, factor, user


def _strip_repeat(v: ir.Value, user: ir.Node) -> ir.Value:
    """Look through the repeat_kv chain Unsqueeze(axis 2) -> Expand -> Reshape (if present)."""
    r = _prod(v)
    if r is None or r.op_type != "Reshape":
        return v
    e = _prod(r.inputs[0])
    if e is None or e.op_type != "Expand":
        raise _Refuse("K/V Reshape is not a repeat_kv head repetition")
    u = _prod(e.inputs[0])
    if u is None or u.op_type != "Unsqueeze" or _axes(u) != [2]:
        raise _Refuse("K/V repetition does not unsqueeze the axis after the heads")
    for val, usr in ((v, user), (r.inputs[0], r), (e.inputs[0], e)):
        _only_user(val, usr)
    return u.inputs[0]


def _concat_of_past(v: ir.Value) -> ir.Node:
    node = _prod(v)
    if node is None or node.op_type != "Concat":
        raise _Refuse(f"{v.name!r} is not a Concat of a past tensor and new tokens")
    if len(node.inputs) != 2 or node.attributes.get("axis") is None:
        raise _Refuse("KV Concat does not have exactly (past, new) inputs")
    past, new = node.inputs
    if not past.is_graph_input():
        raise _Refuse(f"KV Concat's first input {past.name!r} is not a graph input")
    if past.shape is None or len(past.shape) != 4 or new.shape is None or len(new.shape) != 4:
        raise _Refuse(f"past {past.name!r} is not a rank-4 [B, Hkv, P, D] tensor")
    if node.attributes["axis"].value not in (2, -2):
        raise _Refuse(f"past {past.name!r} is concatenated on axis {node.attributes['axis'].value}, not the "
                      "sequence axis 2 of [B, Hkv, P, D]")
    for axis in (1, 3):
        if _static(past, axis) is None or _static(past, axis) != _static(new, axis):
            raise _Refuse(f"past {past.name!r} axis {axis} is not a static head count / head size "
                          "matching the new tokens")
    if past.dtype != ir.DataType.FLOAT and past.dtype not in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        raise _Refuse(f"past {past.name!r} has dtype {past.dtype}")
    return node


#: A mask built with one of these among its producers is taken as causal (HF masking_utils uses
#: LessOrEqual(kv_idx, q_idx); older exporters Trilu or a comparison of positions).
_CAUSAL_OPS = frozenset({"LessOrEqual", "Trilu", "GreaterOrEqual", "Less", "Greater"})


def _ancestors_have(v: ir.Value, op_types: set[str], limit: int = 64) -> bool:
    seen, stack = set(), [v]
    while stack and len(seen) < limit:
        x = stack.pop()
        node = _prod(x)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type in op_types:
            return True
        stack.extend(i for i in node.inputs if i is not None)
    return False


def _match(pv: ir.Node) -> _Plan | None:
    """Match the attention whose P @ V MatMul is ``pv``; None when it is not a past-KV attention."""
    if pv.op_type != "MatMul" or pv.domain != "":
        return None
    vrep = pv.inputs[1]
    try:
        v_present = _strip_repeat(vrep, pv)
    except _Refuse:
        return None  # not the V side of an attention over a past cache: not ours to judge
    vprod = _prod(v_present)
    if vprod is None or vprod.op_type != "Concat" or not vprod.inputs or not vprod.inputs[0].is_graph_input():
        return None
    concat_v = _concat_of_past(v_present)
    # P: Where(IsNaN(sm), 0, sm) or sm; sm = Softmax(axis=-1)
    p = pv.inputs[0]
    node = _prod(p)
    if node is not None and node.op_type == "Where":
        isn = _prod(node.inputs[0])
        if (isn is None or isn.op_type != "IsNaN" or _scalar(node.inputs[1]) != 0.0
                or isn.inputs[0] is not node.inputs[2]):
            raise _Refuse("probabilities Where is not the NaN guard Where(IsNaN(p), 0, p)")
        _only_user(p, pv)
        sm_v = node.inputs[2]
        if any(u not in (isn, node) for u in _users(sm_v)) or sm_v.is_graph_output():
            raise _Refuse("softmax output escapes")
        node = _prod(sm_v)
    else:
        _only_user(p, pv)
        sm_v = p
    if node is None or node.op_type != "Softmax" or node.attributes.get("axis") is None or \
            node.attributes["axis"].value not in (-1, 3):
        raise _Refuse("attention probabilities are not a Softmax over the keys")
    sm = node
    add = _prod(sm.inputs[0])
    _only_user(sm.inputs[0], sm)
    if add is None or add.op_type != "Add":
        raise _Refuse("scores carry no additive mask")
    scores, mask = add.inputs
    if _prod(scores) is None or _prod(scores).op_type not in ("MatMul", "Mul", "Div"):
        scores, mask = mask, scores
    scores, s_factor, _ = _strip_scale(scores, add)
    qk = _prod(scores)
    if qk is None or qk.op_type != "MatMul":
        raise _Refuse("scores are not a Q @ K^T MatMul")
    _only_user(scores, add)
    q, q_factor, _ = _strip_scale(qk.inputs[0], qk)
    kt, k_factor, kt_reader = _strip_scale(qk.inputs[1], qk)
    tr = _prod(kt)
    if tr is None or tr.op_type != "Transpose" or _ints_attr(tr, "perm") != [0, 1, 3, 2]:
        raise _Refuse("K is not transposed with perm [0, 1, 3, 2]")
    _only_user(kt, kt_reader)
    k_present = _strip_repeat(tr.inputs[0], tr)
    concat_k = _concat_of_past(k_present)
    for present in (k_present, v_present):
        if len(_users(present)) != 1:
            raise _Refuse(f"present {present.name!r} is consumed outside its attention")
    if mask.shape is None or len(mask.shape) != 4 or not _ancestors_have(mask, _CAUSAL_OPS):
        raise _Refuse("the mask is not a causal mask (the contract attends causally)")
    # Output: Transpose(0, 2, 1, 3) -> Reshape to [B, S, Hq*D]
    out = pv.outputs[0]
    t = _users(out)
    if (len(t) != 1 or out.is_graph_output() or t[0].op_type != "Transpose"
            or _ints_attr(t[0], "perm") != [0, 2, 1, 3]):
        raise _Refuse("attention output is not transposed back to [B, S, H, D]")
    r = _users(t[0].outputs[0])
    if len(r) != 1 or t[0].outputs[0].is_graph_output() or r[0].op_type != "Reshape":
        raise _Refuse("attention output is not merged back to [B, S, H*D]")
    y = r[0].outputs[0]
    hq, d = _static(q, 1), _static(q, 3)
    hkv = _static(k_present, 1)
    if hq is None or d is None or hkv is None or q.shape is None or len(q.shape) != 4:
        raise _Refuse("q heads / head size are not static")
    # [B, S, Hq*D] (LLaMA), or [B*S, Hq*D] (GPT-2's Conv1D): the merge Reshape then stays, fed
    # with the packed output (dims 0, 1 agree, so even a 0 in its shape copies the same size).
    if y.shape is None or len(y.shape) not in (2, 3) or _static(y, len(y.shape) - 1) != hq * d:
        raise _Refuse("attention output is not merged to [B, S, Hq*D] or [B*S, Hq*D]")
    if hq % hkv or not 1 <= hq // hkv <= 16 or _static(concat_v.inputs[0], 3) != d:
        raise _Refuse(f"heads {hq}/{hkv} or head size do not fit the contract")
    for rep in (tr.inputs[0], vrep):  # the repetition (or none) must give q's heads, nothing else
        if rep.shape is None or len(rep.shape) != 4 or _static(rep, 1) != hq or _static(rep, 3) != d:
            raise _Refuse(f"K/V {rep.name!r} as attended is not [B, {hq}, T, {d}]")
    past_k = concat_k.inputs[0]
    layer = past_k.name.split(".")[1] if past_k.name.count(".") == 2 else None
    return _Plan(layer or "", q, concat_k.inputs[1], concat_v.inputs[1], past_k, concat_v.inputs[0],
                 concat_k, concat_v, r[0], mask, hq, hkv, d, q_factor * k_factor * s_factor)


def _live_nodes(graph: ir.Graph, plans: list[_Plan]) -> set[int]:
    """Nodes still needed once the planned attentions read only q / k_new / v_new."""
    presents = {id(p.concat_k.outputs[0]) for p in plans} | {id(p.concat_v.outputs[0]) for p in plans}
    # A rank-2 merge Reshape stays (see _match): its shape input stays live too.
    cut = {id(p.out_node): (p.q, p.k_new, p.v_new, *p.out_node.inputs[1:]) if len(p.out_node.outputs[0].shape) == 2
           else (p.q, p.k_new, p.v_new) for p in plans}
    live: set[int] = set()
    stack = [o for o in graph.outputs if id(o) not in presents]
    while stack:
        node = _prod(stack.pop())
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(cut.get(id(node), [i for i in node.inputs if i is not None]))
    return live


@dataclasses.dataclass
class _ShapeUse:
    batch: list[ir.Node]          # Shape(past, 0:1)
    cache_pos: list[ir.Node]      # Add(Range(0, S, 1), Squeeze?(Shape(past, 2:3)))
    rope_unsq: list[ir.Node]      # Unsqueeze(cache_pos, [0, 2]) feeding RoPE
    abs_unsq: list[ir.Node] = dataclasses.field(default_factory=list)  # Unsqueeze(cache_pos, [0])
    #                                                   feeding a position-embedding Gather (GPT-2)


_ROPE_PATH_OPS = {"Cast", "Mul", "Div", "Add", "Cos", "Sin", "Expand", "Concat", "Unsqueeze"}


def _plan_shape_uses(graph: ir.Graph, plans: list[_Plan], live: set[int]) -> _ShapeUse:
    uses = _ShapeUse([], [], [])
    concats = {id(p.concat_k) for p in plans} | {id(p.concat_v) for p in plans}
    for past in [p.past_k for p in plans] + [p.past_v for p in plans]:
        for user in _users(past):
            if id(user) in concats:
                continue
            if id(user) not in live:
                continue
            if user.op_type != "Shape":
                raise _Refuse(f"past {past.name!r} is read by {user.op_type} {user.name!r}")
            start = user.attributes["start"].value if "start" in user.attributes else 0
            end = user.attributes["end"].value if "end" in user.attributes else None
            if (start, end) == (0, 1):
                uses.batch.append(user)
            elif (start, end) == (2, 3):
                _plan_past_len(user, live, uses)
            else:
                raise _Refuse(f"Shape(past)[{start}:{end}] has no paged equivalent")
    return uses


def _plan_past_len(shape: ir.Node, live: set[int], uses: _ShapeUse) -> None:
    vals = [shape.outputs[0]]
    for user in _users(shape.outputs[0]):
        if id(user) in live and user.op_type == "Squeeze":
            vals.append(user.outputs[0])
    for v in vals:
        for user in _users(v):
            if id(user) not in live or user.op_type == "Squeeze":
                continue
            rng = next((_prod(i) for i in user.inputs if i is not v), None)
            if user.op_type != "Add" or rng is None or rng.op_type != "Range" or _scalar(rng.inputs[0]) != 0 \
                    or _scalar(rng.inputs[2]) != 1:
                raise _Refuse(f"the past length feeds {user.op_type} {user.name!r}, not cache_position")
            uses.cache_pos.append(user)
            for u2 in _users(user.outputs[0]):
                if id(u2) not in live:
                    continue
                if u2.op_type == "Unsqueeze" and _axes(u2) == [0]:
                    _check_position_embedding(u2, live)
                    uses.abs_unsq.append(u2)
                    continue
                if u2.op_type != "Unsqueeze" or _axes(u2) != [0, 2]:
                    raise _Refuse(f"cache_position feeds {u2.op_type} {u2.name!r}, not the RoPE positions")
                _check_rope_path(u2, live)
                uses.rope_unsq.append(u2)


def _check_position_embedding(unsq: ir.Node, live: set[int]) -> None:
    """position_ids [1, S] may become [B, S] only if they index a position-embedding table whose
    rows are added to a [B, S, H] tensor (so the sum keeps its shape)."""
    out = unsq.outputs[0]
    if out.is_graph_output():
        raise _Refuse("position ids reach a graph output")
    for gather, idx in out.uses():
        if id(gather) not in live:
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
                if user.op_type not in _ROPE_PATH_OPS or (user.op_type == "Concat" and
                                                          user.attributes["axis"].value != -1):
                    raise _Refuse(f"positions flow into {user.op_type} {user.name!r}, not RoPE")
                stack.append(user)


class PagedKVPass(FusePass):
    """Rewrite past/present KV-cache attention into onnx_fuse::PagedAttention over a paged pool."""

    name = "trt-paged-kv"

    def __init__(self) -> None:
        super().__init__()
        self.stats_reason: str | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self.stats_reason = None
        plans: list[_Plan] = []
        try:
            for node in list(graph):
                plan = _match(node)
                if plan is not None:
                    plans.append(plan)
            cached_inputs = [v for v in graph.inputs if v.name.startswith(("past_key", "past_value"))
                             or (v.shape is not None and len(v.shape) == 4
                                 and any(u.op_type == "Concat" for u in _users(v)))]
            if not plans and not cached_inputs:
                self.stats["no-kv-cache"] += 1
                return ir.passes.PassResult(model, False)
            pasts = [p.past_k for p in plans] + [p.past_v for p in plans]
            if len({id(v) for v in pasts}) != len(pasts):
                raise _Refuse("a past tensor feeds two attentions")
            stray = [v.name for v in cached_inputs if id(v) not in {id(p) for p in pasts}]
            if stray:
                raise _Refuse(f"past input(s) {stray} are not read by a rewritable attention")
            live = _live_nodes(graph, plans)
            shape_uses = _plan_shape_uses(graph, plans, live)
        except _Refuse as exc:
            self.stats["refused"] += 1
            self.stats_reason = f"not rewritten: {exc}"
            return ir.passes.PassResult(model, False)
        self._rewrite(model, plans, shape_uses)
        self.stats["paged-attention"] += len(plans)
        return ir.passes.PassResult(model, True)

    def _rewrite(self, model: ir.Model, plans: list[_Plan], su: _ShapeUse) -> None:
        graph = model.graph
        dtype = plans[0].past_k.dtype
        batch = plans[0].past_k.shape[0]
        block_tables = ir.Value(name="block_tables", type=ir.TensorType(ir.DataType.INT32),
                                shape=ir.Shape([batch, "max_blocks"]))
        seq_lens = ir.Value(name="seq_lens", type=ir.TensorType(ir.DataType.INT32), shape=ir.Shape([batch]))
        mask_sources = {id(v): v for p in plans for v in _graph_inputs_above(p.mask)}
        first = graph.node(0)
        new_inputs = [block_tables, seq_lens]
        merge = ir.Value(name="paged_kv_merge_shape", const_value=ir.tensor(np.array([0, 0, -1], np.int64)))
        graph.register_initializer(merge)
        for i, p in enumerate(plans):
            layer = p.layer or str(i)
            pools = [ir.Value(name=f"kv_pool_{kv}.{layer}", type=ir.TensorType(dtype),
                              shape=ir.Shape(["num_blocks", "block_size", p.kv_num_heads, p.head_dim]))
                     for kv in ("k", "v")]
            new_inputs += pools
            packed = []
            nodes = []
            for name, v in (("q", p.q), ("k", p.k_new), ("v", p.v_new)):
                t = ir.node("Transpose", [v], attributes={"perm": [0, 2, 1, 3]},
                            name=f"paged_kv_{layer}_{name}_t")
                r = ir.node("Reshape", [t.outputs[0], merge], name=f"paged_kv_{layer}_{name}_m")
                nodes += [t, r]
                packed.append(r.outputs[0])
            pa = ir.node("PagedAttention", [*packed, *pools, block_tables, seq_lens], domain=PLUGIN_DOMAIN,
                         attributes={"num_heads": p.num_heads, "kv_num_heads": p.kv_num_heads,
                                     "scale": float(p.scale), "plugin_version": PLUGIN_VERSION,
                                     "plugin_namespace": PLUGIN_NAMESPACE},
                         num_outputs=3, name=f"paged_attention_{layer}")
            pa.metadata_props["onnx_fuse.pass"] = self.display_name
            nodes.append(pa)
            graph.insert_before(p.out_node, nodes)
            y = p.out_node.outputs[0]
            out, kout, vout = pa.outputs
            out.name = f"paged_attention_{layer}_out"
            out.type = y.type
            out.shape = ir.Shape([p.q.shape[0], p.q.shape[2], p.num_heads * p.head_dim])
            kout.name, vout.name = f"kv_pool_k_out.{layer}", f"kv_pool_v_out.{layer}"
            for o, pool in ((kout, pools[0]), (vout, pools[1])):
                o.type, o.shape = pool.type, pool.shape
            if len(y.shape) == 3:
                y.replace_all_uses_with(out)
            else:
                p.out_node.replace_input_with(0, out)
            # present.* outputs become the updated pools (aliases of the pool inputs in TensorRT).
            for concat, new_out in ((p.concat_k, kout), (p.concat_v, vout)):
                present = concat.outputs[0]
                for j, o in enumerate(graph.outputs):
                    if o is present:
                        graph.outputs[j] = new_out
                if not any(o is new_out for o in graph.outputs):
                    graph.outputs.append(new_out)
        # Batch size and RoPE positions from seq_lens.
        if su.batch:
            bshape = ir.node("Shape", [seq_lens], attributes={"start": 0, "end": 1}, name="paged_kv_batch")
            graph.insert_before(first, bshape)
            for s in su.batch:
                s.outputs[0].replace_all_uses_with(bshape.outputs[0])
        for add in su.cache_pos:
            rng = next(_prod(i) for i in add.inputs if _prod(i) is not None and _prod(i).op_type == "Range")
            s_len = rng.inputs[1]
            lens64 = ir.node("Cast", [seq_lens], attributes={"to": ir.DataType.INT64},
                             name=f"{add.name}_paged_lens")
            col = ir.node("Unsqueeze", [lens64.outputs[0], _const(graph, f"{add.name}_paged_ax1", [1])],
                          name=f"{add.name}_paged_col")
            start = ir.node("Sub", [col.outputs[0], s_len], name=f"{add.name}_paged_start")
            pos = ir.node("Add", [start.outputs[0], rng.outputs[0]], name=f"{add.name}_paged_pos")  # [B, S]
            rope_users = [u for u in su.rope_unsq if u.inputs[0] is add.outputs[0]]
            new_nodes = [lens64, col, start, pos]
            anchor = rope_users[0] if rope_users else None
            for u in rope_users:
                uq = ir.node("Unsqueeze", [pos.outputs[0], _const(graph, f"{u.name}_paged_ax2", [2])],
                             name=f"{u.name}_paged")
                new_nodes.append(uq)
                u.outputs[0].replace_all_uses_with(uq.outputs[0])
            for u in [u for u in su.abs_unsq if u.inputs[0] is add.outputs[0]]:
                anchor = anchor or u
                u.outputs[0].replace_all_uses_with(pos.outputs[0])  # [B, S] position ids
            if anchor is not None:
                graph.insert_before(anchor, new_nodes)
        ir.passes.common.RemoveUnusedNodesPass()(model)
        # Interface: past inputs out, paged inputs in; a padding mask nobody reads any more goes too.
        gone = {id(p.past_k) for p in plans} | {id(p.past_v) for p in plans}
        gone |= {k for k, v in mask_sources.items() if not v.uses()}
        keep = [v for v in graph.inputs if id(v) not in gone]
        graph.inputs.clear()
        graph.inputs.extend(keep + new_inputs)
        if PLUGIN_DOMAIN not in model.opset_imports:
            model.opset_imports[PLUGIN_DOMAIN] = PLUGIN_DOMAIN_VERSION


def _const(graph: ir.Graph, name: str, values: list[int]) -> ir.Value:
    v = ir.Value(name=name, const_value=ir.tensor(np.array(values, np.int64)))
    graph.register_initializer(v)
    return v


def _graph_inputs_above(v: ir.Value, limit: int = 256) -> list[ir.Value]:
    found, seen, stack = [], set(), [v]
    while stack and len(seen) < limit:
        x = stack.pop()
        if x.is_graph_input():
            found.append(x)
            continue
        node = _prod(x)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(i for i in node.inputs if i is not None)
    return found
