"""Output shapes of our plugin ops, of the ONNX Runtime contrib attention ops the ort lowering
writes, of ORT's elementwise-shaped fusions (norms, GELUs) in graphs ORT optimized offline, and of
ORT's int4 MatMulNBits (A's shape with its last dim N: quantized TorchScript exports carry no
value_info, so without it every projection's output was shapeless and no attention fused), for
onnx's shape inference, which has no schema for them.

onnx's inference leaves a node of an unknown domain alone: its outputs keep whatever shape they
had (the one the lowering rule gave them, or none), and nothing after them learns more. A
multi-layer decode step then loses ``S = 1`` at the first PagedAttention: the rule wrote
``[B, S, Hq*D]`` with S symbolic before the positions were re-derived, and the next layer's query
inherits it. At ort, a MultiHeadAttention written with a dtype only leaves its output shapeless,
so the view after it (SqueezeBERT's way back to channels-first) cannot be proven.

So the copy handed to onnx has each such node replaced by stand-ins of the same output shapes
and types (docs/ops.md): FusedAttention's and PagedAttention's ``output`` is shaped like the
query, PagedAttention's ``key_cache_out`` / ``value_cache_out`` like the pools they update (an
Identity per output). com.microsoft GroupQueryAttention's ``output`` is the query's shape (not
packed: a key is given); MultiHeadAttention's is [B, S, v_hidden], the query's batch and length
with the value's hidden size, which ``Gather(q, [0], axis=2) + Gather(v, [0], axis=1)`` has
by broadcasting ([B, S, 1] + [B, 1, Cv]); a heads-first value [B, N, L, Hv] (N declared equal to
num_heads) gives its row merged to [B, 1, N*Hv]; only for a 3-D query (the packed forms are left
alone). Their other outputs (presents) stay unknown: the node
stays with its first output renamed. One inference run carries the facts through every layer.
The stand-ins exist only in that copy; the model's nodes are untouched.
"""

from __future__ import annotations

import onnx

from onnx_fuse.plugin_ids import PLUGIN_DOMAIN

#: op type -> for each output, the input whose shape and type it has (docs/ops.md)
OUTPUT_LIKE = {
    "FusedAttention": (0,),
    "PagedAttention": (0, 3, 4),
}

_CONTRIB = "com.microsoft"

#: ONNX Runtime's elementwise-shaped fusions, as a graph ORT optimized offline carries them (its
#: EXTENDED level, the transformers optimizer, Optimum -O2+): op type -> for each output, the input
#: whose shape and type it has, None where it differs (a norm's mean / inv_std_var). Without them a
#: SkipLayerNormalization hides the hidden size from the next layer's head split.
CONTRIB_LIKE = {
    "SkipLayerNormalization": (0, None, None, 0),
    "SkipSimplifiedLayerNormalization": (0, None, None, 0),
    "BiasGelu": (0,), "FastGelu": (0,), "Gelu": (0,), "QuickGelu": (0,), "BiasAdd": (0,),
    "SimplifiedLayerNormalization": (0, None), "LayerNormalization": (0, None, None),
}
#: ORT registers these in the default domain too, where onnx has no schema (or an older one)
DEFAULT_DOMAIN_CONTRIB = {"SimplifiedLayerNormalization"}


def _elementwise_like(node: onnx.NodeProto) -> tuple | None:
    if node.domain == _CONTRIB or (node.domain in ("", "ai.onnx") and node.op_type in DEFAULT_DOMAIN_CONTRIB):
        return CONTRIB_LIKE.get(node.op_type)
    return None


def _stand_in_elementwise(node: onnx.NodeProto, like: tuple) -> list[onnx.NodeProto]:
    """An Identity of the input per output shaped like it; the node stays for its other outputs
    (renamed away from the ones the Identities give), unknown to onnx."""
    out, kept = [], False
    for k, name in enumerate(node.output):
        src = like[k] if k < len(like) else None
        if name and src is not None and src < len(node.input) and node.input[src]:
            out.append(onnx.helper.make_node("Identity", [node.input[src]], [name], name=f"{node.name}/shape_{k}"))
            node.output[k] = f"{name}/unshaped"
        elif name:
            kept = True
    return [node, *out] if kept else out


def _ranks(graph: onnx.GraphProto, outer: dict[str, int]) -> dict[str, int]:
    """Declared ranks of the values ``graph`` can read (its own and the outer scopes')."""
    ranks = dict(outer)
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
    ranks.update((t.name, len(t.dims)) for t in graph.initializer)
    return ranks


def _heads_axes(graph: onnx.GraphProto) -> dict[str, int]:
    """Declared static dim 1 of the graph's own 4-D values (a heads-first value's head count)."""
    out = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()
        if len(dims) == 4 and dims[1].HasField("dim_value"):
            out[vi.name] = dims[1].dim_value
    return out


