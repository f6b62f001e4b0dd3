"""Shared helpers of the attention rule tests that build models with onnx.helper: fuse at a target and read
back the attention nodes' head counts."""

from __future__ import annotations

import numpy as np
import onnx

import onnx_fuse


def fuse(model: onnx.ModelProto, target: str, disable=()) -> tuple[onnx.ModelProto, dict[str, int]]:
    """The model optimized for ``target`` (O4 at trt, float32 plugins; O3 elsewhere) and the rules that fired
    (the report's counts: recognizers too)."""
    level = 4 if target == "trt" else 3
    out = onnx_fuse.optimize(model, level=level, target=target, float32_plugins=True, disable=list(disable))
    return out.to_proto(), dict(out.report.rule_fires)


def attention_heads(model: onnx.ModelProto) -> list[int]:
    """The head count of every attention node: its num_heads / q_num_heads, else q's dim 1 (4-D)."""
    m = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
              for v in [*m.graph.value_info, *m.graph.input]}
    found = []
    for n in m.graph.node:
        if "Attention" not in n.op_type:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        heads = a.get("num_heads", a.get("q_num_heads"))
        if heads is None and len(shapes.get(n.input[0], [])) == 4:
            heads = shapes[n.input[0]][1]
        found.append(heads)
    return found


def rotate_half_nodes(n, xs=("q4", "k4")) -> list:
    """Rotate-half RoPE as the dynamo export writes it, with ``n`` a node builder (``h.node``): cos / sin of
    concat(f, f), f = positions * inv_freq (inputs pos, inv_freq, ax02, ax1), applied to each heads-first x
    in ``xs`` as x * cos + concat(-x2, x1) * sin (slices s_0 / s_half / s_end on axis s_ax) -> ``{x}rot``."""
    nodes = [n("Unsqueeze", ["pos", "ax02"], ["pos3"]), n("Cast", ["pos3"], ["posf"], to=1),
             n("Mul", ["posf", "inv_freq"], ["f"]), n("Concat", ["f", "f"], ["cat"], axis=-1),
             n("Cos", ["cat"], ["co"]), n("Sin", ["cat"], ["si"]),
             n("Unsqueeze", ["co", "ax1"], ["cu"]), n("Unsqueeze", ["si", "ax1"], ["su"])]
    for x in xs:
        nodes += [n("Mul", [x, "cu"], [f"{x}c"]),
                  n("Slice", [x, "s_0", "s_half", "s_ax"], [f"{x}1"]),
                  n("Slice", [x, "s_half", "s_end", "s_ax"], [f"{x}2"]),
                  n("Neg", [f"{x}2"], [f"{x}n"]), n("Concat", [f"{x}n", f"{x}1"], [f"{x}h"], axis=-1),
                  n("Mul", [f"{x}h", "su"], [f"{x}s"]), n("Add", [f"{x}c", f"{x}s"], [f"{x}rot"])]
    return nodes


def scores_merge_nodes(n, k: str, v: str) -> list:
    """softmax(q4rot @ k^T * scale + mask) @ v as the dynamo export writes it, merged back to [B,S,H*D] as ``y``
    (inputs q3 for the leading dims, hd = [H*D], scale, mask); ``n`` a node builder (``h.node``)."""
    return [n("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4rot", "kt"], ["sc"]),
            n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
            n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", v], ["o"]),
            n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
            n("Shape", ["q3"], ["bs"], start=0, end=2), n("Concat", ["bs", "hd"], ["merge"], axis=0),
            n("Reshape", ["ot", "merge"], ["y"], allowzero=1)]


def decoder_attention(h, heads: int, head_size: int, past: bool, kv_heads: int | None = None,
                      q_bias: bool = True, seed: int = 1) -> tuple[list, list, list, dict]:
    """One decoder self-attention over a value ``mask`` as the dynamo export writes it: q / k / v
    projections of x [batch, seq, heads*head_size] (biased; q unbiased with ``q_bias`` False) viewed
    heads-first, with ``past`` the keys and values Concat(past_k / past_v [batch, kv, past, D], new)
    and the presents outputs [batch, kv, total, D], k / v repeated by Tile where ``kv_heads`` is
    fewer than ``heads``, softmax(q k^T * scale + mask) v merged back to y. Returns (nodes, inputs,
    outputs, initializers) for ``h.make_model`` (``h`` the rule tests' helper namespace)."""
    n = h.node
    kv = kv_heads or heads
    hid = heads * head_size
    rng = np.random.default_rng(seed)
    inits = {"scale": np.array(head_size ** -0.5, np.float32), "merge": np.array([0, 0, hid], np.int64),
             "qshape": np.array([0, 0, heads, head_size], np.int64),
             "kvshape": np.array([0, 0, kv, head_size], np.int64)}
    inputs = [h.vi("x", ["batch", "seq", hid])]
    outputs = [h.vi("y", ["batch", "seq", hid])]
    nodes = []
    for c in "qkv":
        width = hid if c == "q" else kv * head_size
        inits[f"w{c}"] = (rng.standard_normal((hid, width)) * 0.3).astype(np.float32)
        inits[f"bias_{c}"] = (rng.standard_normal(width) * 0.1).astype(np.float32)
        proj = f"m{c}"
        nodes.append(n("MatMul", ["x", f"w{c}"], [proj]))
        if c != "q" or q_bias:
            nodes.append(n("Add", [proj, f"bias_{c}"], [f"{c}3"]))
            proj = f"{c}3"
        nodes += [n("Reshape", [proj, "qshape" if c == "q" else "kvshape"], [f"{c}r"]),
                  n("Transpose", [f"{c}r"], [f"{c}4"], perm=[0, 2, 1, 3])]
    kk, vv = "k4", "v4"
    if past:
        inputs += [h.vi("past_k", ["batch", kv, "past", head_size]), h.vi("past_v", ["batch", kv, "past", head_size])]
        nodes += [n("Concat", ["past_k", "k4"], ["present_k"], axis=2),
                  n("Concat", ["past_v", "v4"], ["present_v"], axis=2)]
        kk, vv = "present_k", "present_v"
        outputs += [h.vi("present_k", ["batch", kv, "total", head_size]),
                    h.vi("present_v", ["batch", kv, "total", head_size])]
    if kv != heads:   # repeat_kv: [B, kv, T, D] -> [B, H, T, D]
        inits["rep"] = np.array([1, heads // kv, 1, 1], np.int64)
        nodes += [n("Tile", [kk, "rep"], ["kh"]), n("Tile", [vv, "rep"], ["vh"])]
        kk, vv = "kh", "vh"
    nodes += [n("Transpose", [kk], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", vv], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["y"])]
    return nodes, inputs, outputs, inits
