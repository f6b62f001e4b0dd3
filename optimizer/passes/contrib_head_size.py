"""The head size a KV cache's symbolic last dim must be, read from the attention that consumes it.

onnxruntime-genai's model builder declares the past / present of every layer [batch, kv_heads,
past, kv_cache_dim] with the head size a symbol, although its com.microsoft GroupQueryAttention
(or MultiHeadAttention) fixes it: the packed QKV's static width is (num_heads + 2 kv_num_heads) * D
(q's is num_heads * D), and ORT refuses a past of any other head size. Left symbolic, what reads the
cache cannot prove it is [B, Hkv, P, D] like the new keys: trt-paged-kv refused the builder's models
for that alone, and random verification inputs guessed a head size the original then refused.

``head_size_bindings`` says which symbol is which size (one value per symbol over every such op,
else none; a cache Concat-joined to new keys of a static head size counts too: the builder's fp16
CPU form joins the past before its MultiHeadAttention); ``BindContribHeadSizePass`` writes that size into the graph's own inputs and outputs
(the declared interface is restored on output, session.keep_interface), and verify sizes its random
inputs by it (verify._symbol_values).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value

# op -> (indices of the past key / value inputs, indices of the present outputs)
_CACHE_SLOTS = {"GroupQueryAttention": ((3, 4), (1, 2)), "MultiHeadAttention": ((6, 7), (1, 2))}


def _head_size(node: ir.Node) -> int | None:
    """D from the op's attributes and its query's static hidden width (None: not provable)."""
    ins = list(node.inputs)
    x = ins[0] if ins else None
    h = int(attr_value(node, "num_heads", 0))
    if x is None or x.shape is None or x.shape.rank() != 3 or not isinstance(x.shape[2], int) or h <= 0:
        return None
    width = x.shape[2]
    if node.op_type == "GroupQueryAttention":
        hkv = int(attr_value(node, "kv_num_heads", 0))
        packed = len(ins) < 2 or ins[1] is None
        total = h + 2 * hkv if packed else h
    else:   # MultiHeadAttention: q [B, S, H*D]; a packed QKV is rank 5, not taken above
        total = h
    return width // total if total > 0 and width % total == 0 else None


def head_size_bindings(graph: ir.Graph) -> dict[str, int]:
    """{symbol: D} for each symbolic last dim of a past / present the ops above fix; a symbol two
    ops would bind to different sizes is left out."""
    found: dict[str, set[int]] = {}
    for node in graph:
        slots = _CACHE_SLOTS.get(node.op_type) if node.domain == "com.microsoft" else None
        if slots is None:
            continue
        d = _head_size(node)
        if d is None:
            continue
        ins, outs = list(node.inputs), list(node.outputs)
        values = [ins[i] for i in slots[0] if i < len(ins)] + [outs[i] for i in slots[1] if i < len(outs)]
        for v in values:
            if v is not None and v.shape is not None and v.shape.rank() == 4 and isinstance(v.shape[3], ir.SymbolicDim) \
                    and v.shape[3].value:
                found.setdefault(v.shape[3].value, set()).add(d)
    # the same cache joined to the new keys before a contrib MultiHeadAttention (the builder's fp16
    # CPU form): Concat makes every non-axis dim equal, so a sibling's static head size is its own
    for v in graph.inputs:
        if v.shape is None or v.shape.rank() != 4 or not isinstance(v.shape[3], ir.SymbolicDim) or not v.shape[3].value:
            continue
        for user, _ in v.uses():
            axis = int(attr_value(user, "axis", 0))
            if user.op_type != "Concat" or user.domain not in ("", "ai.onnx") or axis in (3, -1):
                continue
            sizes = {x.shape[3] for x in user.inputs if x is not None and x.shape is not None
                     and x.shape.rank() == 4 and isinstance(x.shape[3], int)}
            if len(sizes) == 1:
                found.setdefault(v.shape[3].value, set()).update(sizes)
    return {sym: next(iter(ds)) for sym, ds in found.items() if len(ds) == 1}


class BindContribHeadSizePass(FusePass):
    """Graph inputs / outputs whose dim is a symbol head_size_bindings fixes get its value."""

    name = "bind-contrib-head-size"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        bindings = head_size_bindings(graph)
        modified = False
        for v in [*graph.inputs, *graph.outputs]:
            if v.shape is None or not any(isinstance(d, ir.SymbolicDim) and d.value in bindings for d in v.shape):
                continue
            v.shape = ir.Shape([bindings[d.value] if isinstance(d, ir.SymbolicDim) and d.value in bindings else d
                                for d in v.shape])
            self.stats["dims bound"] += 1
            modified = True
        return ir.passes.PassResult(model, modified)
