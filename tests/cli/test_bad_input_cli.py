"""Bad input through the CLI and the API: one line naming the problem, exit 2, nothing written.

Covers hostile rule YAML (Python tags, unknown tags, deep nesting), non-UTF-8 names, output
names longer than the file system allows, unknown ``--disable`` names at every level, and
``rules=``/``disable=`` given as one string.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.cli.main import main
from onnx_fuse.errors import UserError

from .test_cli import write_model


def one_error_line(capsys, expect: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "internal error" not in captured.err and "Traceback" not in captured.err
    assert expect in lines[0], lines[0]
    return lines[0]


HOSTILE_YAML = {
    "python-apply": ("rules:\n  - !!python/object/apply:os.system\n    - echo owned\n",
                     "'!!python/object/apply:os.system'"),
    "python-scalar": ("rules:\n  - name: !!python/name:os.system x\n", "'!!python/name:os.system'"),
    "custom-tag": ("rules:\n  - name: !custom x\n", "'!custom'"),
    "tagged-mapping": ("rules:\n  - !!omap\n    - name: x\n", "'!!omap'"),
    "nested-500": ("rules:\n  - " + "[" * 500 + "]" * 500 + "\n", "nested"),
    "nested-blocks": ("rules:\n" + "".join("  " * i + "- a:\n" for i in range(1, 300)), "nested"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_hostile_rule_yaml_is_refused_by_name(tmp_path, capsys, case):
    text, expect = HOSTILE_YAML[case]
    rules = tmp_path / "r.yaml"
    rules.write_text(text)
    src = write_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-O", "2", "--rules", str(rules), "-q"]) == 2
    one_error_line(capsys, expect)
    assert not out.exists()
    assert main(["rules", "check", str(rules)]) == 2
    err = capsys.readouterr().err
    assert expect in err and "internal error" not in err


def non_utf8_models(tmp_path: Path) -> dict[str, Path]:
    nodes = [helper.make_node("Relu", ["x"], ["zz"]), helper.make_node("Relu", ["zz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    raw = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    paths = {}
    for label, (old, new) in {"value-name": (b"zz", b"z\xff"), "op-type": (b"Relu", b"R\xfflu"),
                              "graph-name": (b"\x12\x01g", b"\x12\x01\xfe")}.items():
        assert raw.count(old) >= 1
        paths[label] = tmp_path / f"{label}.onnx"
        paths[label].write_bytes(raw.replace(old, new))
    return paths


def test_non_utf8_names_are_bad_input_on_cli_and_api(tmp_path, capsys):
    for label, path in non_utf8_models(tmp_path).items():
        out = tmp_path / f"{label}.out.onnx"
        assert main(["optimize", str(path), "-o", str(out), "-O", "1", "-q"]) == 2, label
        one_error_line(capsys, "not valid UTF-8")
        assert not out.exists()
        data = path.read_bytes()
        for source in (str(path), data, onnx.ModelProto.FromString(data)):
            with pytest.raises(UserError, match="not valid UTF-8"):
                onnx_fuse.optimize(source, level=1)


@pytest.mark.parametrize("flag", ["-o", "--report"])
def test_output_name_over_255_bytes_is_bad_input(tmp_path, capsys, flag):
    src = write_model(tmp_path / "m.onnx")
    long_name = str(tmp_path / ("a" * 300))
    args = ["optimize", str(src), "-o", long_name + ".onnx" if flag == "-o" else str(tmp_path / "o.onnx"),
            "-O", "1", "-q"]
    if flag == "--report":
        args += ["--report", long_name + ".json"]
    assert main(args) == 2
    one_error_line(capsys, "too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_unknown_disable_name_is_refused_at_every_level(tmp_path, capsys, level):
    src = write_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-O", str(level), "--disable", "gelu-erff",
                 "-q"]) == 2
    one_error_line(capsys, "'gelu-erff'")
    assert not out.exists()
    with pytest.raises(UserError, match="gelu-erff"):
        onnx_fuse.optimize(str(src), level=level, disable=["gelu-erff"])


def test_disable_accepts_rules_of_other_targets_and_idle_passes(tmp_path):
    src = write_model(tmp_path / "m.onnx")
    onnx_fuse.optimize(str(src), level=3, target="onnx", disable=["gelu-ort"])
    onnx_fuse.optimize(str(src), level=3, target="trt", disable=["trt-paged-kv"])  # an O4 pass


def test_rules_and_disable_take_a_single_string(tmp_path):
    from onnx_fuse.demo_model import build_demo_model

    demo = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), demo)
    rules = tmp_path / "mine.yaml"
    rules.write_text("rules:\n  - name: my-layer-norm-off\n    doc: Relu(Relu(x)) -> Relu(x)\n"
                     "    targets: [ort]\n    match: |\n      a = Relu(x)\n      y = Relu(a)\n"
                     "    rewrite: |\n      y = Relu(x)\n")
    fires = onnx_fuse.optimize(str(demo), level=3).report.rule_fires
    assert fires.get("layer-norm") == 4
    # one name, not its characters: the rule is disabled and nothing else is
    without = onnx_fuse.optimize(str(demo), level=3, disable="layer-norm").report.rule_fires
    assert "layer-norm" not in without and without.get("attention-packed-ort") == fires["attention-packed-ort"]
    # one rule file, not one file per character
    onnx_fuse.optimize(str(demo), level=2, rules=str(rules))
    onnx_fuse.optimize(str(demo), level=2, rules=rules)
    with pytest.raises(UserError, match="rules must"):
        onnx_fuse.optimize(str(demo), level=2, rules=3)
