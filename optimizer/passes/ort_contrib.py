"""ONNX Runtime's default-domain SimplifiedLayerNormalization back into the RMSNorm it computes.

ORT's optimizers (its offline EXTENDED level, the transformers optimizer, Optimum -O2+) write RMSNorm
as ``SimplifiedLayerNormalization`` in the default domain, where only ORT has a schema: the onnx
and trt targets cannot run it, the ONNX checker refuses it, and its output is opaque to the rules
after it (the q / k heads of the next attention). Expanded into the decomposition an exporter writes
(float32 island when the input is half: Cast, x * x, ReduceMean, + eps, Sqrt, Reciprocal, Mul,
Cast back, * scale), the norm rules fuse it again for every target (RMSNormalization, or ORT's
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization at ort).

Only the plain form: normalized over the last axis, the inv_std_var output unused.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._consts import stored_ints
from onnx_fuse.passes._infra import FusePass, attr_value, reroute

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


class ExpandSimplifiedLayerNormPass(FusePass):
    """Default-domain SimplifiedLayerNormalization as its RMSNorm decomposition (module docstring)."""

    name = "expand-simplified-layer-norm"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type == "SimplifiedLayerNormalization" and node.domain in ("", "ai.onnx"):
                    modified |= self._rewrite(graph, node, opset)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node, opset: int) -> bool:
        if len(node.inputs) != 2 or any(x is None for x in node.inputs):
            return False
        if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            return False  # inv_std_var is read
        x, scale = node.inputs
        out = node.outputs[0]
        dtype = x.dtype
        if dtype not in _FLOATS or x.shape is None:
            return False
        axis = int(attr_value(node, "axis", -1))
        if axis not in (-1, x.shape.rank() - 1):
            return False
        eps = float(attr_value(node, "epsilon", 1e-5))
        island = dtype != ir.DataType.FLOAT and int(attr_value(node, "stash_type", 1)) == 1
        work = ir.DataType.FLOAT if island else dtype
        stem = node.name or out.name or "simplified_layer_norm"
        nodes: list[ir.Node] = []

        def add(op: str, inputs, tag: str, dt=work, attrs=(), shape=None) -> ir.Value:
            v = ir.Value(name=f"{stem}_{tag}", type=ir.TensorType(dt), shape=shape)
            nodes.append(ir.Node("", op, inputs, attributes=list(attrs), outputs=[v], name=f"{stem}_{tag}"))
            return v

        def const(value, tag: str, dt) -> ir.Value:
            v = ir.Value(name=f"{stem}_{tag}", const_value=ir.tensor(value, dtype=dt))
            graph.register_initializer(v)
            return v

        full = x.shape
        reduced = ir.Shape([*list(full)[:-1], 1])
        xf = add("Cast", [x], "x_f32", attrs=[ir.AttrInt64("to", int(work))], shape=full) if island else x
        sq = add("Mul", [xf, xf], "square", shape=full)
        if opset >= 18:
            ms = add("ReduceMean", [sq, const([-1], "axes", ir.DataType.INT64)], "mean", shape=reduced,
                     attrs=[ir.AttrInt64("keepdims", 1)])
        else:
            ms = add("ReduceMean", [sq], "mean", shape=reduced,
                     attrs=[ir.AttrInt64s("axes", [-1]), ir.AttrInt64("keepdims", 1)])
        ve = add("Add", [ms, const(eps, "epsilon", work)], "var_eps", shape=reduced)
        sd = add("Sqrt", [ve], "std", shape=reduced)
        inv = add("Reciprocal", [sd], "inv_std", shape=reduced)
        n = add("Mul", [xf, inv], "normalized", shape=full)
        if island:
            n = add("Cast", [n], "normalized_cast", dt=dtype, attrs=[ir.AttrInt64("to", int(dtype))], shape=full)
        y = add("Mul", [n, scale], "scaled", dt=dtype, shape=out.shape)
        graph.insert_before(node, nodes)
        reroute(out, y)
        graph.remove(node, safe=True)
        self.stats["SimplifiedLayerNormalization"] += 1
        return True


class ExpandOrtFusionsPass(FusePass):
    """For the onnx and trt targets, which cannot run ORT's com.microsoft ops: the norm and GELU
    fusions ORT's optimizers wrote (SkipLayerNormalization, SkipSimplifiedLayerNormalization,
    BiasGelu, FastGelu, QuickGelu) back into standard ops, in the forms the rules fuse again for the
    target (LayerNormalization, RMSNormalization, Gelu) or that run as they are (x * Sigmoid(a x)).
    A norm whose mean / inv_std_var output is read stays as it is. The ort target keeps them all."""

    name = "expand-ort-fusions"
    OPS = ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "BiasGelu", "FastGelu", "QuickGelu")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.domain == "com.microsoft" and node.op_type in self.OPS:
                    modified |= self._rewrite(graph, node, opset)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node, opset: int) -> bool:
        ins = list(node.inputs)
        x = ins[0] if ins else None
        if x is None or x.dtype not in _FLOATS or any(v is None for v in ins[:1]):
            return False
        op = node.op_type
        if op.startswith("Skip") and (len(ins) < 3 or ins[1] is None or ins[2] is None
                                      or any(o.uses() or o.is_graph_output() for o in node.outputs[1:3])):
            return False
        if op == "SkipLayerNormalization" and opset < 17:
            return False  # LayerNormalization-17
        dtype = x.dtype
        stem = node.name or node.outputs[0].name or op
        nodes: list[ir.Node] = []

        def add(op_type: str, inputs, tag: str, attrs=(), dt=dtype, shape=None) -> ir.Value:
            v = ir.Value(name=f"{stem}_{tag}", type=ir.TensorType(dt), shape=shape if shape is not None else x.shape)
            nodes.append(ir.Node("", op_type, inputs, attributes=list(attrs), outputs=[v], name=f"{stem}_{tag}"))
            return v

        def const(value, tag: str) -> ir.Value:
            v = ir.Value(name=f"{stem}_{tag}", const_value=ir.tensor(value, dtype=dtype))
            graph.register_initializer(v)
            return v

        results: dict[int, ir.Value] = {}
        if op.startswith("Skip"):
            s = add("Add", [x, ins[1]], "sum")
            bias = ins[4] if op == "SkipLayerNormalization" and len(ins) > 4 else (
                ins[3] if op == "SkipSimplifiedLayerNormalization" and len(ins) > 3 else None)
            if bias is not None:
                s = add("Add", [s, bias], "sum_bias")
            eps = float(attr_value(node, "epsilon", 1e-12))  # ORT's default for both
            if op == "SkipLayerNormalization":
                beta = ins[3] if len(ins) > 3 else None
                y = add("LayerNormalization", [s, ins[2], *([beta] if beta is not None else [])], "norm",
                        attrs=[ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", eps)])
            else:
                if x.shape is None:
                    return False
                reduced = ir.Shape([*list(x.shape)[:-1], 1])
                island = dtype != ir.DataType.FLOAT
                sf = add("Cast", [s], "sum_f32", attrs=[ir.AttrInt64("to", int(ir.DataType.FLOAT))],
                         dt=ir.DataType.FLOAT) if island else s
                work = ir.DataType.FLOAT if island else dtype
                sq = add("Mul", [sf, sf], "square", dt=work)
                if opset >= 18:
                    axes = ir.Value(name=f"{stem}_axes", const_value=ir.tensor([-1], dtype=ir.DataType.INT64))
                    graph.register_initializer(axes)
                    ms = add("ReduceMean", [sq, axes], "mean", attrs=[ir.AttrInt64("keepdims", 1)], dt=work,
                             shape=reduced)
                else:
                    ms = add("ReduceMean", [sq], "mean", dt=work, shape=reduced,
                             attrs=[ir.AttrInt64s("axes", [-1]), ir.AttrInt64("keepdims", 1)])
                e = ir.Value(name=f"{stem}_epsilon", const_value=ir.tensor(eps, dtype=work))
                graph.register_initializer(e)
                sd = add("Sqrt", [add("Add", [ms, e], "var_eps", dt=work, shape=reduced)], "std", dt=work,
                         shape=reduced)
                n = add("Mul", [sf, add("Reciprocal", [sd], "inv_std", dt=work, shape=reduced)], "normalized",
                        dt=work)
                if island:
                    n = add("Cast", [n], "normalized_cast", attrs=[ir.AttrInt64("to", int(dtype))])
                y = add("Mul", [n, ins[2]], "scaled")
            results = {0: y, 3: s}
        else:
            a = x
            if len(ins) > 1 and ins[1] is not None:  # BiasGelu / FastGelu's bias
                a = add("Add", [x, ins[1]], "biased")
            if op == "BiasGelu":
                t = add("Erf", [add("Mul", [a, const(0.7071067811865476, "rsqrt2")], "scaled")], "erf")
                y = add("Mul", [add("Mul", [a, add("Add", [t, const(1.0, "one")], "one_plus")], "times"),
                               const(0.5, "half")], "gelu")
            elif op == "FastGelu":
                cube = add("Mul", [a, add("Mul", [a, a], "square")], "cube")
                inner = add("Add", [a, add("Mul", [cube, const(0.044715, "coef")], "cubic")], "inner")
                t = add("Tanh", [add("Mul", [inner, const(0.7978845608028654, "k")], "scaled")], "tanh")
                y = add("Mul", [add("Mul", [a, const(0.5, "half")], "half_x"),
                               add("Add", [t, const(1.0, "one")], "one_plus")], "gelu")
            else:  # QuickGelu: x * sigmoid(alpha x)
                alpha = float(attr_value(node, "alpha", 1.702))
                z = a if alpha == 1.0 else add("Mul", [a, const(alpha, "alpha")], "scaled")
                y = add("Mul", [a, add("Sigmoid", [z], "sigmoid")], "gelu")
            results = {0: y}
        graph.insert_before(node, nodes)
        for k, new in results.items():
            if k >= len(node.outputs):
                continue
            old = node.outputs[k]
            if not (old.uses() or old.is_graph_output()):
                continue
            new.shape = old.shape if old.shape is not None else new.shape
            reroute(old, new)
        graph.remove(node, safe=True)
        self.stats[op] += 1
        return True


def split_sizes(node: ir.Node) -> list[int] | None:
    """The part sizes a Split states: its constant ``split`` input, the attribute before opset 13, or
    (opset 18's ``num_outputs``: torch's chunk under the dynamo exporter) parts of ceil(d / n) with a
    smaller last one, where the input's dim d on the axis is static; with none of them (opsets before
    18: tf2onnx's tf.split) d / outputs each, where that divides."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        return stored_ints(node.inputs[1])
    attr = node.attributes.get("split")
    if attr is not None:
        return [int(i) for i in attr.value]
    n = node.attributes.get("num_outputs")
    x = node.inputs[0] if node.inputs else None
    if x is None or x.shape is None or not x.shape.rank():
        return None
    d = x.shape[int(attr_value(node, "axis", 0)) % x.shape.rank()]
    if n is None:   # before opset 18 a Split without sizes has equal parts, one per output
        k = len(node.outputs)
        return [d // k] * k if isinstance(d, int) and k > 0 and d % k == 0 else None
    n = int(n.value)
    part = -(-d // n) if isinstance(d, int) and n > 0 else 0
    last = d - part * (n - 1) if part else 0
    return [part] * (n - 1) + [last] if last > 0 else None


class ShapeSplitToGatherPass(FusePass):
    """ORT's GatherSliceToSplitFusion writes the dim reads ``Gather(Shape(x), i)`` of a shape as one
    ``Split(Shape(x), [1, ...])`` with a Squeeze per part; the shape facts read Gathers of a Shape,
    not Splits (Mistral's repeat_kv target then stays unknown and attention does not fuse). Each
    part back as ``Gather(Shape(x), i)``: the scalar form where its reader is ``Squeeze(axes=[0])``,
    else the one-element ``Gather(Shape(x), [i])``. Only Splits of a 1-D int64 vector (shape
    arithmetic; here a Gather of the Shape) into parts of 1, where the Gathers are exact."""

    name = "shape-split-to-gather"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type == "Split" and node.domain in ("", "ai.onnx"):
                    modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        src = node.inputs[0] if node.inputs else None
        if src is None or src.dtype != ir.DataType.INT64 or src.shape is None or src.shape.rank() != 1:
            return False
        if int(attr_value(node, "axis", 0)) not in (0, -1):
            return False
        sizes = split_sizes(node)
        if sizes is None or sizes != [1] * len(node.outputs):
            return False
        stem = node.name or "shape_split"
        for k, out in enumerate(node.outputs):
            for use in list(out.uses()):
                reader = use.node
                axes = (stored_ints(reader.inputs[1]) if len(reader.inputs) > 1 else
                        (list(reader.attributes["axes"].value) if "axes" in reader.attributes else None))
                if reader.op_type == "Squeeze" and reader.domain in ("", "ai.onnx") and axes in ([0], [-1]) \
                        and reader.inputs[0] is out:
                    idx = ir.Value(name=f"{stem}_index_{k}", const_value=ir.tensor(k, dtype=ir.DataType.INT64))
                    graph.register_initializer(idx)
                    g = ir.Value(name=f"{stem}_dim_{k}", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
                    graph.insert_before(reader, ir.Node("", "Gather", [src, idx], attributes=[ir.AttrInt64("axis", 0)],
                                                        outputs=[g], name=f"{stem}_dim_{k}"))
                    sq = reader.outputs[0]
                    reroute(sq, g)
            if out.uses() or out.is_graph_output():
                idx = ir.Value(name=f"{stem}_indices_{k}", const_value=ir.tensor([k], dtype=ir.DataType.INT64))
                graph.register_initializer(idx)
                g = ir.Value(name=f"{stem}_part_{k}", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
                graph.insert_before(node, ir.Node("", "Gather", [src, idx], attributes=[ir.AttrInt64("axis", 0)],
                                                  outputs=[g], name=f"{stem}_part_{k}"))
                reroute(out, g)
        self.stats["Split"] += 1
        return True
