"""Peak memory stays bounded by the folding cap plus one weight, whatever the weights' layout.

Each case runs in a child process that reports its own peak RSS (VmHWM). The multi-GB weights
live in sparse files, so they cost no disk and reading them costs no time; what is measured is
whether anything copies or expands them: shape inference's data propagation used to turn a 1-D
weight into a list of dims (a 100 MB one took 5.2 GB), and saving serialized the whole model in
memory (a 470 MB model with its weights inside peaked at 1.9 GB).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GiB = 1 << 30
MiB = 1 << 20

_BUILD_SPARSE = '''
import onnx
from onnx import TensorProto as TP, helper

def external(name, dims, offset, nbytes, location="weights.bin"):
    t = TP(name=name, data_type=TP.FLOAT, dims=dims)
    t.data_location = TP.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
        t.external_data.add(key=k, value=v)
    return t

n1 = 600_000_000                 # 1-D: 2.4 GB
rows, cols = 500_000, 1024       # 2-D: 2.05 GB (an embedding table)
with open(folder + "/weights.bin", "wb") as f:
    f.truncate(n1 * 4 + rows * cols * 4)
w1 = external("bias", [n1], 0, n1 * 4)
w2 = external("table", [rows, cols], n1 * 4, rows * cols * 4)
nodes = [
    helper.make_node("Add", ["x", "bias"], ["y"]),
    helper.make_node("Identity", ["table"], ["table_i"]),   # cleanup removes it
    helper.make_node("Gather", ["table_i", "ids"], ["emb"]),
    helper.make_node("Transpose", ["table"], ["table_t"], perm=[1, 0]),  # over the folding cap
    helper.make_node("Shape", ["emb"], ["eshape"]),
    helper.make_node("Reshape", ["emb", "eshape"], ["emb2"]),
]
g = helper.make_graph(nodes, "big",
    [helper.make_tensor_value_info("x", TP.FLOAT, [n1]),
     helper.make_tensor_value_info("ids", TP.INT64, ["B", "S"])],
    [helper.make_tensor_value_info("y", TP.FLOAT, [n1]),
     helper.make_tensor_value_info("emb2", TP.FLOAT, ["B", "S", cols]),
     helper.make_tensor_value_info("table_t", TP.FLOAT, [cols, rows])],
    [w1, w2])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
m.ir_version = 9
onnx.save(m, folder + "/big.onnx")
'''

_BUILD_EMBEDDED = '''
import numpy as np, onnx
from onnx import TensorProto as TP, helper, numpy_helper

d, layers = 1024, 8              # 16 weights of 16 MiB: 256 MiB inside the .onnx
inits, nodes, x = [], [], "x"
for i in range(layers):
    for name, shape in ((f"W{i}", (d, 4 * d)), (f"V{i}", (4 * d, d))):
        inits.append(numpy_helper.from_array(np.full(shape, 0.001 * (i + 1), np.float32), name))
    nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}"]),
              helper.make_node("Relu", [f"h{i}"], [f"r{i}"]),
              helper.make_node("MatMul", [f"r{i}", f"V{i}"], [f"y{i}"])]
    x = f"y{i}"
g = helper.make_graph(nodes, "dec", [helper.make_tensor_value_info("x", TP.FLOAT, ["B", d])],
                      [helper.make_tensor_value_info(x, TP.FLOAT, ["B", d])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
m.ir_version = 9
onnx.save(m, folder + "/emb.onnx")
del m, g, inits
'''

# Peak RSS is VmHWM of the child's own image: ru_maxrss would carry over the peak of the process
# image before exec (a forked copy of a large pytest process).
_MEASURE = '''
import json, onnx_fuse

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

base = hwm()
result = onnx_fuse.optimize(src, level=3)
after_optimize = hwm()
for path, external in saves:
    result.save(path, external_data=external)
peak = hwm()
print(json.dumps({"import": base, "optimize": after_optimize, "peak": peak,
                  "ops": result.report.ops_after}))
'''


def _child(build: str, folder: Path, src: str, saves: list) -> dict:
    """Build the model in one child (its memory is not ours), measure in a fresh one."""
    prelude = f"folder = {str(folder)!r}\n"
    subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(build)], check=True, timeout=300)
    code = prelude + f"src = {str(folder / src)!r}\nsaves = {saves!r}\n" + textwrap.dedent(_MEASURE)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_o3_on_multi_gb_external_1d_and_2d_weights_stays_under_1_gib(tmp_path):
    got = _child(_BUILD_SPARSE, tmp_path, "big.onnx", [])
    assert got["peak"] < 1 * GiB, f"peak RSS {got['peak'] / MiB:.0f} MiB"
    assert "Identity" not in got["ops"] and got["ops"].get("Transpose") == 1  # cleaned, not folded


@pytest.mark.slow
def test_weights_inside_the_onnx_are_never_all_in_memory(tmp_path):
    """256 MiB of weights inside the .onnx: load, O3, save embedded and external."""
    saves = [[str(tmp_path / "out_embedded.onnx"), False], [str(tmp_path / "out_ext.onnx"), True]]
    got = _child(_BUILD_EMBEDDED, tmp_path, "emb.onnx", saves)
    # Less than the weights themselves above the bare interpreter: onnx, onnx-ir and the passes
    # take about 90 MiB, one 16 MiB weight at a time the rest (measured 138 MiB in all; before:
    # 1125 MiB, the file's bytes, the parsed proto and the serialized copy at once).
    budget = got["import"] + 256 * MiB
    assert got["peak"] < budget, (f"peak RSS {got['peak'] / MiB:.0f} MiB, imports "
                                  f"{got['import'] / MiB:.0f} MiB")
    assert (tmp_path / "out_embedded.onnx").stat().st_size > 256 * MiB
    assert (tmp_path / "out_ext.onnx.data").stat().st_size >= 256 * MiB
