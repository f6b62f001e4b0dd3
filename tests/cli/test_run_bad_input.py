"""``onnx-fuse run`` on a model that fails on its inputs: one line, exit 2, no ORT log above it
(it was "internal error: Fail: [ONNXRuntimeError] ..." under four lines of ORT's own log)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper


def test_a_model_that_fails_on_the_random_inputs_is_one_line(tmp_path):
    v = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                              [v("x", TP.FLOAT, ["N", 4])], [v("y", TP.FLOAT, [3, 5])],
                              [numpy_helper.from_array(np.array([3, 5], np.int64), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "m.onnx")
    for extra in ([], ["--compare"]):
        proc = subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", "run", str(tmp_path / "m.onnx"),
                               *extra], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ONNX Runtime fails to run the model"), \
            proc.stderr
