"""Attention-23 on heads-first [B, H, S, D] tensors read in its 3-D form [B, S, H*D] where the
graph around it is laid out that way (layout_chains' ``attention-3d``).

Attention-23 takes q / k / v either 4-D or 3-D with ``q_num_heads`` / ``kv_num_heads``; the two
compute the same (the 3-D inputs are the 4-D ones with heads and sequence swapped and the heads
merged, the output likewise). The lowerings write the 4-D form at onnx (and ort's fallback), so an
exporter that splits heads from [B, S, H*D] keeps a Transpose in front of every input and behind
the output. Rewritten 3-D, each new input Transpose meets the export's own: directly (a Transpose
pair) or through the ops a Transpose sinks through (_transpose_region: SD3's QK RMSNorm in
[B, H, S, D] and its Concat of text and image over S), or it folds into a Reshape / Flatten /
Transpose chain's own Transposes (_static_chain: LongT5's block keys, [B, N, L, H, D] moved to
[B, N, H, L, D] and merged), and the new Reshapes meet the export's head split / merge. Done only where that saves Transposes: at least three of q, k, v and the output must
meet one (each that does saves one, each that does not costs one).

Past keys / values whose present outputs nobody reads are no cache: they are joined to k / v
(Concat over the sequence axis, the keys Attention-23 reads anyway) so they take the 3-D form too
(SD3's joint attention, recognized as a cache of the text keys). Not with is_causal (the causal
band is offset by the past length) nor with a key-length input (opset 24). A real cache (its presents
read, or is_causal) stays as it is: Attention-23's past and present are 4-D [B, H, P, D] in either form,
so only q / k / v and the output change layout (EXAONE 4's and Gemma 3's q / k norms on the heads-first
view of a layer without a rotation, decoding with a cache).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_atoms import atoms
from onnx_fuse.passes._chain_reads import LAYOUT_OPS, flatten_axis, known_dims, reshape_target
from onnx_fuse.passes._infra import attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, int64_initializer
from onnx_fuse.passes._transpose_region import Region, Refused, _check_layout_op, all_ones, layout_inputs, perm_of
from onnx_fuse.passes.constant_folding import constant_tensor

HEADS = [0, 2, 1, 3]  # [B, H, S, D] <-> [B, S, H, D]
_DEPTH = 24  # producers walked from an input (a norm and a Concat in SD3)


def _static(v: ir.Value | None, *axes: int) -> bool:
    return (v is not None and v.shape is not None and len(v.shape) == 4
            and all(isinstance(v.shape[a], int) and v.shape[a] > 0 for a in axes))


def _one_reader(v: ir.Value) -> bool:
    return not v.is_graph_output() and len(list(v.uses())) == 1


def heads_split(v: ir.Value, opset: int, depth: int = _DEPTH) -> bool:
    """Whether a Transpose by HEADS of ``v`` would meet the export's: ``v`` is a Transpose by HEADS,
    or computed by ops a Transpose sinks through from such Transposes (constants and all-ones
    operands aside), every value on the way read once (the region then has no other reader)."""
    if depth <= 0 or not _one_reader(v):
        return False
    node = v.producer()
    if is_default_op(node, "Transpose") and perm_of(node) == HEADS:
        return True
    if is_default_op(node, *LAYOUT_OPS):
        return chain_absorbs_transpose(v)
    if node is None:
        return False
    if len(node.outputs) != 1 and not _rejoined(node):
        return False
    try:
        _check_layout_op(node, Region(list(HEADS), rotary=_views_meet(node)), opset)
    except Refused:
        return False
    for j in layout_inputs(node):
        x = node.inputs[j]
        if x is None or all_ones(x) or constant_tensor(x) is not None:
            continue
        if not heads_split(x, opset, depth - 1):
            return False
    return True


def _rejoined(split: ir.Node) -> bool:
    """A Split whose parts, each read once through single-output ops, all reach one Concat (StableLM's
    per-head q / k norms: Split over the heads, a LayerNorm each, Concat): the sink passes it whole. Parts
    that part ways (DeepSeek's k_nope | v of one view) would leave the Transpose with the other reader."""
    if not is_default_op(split, "Split"):
        return False
    ends = set()
    for part in split.outputs:
        v, steps = part, 0
        while _one_reader(v) and steps < _DEPTH:
            reader = next(iter(v.uses())).node
            if is_default_op(reader, "Concat"):
                ends.add(id(reader))
                break
            if len(reader.outputs) != 1:
                return False
            v, steps = reader.outputs[0], steps + 1
        else:
            return False
    return len(ends) == 1


def _views_meet(node: ir.Node) -> bool:
    """A 4-D RotaryEmbedding the walk may pass: the sink runs it 3-D between two views, which cost as
    much as the Transposes they save unless they meet the export's head split / merge, so none where a
    Cast (a float16 island) reads or feeds the rotation and keeps them apart."""
    if not is_default_op(node, "RotaryEmbedding"):
        return False
    x = node.inputs[0] if node.inputs else None
    return not (is_default_op(x.producer() if x is not None else None, "Cast")
                or any(is_default_op(u.node, "Cast") for u in node.outputs[0].uses()))


def chain_steps(chain: list[ir.Node]) -> tuple[list, list] | None:
    """The known dims of a layout chain's source and its steps (op, perm / axis / target), or None
    where a dim or a step's argument is not known: the input of _chain_atoms.atoms."""
    dims = known_dims(chain[0].inputs[0]) if chain and chain[0].inputs[0] is not None else None
    if dims is None:
        return None
    steps = [(n.op_type, perm_of(n) if n.op_type == "Transpose" else flatten_axis(n) if n.op_type == "Flatten"
              else reshape_target(n)) for n in chain]
    return None if any(arg is None for _, arg in steps) else (dims, steps)


def chain_absorbs_transpose(v: ir.Value, perm: list[int] = HEADS) -> bool:
    """``v`` ends a Reshape / Flatten / Transpose chain from known dims (each value read once) whose
    Transposes, a Transpose by ``perm`` added after them, fold into no more Transposes than before
    (_static_chain.py folds it so): LongT5's keys, [B, N, L, H, D] moved to [B, N, H, L, D], merged
    to [B*N, H, L, D], read 3-D are [B, N, L, H, D] merged, with no Transpose at all."""
    chain, node = [], v.producer()
    while is_default_op(node, *LAYOUT_OPS) and _one_reader(node.outputs[0]) and len(chain) < _DEPTH:
        chain.insert(0, node)
        x = node.inputs[0] if node.inputs else None
        node = x.producer() if x is not None else None
    read = chain_steps(chain)
    if read is None:
        return False
    dims, steps = read
    before, after = atoms(dims, steps), atoms(dims, [*steps, ("Transpose", list(perm))])
    if before is None or after is None:
        return False
    moves = [plan[1] != list(range(len(plan[1]))) for plan in (before, after)]
    return moves[1] <= moves[0]


def _merged_by_reader(v: ir.Value) -> bool:
    """The output read once, by a Transpose by HEADS (the export's head merge)."""
    if v.is_graph_output():
        return False
    uses = list(v.uses())
    return len(uses) == 1 and is_default_op(uses[0].node, "Transpose") and perm_of(uses[0].node) == HEADS


def candidate(node: ir.Node, opset: int) -> tuple[bool, bool] | None:
    """(worth it, join the past) for a 4-D Attention-23 ``node``; None when it has no 3-D form here."""
    if not is_default_op(node, "Attention") or len(node.inputs) < 3:
        return None
    q, k, v = node.inputs[:3]
    if not (_static(q, 1, 3) and _static(k, 1, 3) and _static(v, 1, 3)):
        return None
    if len(node.inputs) > 6 and node.inputs[6] is not None:
        return None  # nonpad_kv_seqlen
    outs = node.outputs
    if len(outs) > 3 and (outs[3].uses() or outs[3].is_graph_output()):
        return None  # qk_matmul_output
    past = [node.inputs[i] if len(node.inputs) > i else None for i in (4, 5)]
    join = False
    if past[0] is not None or past[1] is not None:
        presents_read = any(o.uses() or o.is_graph_output() for o in outs[1:3])
        if None in past:
            return None
        if presents_read or attr_value(node, "is_causal", 0) or not all(_one_reader(p) for p in past):
            pass  # a real cache: past and present stay 4-D where they are (to_3d keeps them)
        else:
            join = True
    met = 0
    for i, x in enumerate((q, k, v)):
        if join and i > 0:  # the joined keys / values: both parts must meet a Transpose
            met += heads_split(x, opset) and heads_split(past[i - 1], opset)
        else:
            met += heads_split(x, opset)
    met += _merged_by_reader(outs[0])
    return met >= 3, join


def to_3d(graph: ir.Graph, node: ir.Node, join: bool) -> None:
    """Rewrite the 4-D Attention-23 ``node`` as its 3-D form between Transposes and Reshapes."""
    taken = {o.name for n in graph for o in n.outputs} | set(graph.initializers) | {w.name for w in graph.inputs}
    base = node.name or "attention"
    q, k, v = node.inputs[:3]
    new_nodes: list[ir.Node] = []

    def add(op: str, inputs, shape, dtype, **attributes) -> ir.Value:
        n = ir.node(op, inputs, attributes=attributes)
        n.name = fresh_name(f"{base}/3d_{op.lower()}", taken)
        out = n.outputs[0]
        out.name = fresh_name(f"{base}_3d_{op.lower()}", taken)
        out.dtype = dtype
        if shape is not None:
            out.shape = ir.Shape(shape)
        new_nodes.append(n)
        return out

    if join:
        pk, pv = node.inputs[4], node.inputs[5]
        joined = []
        for a, b in ((pk, k), (pv, v)):  # the sequence dim summed where both are ints
            dims = list(b.shape.dims)
            s1, s2 = a.shape[2] if a.shape is not None and len(a.shape) == 4 else None, b.shape[2]
            dims[2] = s1 + s2 if isinstance(s1, int) and isinstance(s2, int) else None
            joined.append(add("Concat", [a, b], dims, b.dtype, axis=2))
        k, v = joined
    merge = int64_initializer(graph, f"{base}_3d_merge", [0, 0, -1], taken)
    three = []
    for x in (q, k, v):
        t = add("Transpose", [x], [x.shape[i] for i in HEADS], x.dtype, perm=HEADS)
        d3 = [x.shape[0], x.shape[2], x.shape[1] * x.shape[3]]
        three.append(add("Reshape", [t, merge], d3, x.dtype))
    hq, hkv, dv = q.shape[1], k.shape[1], v.shape[3]
    attrs = {a.name: a.value for a in node.attributes.values()}
    attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    cache = [] if join else [x for x in node.inputs[4:6]]   # a real cache: past read 4-D as it is
    inputs = [*three, mask, *cache] if cache or mask is not None else three
    att = ir.node("Attention", inputs, attributes=attrs, num_outputs=1 + (2 if cache else 0))
    att.name = fresh_name(f"{base}/3d", taken)
    y3 = att.outputs[0]
    y3.name = fresh_name(f"{base}_3d_y", taken)
    o = node.outputs[0]
    y3.dtype = o.dtype
    if o.shape is not None:
        y3.shape = ir.Shape([o.shape[0], o.shape[2], hq * dv])
    new_nodes.append(att)
    split = int64_initializer(graph, f"{base}_3d_split", [0, 0, hq, dv], taken)
    y4 = add("Reshape", [y3, split], None if o.shape is None else [o.shape[0], o.shape[2], hq, dv], o.dtype)
    out = add("Transpose", [y4], None if o.shape is None else list(o.shape.dims), o.dtype, perm=HEADS)
    graph.insert_before(node, new_nodes)
    reroute(o, out)
    for old, new in zip(node.outputs[1:3] if cache else (), att.outputs[1:3]):   # the presents, 4-D in either form
        new.name, new.type, new.shape = fresh_name(f"{base}_3d_present", taken), old.type, old.shape
        reroute(old, new)
    graph.remove(node, safe=True)
