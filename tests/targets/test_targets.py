"""optimizer/targets: per-target facts and passes (UpgradeOpsetPass, PluginAttributesPass)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh

from onnx_fuse.targets import onnx as onnx_target
from onnx_fuse.targets import ort as ort_target
from onnx_fuse.targets import trt as trt_target
from onnx_fuse.verify import make_session

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def _tiny(opset: int) -> ir.Model:
    nodes = [oh.make_node("ReduceMean", ["x"], ["m"], axes=[-1], keepdims=1) if opset < 18 else
             oh.make_node("ReduceMean", ["x", "ax"], ["m"], keepdims=1),
             oh.make_node("Sub", ["x", "m"], ["y"])]
    inits = [] if opset < 18 else [onnx.numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])], inits)
    return ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)]))


@pytest.mark.parametrize("opset", [13, 17, 20])
def test_upgrade_opset_changes_and_keeps_semantics(opset):
    model = _tiny(opset)
    before = ir.to_proto(model)
    p = onnx_target.UpgradeOpsetPass()
    assert p(model).modified is True
    assert model.opset_imports[""] == 23
    after = ir.to_proto(model)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(make_session(before).run(None, {"x": x})[0],
                                  make_session(after).run(None, {"x": x})[0])
    # ... and reports no change the second time
    assert onnx_target.UpgradeOpsetPass()(model).modified is False


def test_upgrade_opset_keeps_the_exporters_shapes():
    """Exact head counts from the dynamo exporter survive the conversion (no unk__ dims)."""
    model = ir.load(str(MODELS / "llama_sdpa_dynamo.onnx"))
    shapes = {v.name: str(v.shape) for n in model.graph for v in n.outputs if v.shape is not None}
    onnx_target.UpgradeOpsetPass()(model)
    after = {v.name: str(v.shape) for n in model.graph for v in n.outputs if v.shape is not None}
    same = [k for k in shapes if after.get(k) == shapes[k]]
    assert len(same) == len(shapes), set(shapes) - set(same)
    assert not any("unk__" in s for s in after.values())


def test_upgrade_opset_refuses_what_it_cannot_convert():
    g = oh.make_graph([oh.make_node("Foo", ["x"], ["y"], domain="")], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    proto = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    model = ir.serde.deserialize_model(proto)
    p = onnx_target.UpgradeOpsetPass()
    assert p(model).modified is False
    assert model.opset_imports[""] == 17
    assert "kept opset 17" in p.stats_reason


def test_targets_expose_the_same_small_interface():
    for t in (onnx_target, ort_target, trt_target):
        assert t.DOMAINS[""] == 23
        assert t.pre_fusion_passes(2) == [] and t.pre_fusion_passes(1) == []  # opset: on demand
        assert t.post_fusion_passes(1) == []
    assert ort_target.DOMAINS["com.microsoft"] == 1 and trt_target.DOMAINS["onnx_fuse"] == 1


@pytest.mark.parametrize("model_name, target, opset", [
    ("bert_sdpa_dynamo", "ort", 20),        # contrib ops only: the model keeps its opset
    ("gpt2_eager_torchscript", "ort", 17),
    ("bert_sdpa_dynamo", "onnx", 23),       # Attention-23 fired: raised
    ("llama_sdpa_dynamo", "ort", 23),       # RMSNormalization-23 fired: raised
])
def test_opset_is_raised_only_when_an_emitted_op_needs_it(model_name, target, opset):
    from onnx_fuse import optimize

    result = optimize(str(MODELS / f"{model_name}.onnx"), level=3, target=target)
    assert onnx_target.default_opset(result.model) == opset
    notes = [w for w in result.report.warnings if "->23 for" in w]
    assert bool(notes) == (opset == 23), result.report.warnings
    if opset != 23:
        assert result.report.rule_fires  # the rules did run on the model at its own opset


def test_o2_keeps_the_opset_when_nothing_needs_23():
    """O2 on an opset-13 model with nothing to fuse: no conversion, ops keep their versions."""
    from onnx_fuse import optimize

    model = _tiny(13)
    result = optimize(model, level=2, target="ort")
    assert onnx_target.default_opset(result.model) == 13
    assert [n.op_type for n in result.model.graph] == ["ReduceMean", "Sub"]


def test_trt_plugin_attributes_are_filled_once():
    node = oh.make_node("FusedAttention", ["q", "k", "v"], ["y"], domain="onnx_fuse", num_heads=2)
    vis = [oh.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 8]) for n in "qkv"]
    g = oh.make_graph([node], "g", vis, [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8])])
    model = ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 23)]))
    p = trt_target.PluginAttributesPass()
    assert p(model).modified is True
    n = next(iter(model.graph))
    assert n.attributes["plugin_version"].value == "1"
    assert n.attributes["plugin_namespace"].value == "onnx_fuse"
    assert model.opset_imports["onnx_fuse"] == 1
    assert trt_target.PluginAttributesPass()(model).modified is False


def test_upgrade_opset_accepts_unknown_output_dims_the_converter_names():
    """An output declared with unknown, unnamed dims: the converter's inference names them
    (unk__N), which is no interface change. Refusing it left a canonical Attention that only the
    opset-23 lowering takes unlowered at --target onnx/trt (fuzzer, 1,962 crashes in 18,649 graphs)."""
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Relu", ["h"], ["y"])]
    w = onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 4])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, 3])], [w])
    model = ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)]))
    declared = ir.to_proto(model).graph.output[0].type.SerializeToString()
    p = onnx_target.UpgradeOpsetPass()
    assert p(model).modified is True, p.stats_reason
    assert model.opset_imports[""] == 23
    assert ir.to_proto(model).graph.output[0].type.SerializeToString() == declared  # as declared
    # a dim the model names or sizes must still not change
    before = oh.make_tensor_type_proto(TensorProto.FLOAT, ["b", 3])
    assert onnx_target._same_type(before, oh.make_tensor_type_proto(TensorProto.FLOAT, ["b", 3]))
    assert not onnx_target._same_type(before, oh.make_tensor_type_proto(TensorProto.FLOAT, ["c", 3]))
    assert not onnx_target._same_type(before, oh.make_tensor_type_proto(TensorProto.FLOAT, ["b", 3, 1]))
    assert onnx_target._same_type(oh.make_tensor_type_proto(TensorProto.FLOAT, [None, 3]),
                                  oh.make_tensor_type_proto(TensorProto.FLOAT, ["unk__0", 3]))


def test_upgrade_opset_refuses_to_change_the_interface():
    """Scan-8 -> Scan-9 drops the batch axis of the scan inputs: the model's I/O would change."""
    import warnings

    from onnx.backend.test import loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tc = next(t for t in loader.load_model_tests(kind="node") if t.name == "test_scan_sum")
    model = ir.serde.deserialize_model(tc.model)
    p = onnx_target.UpgradeOpsetPass()
    assert p(model).modified is False
    assert model.opset_imports[""] == 8
    assert "interface" in p.stats_reason


