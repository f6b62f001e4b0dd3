"""MultiHeadAttention's past keys / values that are no cache joined to its 3-D key / value.

The ort lowering writes a Concat over the sequence of two streams' keys that the recognizers read
as a cache (SD3's joint attention: the text keys the "past") as MultiHeadAttention's past_key /
past_value, which ORT takes only heads-first [B, N, P, H]; the export splits heads from
[B, P, N*H] and so keeps a Transpose on each (SD3 at ort-O3: 2 per layer, through the keys' RMSNorm).
Where nobody reads the presents, the past is no cache: Concat(Reshape(Transpose(past, [0, 2, 1, 3]),
[0, 0, -1]), k) over the sequence is the same key tensor in MultiHeadAttention's 3-D form (its keys
are past then new, in that order), and the Transpose added meets the export's, which fold-layout-
chains then cancels (_transpose_sink.py, through the norm). Done only where both pasts meet such a
Transpose (_attention_3d.heads_split: otherwise it would cost the Transposes it saves).

Not with a packed bias (ORT adds it to the new keys only), unidirectional (its band is offset by
the past length), past_sequence_length / cache_indirection, or a key_padding_mask other than
[B, P+L] (the form that reads the same over the joined keys). Exact: the same keys and values
reach the same kernel in the same order.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._attention_3d import HEADS, heads_split
from onnx_fuse.passes._infra import FusePass, attr_value, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names, int64_initializer

_PAST = (6, 7)  # past_key, past_value


def _rank(v: ir.Value | None) -> int | None:
    return None if v is None or v.shape is None else len(v.shape)


def _joinable(node: ir.Node, opset: int) -> bool:
    ins = list(node.inputs) + [None] * (10 - len(node.inputs))
    heads = attr_value(node, "num_heads", None)
    if heads is None or attr_value(node, "unidirectional", 0) != 0:
        return False
    if [_rank(x) for x in ins[:3]] != [3, 3, 3] or any(_rank(ins[i]) != 4 for i in _PAST):
        return False
    if ins[3] is not None or ins[8] is not None or ins[9] is not None:
        return False  # a packed bias, past_sequence_length, cache_indirection
    if ins[4] is not None and _rank(ins[4]) != 2:
        return False
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        return False  # a present is read: a real cache
    for i in _PAST:
        p = ins[i]
        if not (isinstance(p.shape[1], int) and p.shape[1] == heads and isinstance(p.shape[3], int)):
            return False
    return all(heads_split(ins[i], opset) for i in _PAST)


def _join(graph: ir.Graph, node: ir.Node) -> None:
    taken = graph_names(graph)
    base = node.name or "mha"
    merge = int64_initializer(graph, f"{base}_past_merge", [0, 0, -1], taken)
    new_nodes, joined = [], []
    for i, tag in ((1, "key"), (2, "value")):
        past, x = node.inputs[_PAST[i - 1]], node.inputs[i]
        t = ir.node("Transpose", [past], attributes={"perm": HEADS})
        r = ir.node("Reshape", [t.outputs[0], merge])
        c = ir.node("Concat", [r.outputs[0], x], attributes={"axis": 1})
        pd = list(past.shape)
        dims = [[pd[i] for i in HEADS], [pd[0], pd[2], pd[1] * pd[3]]]
        lx = x.shape[1]
        joined_len = pd[2] + lx if isinstance(pd[2], int) and isinstance(lx, int) else None
        dims.append([x.shape[0], joined_len, x.shape[2]])
        for n, d, suffix in zip((t, r, c), dims, ("heads", "merged", "joined")):
            n.name = fresh_name(f"{base}/past_{tag}_{suffix}", taken)
            n.outputs[0].name = fresh_name(f"{base}_past_{tag}_{suffix}", taken)
            n.outputs[0].dtype, n.outputs[0].shape = x.dtype, ir.Shape(d)
        new_nodes += [t, r, c]
        joined.append(c.outputs[0])
    inputs = [node.inputs[0], *joined, *node.inputs[3:6]]
    while inputs and inputs[-1] is None:
        inputs.pop()
    mha = ir.Node("com.microsoft", "MultiHeadAttention", inputs, attributes=list(node.attributes.values()))
    mha.name = fresh_name(f"{base}/joined", taken)
    y, out = node.outputs[0], mha.outputs[0]
    out.name = fresh_name(f"{y.name or base}_joined", taken)
    out.dtype, out.shape = y.dtype, y.shape
    graph.insert_before(node, [*new_nodes, mha])
    reroute(y, out)
    graph.remove(node, safe=True)


class MhaJoinedPastPass(FusePass):
    """MultiHeadAttention's unread-present past joined to its 3-D key / value (module docstring)."""

    name = "mha-joined-past"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        graph = model.graph  # heads_split's region is the main graph's
        for node in list(graph):
            if node.op_type == "MultiHeadAttention" and node.domain == "com.microsoft" and _joinable(node, opset):
                _join(graph, node)
                self.stats["MultiHeadAttention"] += 1
                modified = True
        return ir.passes.PassResult(model, modified=modified)
