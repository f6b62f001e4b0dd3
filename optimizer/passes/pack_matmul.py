"""Pack sibling projections: MatMuls that read the same activation with constant weights become one
MatMul on the weights side by side, then a Split.

A decoder layer reads its normed hidden state three times for Q, K and V (and twice for the MLP's
gate and up); at decode (one token) each is a small GEMV whose cost on the CPU is as much dispatch
as arithmetic. One MatMul of [K, Nq+Nk+Nv] reads the activation once and runs one kernel; the
Split costs a copy of the outputs, which is 1/K of the MatMul's work. When every sibling's only
reader is an Add of a constant bias of its width, the biases are packed too (one Add before the
Split). Exact: each output element is the same dot product over the same K.

Packed only: 2-D constant weights of one dtype and one K, MatMul outputs that are not graph
outputs, inside the main graph and subgraphs alike. The packed weights are computed lazily (an
``ir.LazyTensor``), so loaded weights are not read before the model is saved or run.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._new_values import fresh_name, graph_names
from onnx_fuse.passes.constant_folding import constant_tensor


def _weight(node: ir.Node, x: ir.Value):
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    if node.inputs[0] is not x or node.inputs[1] is x:
        return None
    w = constant_tensor(node.inputs[1])
    if w is None or len(w.shape) != 2 or not all(isinstance(d, int) for d in w.shape):
        return None
    out = node.outputs[0]
    if out.is_graph_output():
        return None
    return w


def _bias(node: ir.Node, width: int, dtype):
    """(Add node, bias tensor) when the MatMul's only reader adds a constant [width] bias."""
    uses = list(node.outputs[0].uses())
    if len(uses) != 1:
        return None
    add = uses[0].node
    if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or add.outputs[0].is_graph_output():
        return None
    other = add.inputs[1 - uses[0].idx] if len(add.inputs) == 2 else None
    b = constant_tensor(other)
    if b is None or b.dtype != dtype or list(b.shape) != [width]:
        return None
    return add, b


def _concat(tensors, axis: int, dtype, shape):
    def compute() -> ir.TensorProtocol:
        return ir.tensor(np.concatenate([t.numpy() for t in tensors], axis=axis))

    return ir.LazyTensor(compute, dtype=dtype, shape=ir.Shape(shape))


class PackSiblingMatMulsPass(FusePass):
    """One MatMul (+ bias Add) and a Split for projections of one activation (module docstring)."""

    name = "pack-matmul"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        if model.opset_imports.get("", 0) < 13:  # Split's sizes as an input
            return ir.passes.PassResult(model, modified=False)
        for graph in model.graphs():
            for value in self._activations(graph):
                modified |= self._pack(graph, value)
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _activations(graph: ir.Graph) -> list[ir.Value]:
        seen, out = set(), []
        for node in graph:
            if node.op_type == "MatMul" and node.inputs and node.inputs[0] is not None:
                x = node.inputs[0]
                if id(x) not in seen:
                    seen.add(id(x))
                    out.append(x)
        return out

    def _pack(self, graph: ir.Graph, x: ir.Value) -> bool:
        groups: dict[tuple, list[tuple[ir.Node, object]]] = {}
        for use in x.uses():
            node = use.node
            if node.graph is not graph or use.idx != 0:
                continue
            w = _weight(node, x)
            if w is not None:
                groups.setdefault((w.dtype, w.shape[0]), []).append((node, w))
        modified = False
        for (dtype, k), members in groups.items():
            if len(members) < 2:
                continue
            order = {n: i for i, n in enumerate(graph)}
            members.sort(key=lambda m: order[m[0]])
            widths = [int(w.shape[1]) for _, w in members]
            biases = [_bias(n, wd, dtype) for (n, _), wd in zip(members, widths)]
            with_bias = all(b is not None for b in biases)
            self._rewrite(graph, x, members, widths, biases if with_bias else None, dtype, k)
            self.stats["MatMul"] += len(members)
            modified = True
        return modified

    def _rewrite(self, graph, x, members, widths, biases, dtype, k) -> None:
        first = members[0][0]
        total = sum(widths)
        # New value names must be unused: node names may be empty or repeated (two packs of
        # unnamed nodes both made "matmul_packed_w"), and "<output>_packed" may exist already
        stem = first.name or first.outputs[0].name or "matmul"
        taken = graph_names(graph)

        w_val = ir.Value(name=fresh_name(f"{stem}_packed_w", taken), type=ir.TensorType(dtype),
                         shape=ir.Shape([k, total]),
                         const_value=_concat([w for _, w in members], 1, dtype, [k, total]))
        graph.register_initializer(w_val)
        out_shape = None
        ref = members[0][0].outputs[0]
        if ref.shape is not None:
            out_shape = ir.Shape([*list(ref.shape)[:-1], total])
        mm_out = ir.Value(name=fresh_name(f"{stem}_packed", taken), type=ir.TensorType(dtype), shape=out_shape)
        new_nodes = [ir.Node("", "MatMul", [x, w_val], outputs=[mm_out], name=f"{stem}_packed")]
        split_in = mm_out
        olds = [n.outputs[0] for n, _ in members]
        if biases is not None:
            b_val = ir.Value(name=fresh_name(f"{stem}_packed_b", taken), type=ir.TensorType(dtype),
                             shape=ir.Shape([total]),
                             const_value=_concat([b for _, b in biases], 0, dtype, [total]))
            graph.register_initializer(b_val)
            split_in = ir.Value(name=fresh_name(f"{stem}_packed_biased", taken), type=ir.TensorType(dtype),
                                shape=out_shape)
            new_nodes.append(ir.Node("", "Add", [mm_out, b_val], outputs=[split_in],
                                     name=f"{stem}_packed_bias"))
            olds = [add.outputs[0] for add, _ in biases]
        sizes = ir.Value(name=fresh_name(f"{stem}_packed_split", taken), type=ir.TensorType(ir.DataType.INT64),
                         shape=ir.Shape([len(widths)]),
                         const_value=ir.tensor(np.array(widths, np.int64)))
        graph.register_initializer(sizes)
        outs = [ir.Value(name=fresh_name(f"{o.name}_packed", taken) if o.name else None, type=o.type, shape=o.shape)
                for o in olds]
        new_nodes.append(ir.Node("", "Split", [split_in, sizes], attributes=[ir.AttrInt64("axis", -1)],
                                 outputs=outs, name=f"{stem}_packed_split"))
        # every member reads x, so right before the first member all inputs exist
        graph.insert_before(first, new_nodes)
        for old, new in zip(olds, outs):
            old.replace_all_uses_with(new)
        for (n, _), b in zip(members, biases or [None] * len(members)):
            if b is not None:
                graph.remove(b[0], safe=True)
            graph.remove(n, safe=True)
