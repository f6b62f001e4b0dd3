"""``onnx-fuse optimize`` and ``onnx-fuse demo`` end to end: exit codes, output, report, verify."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.cli.main import main


def write_model(path: Path) -> Path:
    """x -> Identity -> Add(folded constant) -> Reshape(no-op) -> y: O1 has work to do."""
    a = numpy_helper.from_array(np.arange(4, dtype=np.float32), "a")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    s = numpy_helper.from_array(np.array([0, 4], np.int64), "s")
    nodes = [helper.make_node("Identity", ["x"], ["xi"]),
             helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Mul", ["xi", "c"], ["m"]),
             helper.make_node("Reshape", ["m", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [a, b, s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_subprocess_optimize_writes_output_report_and_verifies(tmp_path):
    src = write_model(tmp_path / "m.onnx")
    before = src.read_bytes()
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    proc = cli("optimize", str(src), "-o", str(out), "-O", "1", "--verify", "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert src.read_bytes() == before
    optimized = onnx.load(out)
    onnx.checker.check_model(optimized, full_check=True)
    assert [n.op_type for n in optimized.graph.node] == ["Mul"]
    data = json.loads(report.read_text())
    assert data["level"] == 1 and data["status"] == "PASSED" and data["verify"]["passed"]
    assert data["nodes_before"] == 4 and data["nodes_after"] == 1
    assert "PASSED" in proc.stdout


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"\x08\x07garbage\xff\xff", "not"),
    (None, "no such file"),
])
def test_subprocess_bad_input_is_one_line_exit_2(tmp_path, content, message):
    src = tmp_path / "bad.onnx"
    if content is not None:
        src.write_bytes(content)
    out = tmp_path / "o.onnx"
    proc = cli("optimize", str(src), "-o", str(out))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not out.exists()


def test_main_quiet_prints_only_verdict(tmp_path, capsys):
    src = write_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-O", "1", "-q", "--verify"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "PASSED"
    assert out.exists()


def test_main_folder_as_input_and_overwrite_refused(tmp_path, capsys):
    assert main(["optimize", str(tmp_path), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "not a file" in capsys.readouterr().err
    src = write_model(tmp_path / "m.onnx")
    before = src.read_bytes()
    assert main(["optimize", str(src), "-o", str(src), "-O", "1", "-q"]) == 2
    err = capsys.readouterr().err
    assert "overwrite" in err and len(err.strip().splitlines()) == 1
    assert src.read_bytes() == before


def test_main_bad_level_is_argparse_error(tmp_path):
    src = write_model(tmp_path / "m.onnx")
    with pytest.raises(SystemExit) as e:
        main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "-O", "9"])
    assert e.value.code == 2


def test_subprocess_demo_o1(tmp_path):
    out = tmp_path / "demo.onnx"
    proc = cli("demo", "-O", "1", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "PASSED" in proc.stdout
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert "Identity" not in ops and "Concat" not in ops and ops.count("Cast") == 1


@pytest.mark.parametrize("flag", ["-o", "--report"])
def test_unwritable_output_fails_before_any_work(tmp_path, capsys, flag):
    """The output path is checked first: with a corrupt input AND a missing output folder, the
    error names the output, so nobody waits through an optimization to learn it."""
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    args = ["optimize", str(bad), "-o", str(tmp_path / "out.onnx")]
    if flag == "-o":
        args[3] = str(tmp_path / "missing" / "out.onnx")
    else:
        args += ["--report", str(tmp_path / "missing" / "r.json")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "output folder" in err[0] and "missing" in err[0]
