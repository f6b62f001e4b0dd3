"""Output shapes of our plugin ops for onnx's shape inference, which has no schema for them.

onnx's inference leaves a node of an unknown domain alone: its outputs keep whatever shape they
had (the one the lowering rule gave them), and nothing after them learns more. A multi-layer
decode step then loses ``S = 1`` at the first PagedAttention: the rule wrote ``[B, S, Hq*D]``
with S symbolic before the positions were re-derived, and the next layer's query inherits it.

So the copy handed to onnx has each plugin node replaced by stand-ins of the same output shapes
and types (docs/ops.md): FusedAttention's and PagedAttention's ``output`` is shaped like the
query, PagedAttention's ``key_cache_out`` / ``value_cache_out`` like the pools they update.
An Identity per output says exactly that, and one inference run carries the facts through every
layer. The stand-ins exist only in that copy; the model's nodes are untouched.
"""

from __future__ import annotations

import onnx

from onnx_fuse.plugin_ids import PLUGIN_DOMAIN

#: op type -> for each output, the input whose shape and type it has (docs/ops.md)
OUTPUT_LIKE = {
    "FusedAttention": (0,),
    "PagedAttention": (0, 3, 4),
}


def stand_in_plugin_ops(graph: onnx.GraphProto) -> int:
    """Replace our plugin nodes in ``graph`` (a copy given to onnx) and in its subgraphs (an
    Optimum merged decoder's If branches hold every layer) by Identity stand-ins; returns how
    many nodes were replaced."""
    replaced, here, nodes = 0, 0, []
    for node in graph.node:
        like = OUTPUT_LIKE.get(node.op_type) if node.domain == PLUGIN_DOMAIN else None
        if like is None or len(node.output) > len(like):
            for attr in node.attribute:
                if attr.HasField("g"):
                    replaced += stand_in_plugin_ops(attr.g)
                for sub in attr.graphs:
                    replaced += stand_in_plugin_ops(sub)
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
