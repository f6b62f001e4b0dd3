"""tools/holdout_specs.py HOLDOUT31 and export_corpus.py --holdout 43 (thirty-first sweep: hold-outs 38-41's
families in the rare export styles): every spec is its earlier set's spec with other styles, the plan asks only for
the styles the corpus has one or two files of, cache styles only of decoders (headless ones included), and the bfloat16
plan (HALF31) names its own styles; the two export_corpus changes the set needed. No torch or transformers needed."""

from __future__ import annotations

import contextlib
import io
import types

import pytest

from tests.tool_modules import load_tool

RARE = {"converted_half", "latest_opset", "kv_latest_opset", "noopt", "torchscript_kv"}


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep31")


def test_specs_are_the_earlier_sets_specs_in_other_styles():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[43]
    earlier = {a: s for n in (38, 39, 40, 41) for a, s in ec.HOLDOUT_SETS[n].items()}
    assert set(hs) <= set(earlier)
    for arch, spec in hs.items():
        assert {k: v for k, v in spec.items() if k != "styles"} == \
            {k: v for k, v in earlier[arch].items() if k != "styles"}, arch
        assert not set(spec["styles"]) & set(earlier[arch]["styles"]), arch  # styles the earlier set did not make
    families = {arch for arch in hs if hs[arch]["styles"]}
    assert len(families) >= 8 and {n for n in (38, 39, 40, 41) if families & set(ec.HOLDOUT_SETS[n])} == \
        {38, 39, 40, 41}


def test_plan_is_rare_styles_and_caches_of_decoders(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[43]
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(hs), None, 43))
    assert len(todo) == 24 and {w for _, _, w in todo} == {"trained"}
    assert {s for _, s, _ in todo} == RARE
    for arch, style, _ in todo:
        if style in ec.KV_STYLES:  # a decoder, or a headless one (a causal *Model class: _first_output)
            spec = ec.SPECS[arch]
            assert spec["kind"] == "decoder" or (spec["kind"] == "encoder" and "causal" in spec["features"]), arch


def test_bfloat16_plan_names_its_own_styles(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", dict(ec.SPECS))  # main adds the set's specs to SPECS: keep the shared dict clean
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ec.main(["--holdout", "43", "--dtype", "bfloat16", "--list"]) == 0
    names = out.getvalue().split()
    assert {n.split("__")[0] for n in names} == set(ec.HALF31) and len(names) == 3
    assert all(n.endswith("__dyn_mask__trainedbf16.onnx") for n in names)
    # a plain set of names (HALF29) still takes the spec's styles
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ec.main(["--holdout", "41", "--dtype", "float16", "--list"]) == 0
    assert len(out.getvalue().split()) == 8


def test_cache_wrappers_take_a_headless_decoders_hidden_state():
    ec = _export_corpus()
    assert ec._first_output(types.SimpleNamespace(logits="l", last_hidden_state="h")) == "l"
    assert ec._first_output(types.SimpleNamespace(last_hidden_state="h")) == "h"
    assert ec._first_output(types.SimpleNamespace(logits=None, last_hidden_state="h")) == "h"


def test_checker_sees_the_fp16_converters_input_casts_in_order():
    """convert_half's converter appends the Cast of a float graph input after its users; the file keeps that order
    (ONNX Runtime takes it), make_entry checks a sorted copy."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnx_ir")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x16"], ["y16"]), helper.make_node("Cast", ["y16"], ["y"], to=1),
             helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)]  # the converter's order
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(proto)
    ec = _export_corpus()
    onnx.checker.check_model(ec._in_order(proto))
    assert [n.op_type for n in proto.graph.node] == ["Relu", "Cast", "Cast"]  # the model itself is left as written
