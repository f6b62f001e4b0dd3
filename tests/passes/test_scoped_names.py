"""optimizer/passes/_scoped_names.py: a name a pass gives in one graph that an enclosing graph or a
body already defines (onnx-ir names new values per graph, ``val_8``) is moved off the body."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto as TP
from onnx import helper

import onnx_fuse
from onnx_fuse.demo_model import build_demo_model
from onnx_fuse.passes._scoped_names import separate_scoped_names


def _names(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    values = {o for n in graph.node for o in n.output} | {t.name for t in graph.initializer}
    return values, {n.name for n in graph.node}


def _with_branch_taking(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """``model`` plus an If whose then-branch defines ``names`` (an Identity chain of the input)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    x = m.graph.input[0]

    def info(name):
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(x)
        vi.name = name
        return vi

    chain, prev = [], x.name
    for name in names:
        chain.append(helper.make_node("Identity", [prev], [name]))
        prev = name
    then_g = helper.make_graph(chain, "then", [], [info(prev)])
    else_g = helper.make_graph([helper.make_node("Identity", [x.name], ["else_out"])], "else", [],
                               [info("else_out")])
    m.graph.input.append(helper.make_tensor_value_info("cond", TP.BOOL, []))
    m.graph.node.append(helper.make_node("If", ["cond"], ["if_out"], then_branch=then_g, else_branch=else_g))
    m.graph.output.append(info("if_out"))
    return m


def test_a_branch_holding_the_names_our_passes_invent():
    """The demo encoder at O3 with a branch that already defines every value name the
    optimization invents: the main graph's new ``val_N`` took the branch's names, and the checker
    refused the result (internal error, "used as output names multiple times")."""
    model = build_demo_model(layers=1)
    # the onnx target: at ort the attention lowering names every value it makes (86b3c12), no val_N
    invented = sorted(_names(onnx_fuse.optimize(model, level=3, target="onnx").to_proto().graph)[0]
                      - _names(model.graph)[0])
    assert any(n.startswith("val_") for n in invented), invented
    taken = _with_branch_taking(model, invented)
    result = onnx_fuse.optimize(taken, level=3, target="onnx", verify=True)
    assert result.report.verify["passed"], result.report.verify_failure
    onnx.checker.check_model(result.to_proto(), full_check=True)


def _ir_model(body_name: str, sibling_name: str) -> ir.Model:
    x = helper.make_tensor_value_info("x", TP.FLOAT, [2])
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], [body_name])], "then", [],
                               [helper.make_tensor_value_info(body_name, TP.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], [sibling_name])], "else", [],
                               [helper.make_tensor_value_info(sibling_name, TP.FLOAT, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "g", [x, helper.make_tensor_value_info("c", TP.BOOL, [])],
                          [helper.make_tensor_value_info("a", TP.FLOAT, [2]),
                           helper.make_tensor_value_info("y", TP.FLOAT, [2])])
    return ir.serde.deserialize_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


def test_the_body_value_is_renamed_and_siblings_may_share():
    model = _ir_model("a", "b")   # the then-branch defines the main graph's "a"
    assert separate_scoped_names(model) == 1
    then_out = model.graph.node(1).attributes["then_branch"].value.outputs[0]
    assert then_out.name == "a__1" and model.graph.outputs[0].name == "a"
    onnx.checker.check_model(ir.to_proto(model), full_check=True)
    siblings = _ir_model("s", "s")   # two branches of one If: not enclosing scopes
    assert separate_scoped_names(siblings) == 0


def test_a_body_initializer_taking_an_outer_name():
    """Renaming an initializer re-keys graph.initializers: iterating it while renaming raised
    'dictionary keys changed during iteration' (fuzz seed 269904747, O3 / O4 every target)."""
    model = _ir_model("t_out", "e_out")
    body = model.graph.node(1).attributes["then_branch"].value
    w = ir.Value(name="a", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]),
                 const_value=ir.tensor(np.ones(2, np.float32), name="a"))
    body.register_initializer(w)
    body.node(0).replace_input_with(0, w)
    assert separate_scoped_names(model) == 1
    assert list(body.initializers) == ["a__1"] and body.node(0).inputs[0] is w
