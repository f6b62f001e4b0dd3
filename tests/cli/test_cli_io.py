"""Unix-correct CLI I/O: a reader that leaves early, piped tables, errors on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.cli.main import main

from .test_cli import write_model


def closed_pipe_run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI with stdout on a pipe whose reader is already gone, as after `| head -1`
    once head has exited: every write to stdout fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=180)
    finally:
        os.close(write_end)


def test_closed_stdout_still_writes_the_model_and_exits_quietly(tmp_path):
    src = write_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    proc = closed_pipe_run("optimize", str(src), "-o", str(out), "-O", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Mul"]


def test_closed_stdout_check_trt_keeps_its_verdict(tmp_path):
    src = write_model(tmp_path / "m.onnx")
    proc = closed_pipe_run("check-trt", str(src))
    assert proc.returncode == 0 and proc.stderr == ""


def test_closed_stdout_rules_list_is_silent():
    proc = closed_pipe_run("rules", "list")
    assert proc.returncode == 0 and proc.stderr == ""


def long_name_model(path: Path, name: str) -> Path:
    """A graph whose output (and op chain) carries a long name: tables must not cut it."""
    nodes = [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Relu", ["t"], [name])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_piped_report_is_plain_full_width_lines(tmp_path):
    name = "a_very_long_output_name_" + "x" * 120
    src = long_name_model(tmp_path / "m.onnx", name)
    proc = subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", "optimize", str(src), "-o",
                           str(tmp_path / "o.onnx"), "-O", "1", "--verify"],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # Every pass name and the verified output appear whole on one line, without box drawing.
    assert any(line.startswith("constant-folding ") for line in lines)
    assert any(line.startswith(name + " ") for line in lines), proc.stdout
    assert not any(ch in proc.stdout for ch in "│┃━─…")


def test_rules_check_errors_go_to_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: broken\n  doc: x\n  match: |\n    y = Relu(\n  rewrite: |\n    y = Relu(x)\n"
                   "  targets: [ort]\n")
    assert main(["rules", "check", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(bad) in captured.err and "error(s)" in captured.err


# Drops the cap of Min(Relu(x), c): right for the small random inputs the engine's own numeric
# check draws, wrong for x above the cap, which the verify inputs below use.
WRONG_RULE = """\
rules:
  - name: drop-the-cap
    doc: Min(Relu(x), c) -> Relu(x), deliberately wrong above c so that --verify fails
    targets: [ort]
    match: |
      a = Relu(x)
      y = Min(a, c)
    where:
      c: {const: true}
    rewrite: |
      y = Relu(x)
"""


def test_failed_verification_message_goes_to_stderr(tmp_path, capsys):
    cap = numpy_helper.from_array(np.array(1000.0, np.float32), "cap")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Min", ["a", "cap"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [cap])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), src)
    feeds = tmp_path / "x.npz"
    np.savez(feeds, x=np.full((2, 3), 5000.0, np.float32))
    rules = tmp_path / "wrong.yaml"
    rules.write_text(WRONG_RULE)
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-O", "2", "--rules", str(rules),
                 "--verify", "--inputs", str(feeds), "-q"]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == "FAILED"
    assert "verification failed" in captured.err
    assert not out.exists()


def test_demo_without_output_says_nothing_was_kept(capsys):
    assert main(["demo", "-O", "1"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "round trip" in line)
    assert "temporary folder" in line and "nothing kept" in line and "-o FILE" in line
    assert "saved and reloaded" not in out


def test_piped_check_trt_keeps_long_op_names_on_one_line(tmp_path):
    op = "AnUnknownOperatorWithAVeryLongNameThatWouldBeSplitInATable" + "X" * 40
    nodes = [helper.make_node(op, ["x"], ["y"], domain="mycorp")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("mycorp", 1)])
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    proc = subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", "check-trt", str(src)],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 1, proc.stderr
    assert any(f"mycorp::{op}" in line.split() for line in proc.stdout.splitlines()), proc.stdout
    assert not any(ch in proc.stdout for ch in "│┃━─…")
