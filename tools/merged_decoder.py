"""A KV-cache decoder step written as Optimum's merged decoder: an If on a bool ``use_cache_branch``
[1] whose then branch is the step's nodes and whose else branch the same nodes (the same value
names) over an empty past [B, Hkv, 0, D] made in the branch; weights stay in the main graph.
One builder for the fuzzer (tools/fuzz_decoder.as_merged) and the tests of the paged merged
decoder (tests/targets/test_trt_merged_decoder.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper


def merged_decoder(model: onnx.ModelProto, batch_from: str, *, else_reads_past: bool = False,
                   name: str | None = None) -> onnx.ModelProto:
    """``model``'s step as a merged decoder. The empty past takes its batch from ``batch_from``'s
    first dim and Hkv, D and the dtype from each ``past_key_values.*`` input's declared type (Hkv
    and D must be static). ``else_reads_past``: the else branch reads the graph's own past instead
    (both branches use the cache: no branch is the no-cache one). The then branch keeps the
    step's value_info; the graph is named ``name`` (default the step's)."""
    g = model.graph
    pasts = [i for i in g.input if i.name.startswith("past_key_values.")]
    empty = {} if else_reads_past else {p.name: f"{p.name}__empty" for p in pasts}
    nodes = [oh.make_node("Shape", [batch_from], ["merged_batch"], start=0, end=1)] if empty else []
    inits = list(g.initializer)
    for p in pasts if empty else []:
        t = p.type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        zero = np.zeros(1, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        inits.append(numpy_helper.from_array(np.array([dims[1], 0, dims[3]], np.int64), f"{p.name}__dims"))
        nodes += [oh.make_node("Concat", ["merged_batch", f"{p.name}__dims"], [f"{p.name}__shape"], axis=0),
                  oh.make_node("ConstantOfShape", [f"{p.name}__shape"], [empty[p.name]],
                               value=numpy_helper.from_array(zero))]
    for n in g.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.input[:] = [empty.get(v, v) for v in m.input]
        nodes.append(m)
    then_g = oh.make_graph(list(g.node), "with_past", [], list(g.output), value_info=list(g.value_info))
    else_g = oh.make_graph(nodes, "no_past", [], list(g.output))
    cond = oh.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    main = oh.make_graph([oh.make_node("If", ["use_cache_branch"], [o.name for o in g.output],
                                       then_branch=then_g, else_branch=else_g)],
                         g.name if name is None else name, [*g.input, cond], list(g.output), initializer=inits)
    merged = oh.make_model(main, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    onnx.checker.check_model(merged)
    return merged