def _matmul_nbits_output(node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    """MatMulNBits (int4 weight-only A @ W, W [K, N]): A's shape with its last dim N and A's type,
    as ``Gather(A, [0], axis=-1) + CastLike(zeros[N], A)`` (no [K, N] stand-in weight)."""
    n = next((a.i for a in node.attribute if a.name == "N"), 0)
    if n <= 0 or not node.input or not node.input[0] or not node.output or not node.output[0]:
        return None
    a, out, p = node.input[0], node.output[0], f"{node.output[0]}/shape"
    return [onnx.helper.make_node("Constant", [], [f"{p}/zero"], value=onnx.helper.make_tensor(
                f"{p}/zero", onnx.TensorProto.INT64, [1], [0])),
            onnx.helper.make_node("Constant", [], [f"{p}/zeros"], value=onnx.helper.make_tensor(
                f"{p}/zeros", onnx.TensorProto.FLOAT, [n], [0.0] * n)),
            onnx.helper.make_node("Gather", [a, f"{p}/zero"], [f"{p}/a1"], axis=-1),          # [..., 1]
            onnx.helper.make_node("CastLike", [f"{p}/zeros", a], [f"{p}/zeros_like"]),
            onnx.helper.make_node("Add", [f"{p}/a1", f"{p}/zeros_like"], [out], name=p)]       # [..., N]


def _contrib_output(node: onnx.NodeProto, ranks: dict[str, int],
                    heads: dict[str, int] | None = None) -> list[onnx.NodeProto] | None:
    """Nodes computing a value of the contrib attention op's first output's shape and type, under
    that output's name; None where the op's form is not one whose shape is known here (a 4-D value
    only with its heads axis declared equal to num_heads, the form ORT runs)."""
    ins = [*node.input, "", "", ""]
    q, k, v, out = ins[0], ins[1], ins[2], node.output[0]
    if not (q and k and out) or ranks.get(q) != 3:
        return None
    if node.op_type == "GroupQueryAttention":
        return [onnx.helper.make_node("Identity", [q], [out], name=f"{node.name}/shape_0")]
    if node.op_type != "MultiHeadAttention" or not v or ranks.get(v) not in (3, 4):
        return None
    num_heads = next((a.i for a in node.attribute if a.name == "num_heads"), None)
    if ranks[v] == 4 and (num_heads is None or (heads or {}).get(v) != num_heads):
        return None
    p = f"{out}/shape"
    zero = onnx.helper.make_node("Constant", [], [f"{p}/zero"], value=onnx.helper.make_tensor(
        f"{p}/zero", onnx.TensorProto.INT64, [1], [0]))
    if ranks[v] == 3:
        value_row = [onnx.helper.make_node("Gather", [v, f"{p}/zero"], [f"{p}/v1"], axis=1)]   # [B, 1, Cv]
    else:   # heads-first [B, N, L, Hv] (passes/mha_kv_heads.py): [B, N, 1, Hv] -> [B, 1, N, Hv] -> [B, 1, N*Hv]
        merge = onnx.helper.make_node("Constant", [], [f"{p}/merge"], value=onnx.helper.make_tensor(
            f"{p}/merge", onnx.TensorProto.INT64, [3], [0, 0, -1]))
        value_row = [merge, onnx.helper.make_node("Gather", [v, f"{p}/zero"], [f"{p}/v4"], axis=2),
                     onnx.helper.make_node("Transpose", [f"{p}/v4"], [f"{p}/vt"], perm=[0, 2, 1, 3]),
                     onnx.helper.make_node("Reshape", [f"{p}/vt", f"{p}/merge"], [f"{p}/v1"])]
    return [zero,   # (a Gather of one index keeps that axis 1 long, where a Slice of a dynamic one may be 0)
            onnx.helper.make_node("Gather", [q, f"{p}/zero"], [f"{p}/q1"], axis=2),   # [B, S, 1]
            *value_row,
            onnx.helper.make_node("Add", [f"{p}/q1", f"{p}/v1"], [out], name=p)]


def stand_in_plugin_ops(graph: onnx.GraphProto, outer: dict[str, int] | None = None) -> int:
    """Replace our plugin nodes and the contrib attention ops in ``graph`` (a copy given to onnx)
    and in its subgraphs (an Optimum merged decoder's If branches hold every layer) by stand-ins;
    returns how many nodes were replaced."""
    ranks, heads = _ranks(graph, outer or {}), _heads_axes(graph)
    replaced, here, nodes = 0, 0, []
    for node in graph.node:
        like = OUTPUT_LIKE.get(node.op_type) if node.domain == PLUGIN_DOMAIN else None
        contrib = (_matmul_nbits_output(node) if node.op_type == "MatMulNBits" else
                   _contrib_output(node, ranks, heads)) if node.domain == _CONTRIB else None
        elementwise = _elementwise_like(node) if contrib is None else None
        if elementwise is not None:
            nodes += _stand_in_elementwise(node, elementwise)
            here += 1
            continue
        if contrib is not None:
            if len(node.output) > 1:   # the presents stay the op's, unknown to onnx
                node.output[0] = f"{node.output[0]}/unshaped"
                nodes.append(node)
            nodes += contrib
            here += 1
            continue
        if like is None or len(node.output) > len(like):
            for attr in node.attribute:
                if attr.HasField("g"):
                    replaced += stand_in_plugin_ops(attr.g, ranks)
                for sub in attr.graphs:
                    replaced += stand_in_plugin_ops(sub, ranks)
            nodes.append(node)
            continue
        for k, out in enumerate(node.output):
            src = node.input[like[k]] if like[k] < len(node.input) else ""
            if out and src:
                nodes.append(onnx.helper.make_node("Identity", [src], [out], name=f"{node.name}/shape_{k}"))
        here += 1
    if here:   # (a subgraph's stand-ins were put in place above)
        del graph.node[:]
        graph.node.extend(nodes)
    return replaced + here