def test_plugin_ids_agree_everywhere():
    """The YAML rule packs and plugin contracts write the plugin ids as data: they must say what
    onnx_fuse.plugin_ids says (the Python side imports it)."""
    import re

    import yaml

    from onnx_fuse import plugin_ids
    from onnx_fuse.plugins import fused_attention_plugin, paged_attention_plugin

    root = Path(__file__).resolve().parents[2]
    for name, module in (("fused_attention", fused_attention_plugin), ("paged_attention", paged_attention_plugin)):
        contract = yaml.safe_load((root / "plugins" / f"{name}.yaml").read_text())
        op = contract["op"]
        assert contract["domain"] == plugin_ids.PLUGIN_DOMAIN
        plugin = contract["plugin"]
        assert (plugin["name"], plugin["version"], plugin["namespace"]) == (
            op, plugin_ids.PLUGIN_VERSIONS[op], plugin_ids.PLUGIN_NAMESPACE)
        attrs = contract["attributes"]
        assert attrs["plugin_version"]["default"] == plugin_ids.PLUGIN_VERSIONS[op]
        assert attrs["plugin_namespace"]["default"] == plugin_ids.PLUGIN_NAMESPACE
        assert module.PLUGIN_ID == f"{plugin_ids.PLUGIN_NAMESPACE}::{op}"
    seen = 0
    call = re.compile(rf"{plugin_ids.PLUGIN_DOMAIN}::(\w+)\(([^)]*)\)")
    for path in (root / "rules").rglob("*.yaml"):
        text = path.read_text()
        for version in re.findall(rf"domains:\s*{{[^}}]*{plugin_ids.PLUGIN_DOMAIN}:\s*(\d+)", text):
            assert int(version) == plugin_ids.PLUGIN_DOMAIN_VERSION, path
        for op, args in call.findall(text):
            for key, want in (("plugin_version", plugin_ids.PLUGIN_VERSIONS.get(op)),
                              ("plugin_namespace", plugin_ids.PLUGIN_NAMESPACE)):
                got = re.search(rf'{key}="([^"]*)"', args)
                if got:
                    seen += 1
                    assert got.group(1) == want, (path.name, op, key)
    assert seen >= 2  # the FusedAttention lowerings write both attributes


def test_one_target_list():
    """levels.TARGETS is the list: the rule engine re-exports it and every CLI --target uses it."""
    import argparse

    from onnx_fuse import levels, rewrite
    from onnx_fuse.cli.main import _parser

    assert rewrite.TARGETS is levels.TARGETS
    found = 0
    stack = [_parser()]
    while stack:
        parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif "--target" in action.option_strings:
                assert tuple(action.choices) == levels.TARGETS
                found += 1
    assert found >= 4  # optimize, demo, rules list, rules explain


def test_levels_docstring_states_the_rule_order():
    """levels.py says attention recognition runs before the norm rules, in one stage: true."""
    from onnx_fuse import levels
    from onnx_fuse.rewrite import load_rule_set

    assert "attention recognition (100) ahead of most norm rules (layer-norm 60)" in " ".join(
        levels.__doc__.split())
    ordered = [r for r in load_rule_set(target="ort", max_level=3).ordered() if r.stage == "fuse"]
    names = [r.name for r in ordered]
    assert names.index("attention") < names.index("layer-norm")
    by_name = {r.name: r for r in ordered}
    assert (by_name["attention"].priority, by_name["layer-norm"].priority) == (100, 60)
