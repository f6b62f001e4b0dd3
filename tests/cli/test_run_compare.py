"""``onnx-fuse run MODEL --backend ort --compare --model REF``: REF is the reference."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from onnx_fuse.cli.main import main


def unary_model(path: Path, op: str) -> str:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return str(path)


def test_compare_uses_the_model_given_as_reference(tmp_path, capsys):
    relu = unary_model(tmp_path / "relu.onnx", "Relu")
    sigmoid = unary_model(tmp_path / "sigmoid.onnx", "Sigmoid")
    assert main(["run", relu, "--compare", "--model", sigmoid]) == 1
    out = capsys.readouterr().out
    assert "sigmoid.onnx" in out and "FAILED" in out


def test_compare_against_an_equivalent_reference_passes(tmp_path, capsys):
    relu = unary_model(tmp_path / "relu.onnx", "Relu")
    optimized = tmp_path / "relu.opt.onnx"
    assert main(["optimize", relu, "-o", str(optimized), "-O", "1", "-q"]) == 0
    assert main(["run", str(optimized), "--compare", "--model", relu]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_compare_without_model_uses_the_model_itself(tmp_path, capsys):
    relu = unary_model(tmp_path / "relu.onnx", "Relu")
    assert main(["run", relu, "--compare"]) == 0
    assert "graph optimizations off" in capsys.readouterr().out
