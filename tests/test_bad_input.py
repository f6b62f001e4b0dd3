"""The bad-input corpus: every hostile or broken input, on the three surfaces.

Surfaces: the CLI (``onnx-fuse optimize`` in a subprocess with a timeout), the API
(``onnx_fuse.optimize``) and ``onnx_fuse.InferenceSession``. For every case:

- CLI: exit 2, exactly one line on stderr naming the problem, no traceback;
- API: a UserError (subclass) with a one-line message naming the problem;
- InferenceSession: unsafe files (external data escaping the folder, FIFOs, devices) raise our
  UnsafeModelError; anything else raises exactly what ``onnxruntime.InferenceSession`` raises
  (the drop-in contract), and never an internal error of ours;
- nothing is written (the case folder lists the same files, the output does not exist, the
  session cache holds no entry), the inputs are byte-identical, nothing hangs.

A case is a folder built by a function: the model (and its weight files, rule files...) plus a
``secret`` file outside the model's folder for the external-data attacks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx_fuse
from onnx_fuse.errors import UserError
from onnx_fuse.session import InferenceSession, UnsafeModelError

SECRET = b"the contents of /etc/shadow, or so " * 512  # longer than the weight it poses as
CPU = ["CPUExecutionProvider"]
V = helper.make_tensor_value_info


# --- model builders --------------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset=18, ir_version=9, extra_opsets=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = ir_version
    return m


def good_model(n: int = 64) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.linspace(-1, 1, n * n, dtype=np.float32).reshape(n, n), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    return _model(nodes, [V("x", TP.FLOAT, ["N", n])], [V("y", TP.FLOAT, ["N", n])], [w])


def _relu(x="x", y="y"):
    return helper.make_node("Relu", [x], [y])


def _write(folder: Path, model: onnx.ModelProto | bytes, name: str = "m.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return path


def _external(folder: Path, location: str, **entries: str) -> Path:
    """good_model with W external; ``location`` (and offset/length) rewritten to the attack."""
    model = good_model()
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, folder / "m.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.data", size_threshold=0)
    proto = onnx.load_model(folder / "m.onnx", load_external_data=False)
    for t in proto.graph.initializer:
        if t.data_location == TP.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            info["location"] = location
            info.update(entries)
            del t.external_data[:]
            for k, v in info.items():
                if v is not None:
                    t.external_data.add(key=k, value=v)
    return _write(folder, proto)


def _external_tensor(name: str, location: str, dims=(16,)) -> onnx.TensorProto:
    t = TP(name=name, data_type=TP.FLOAT, dims=list(dims))
    t.data_location = TP.EXTERNAL
    t.external_data.add(key="location", value=location)
    return t


# --- cases -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    name: str
    build: Callable[[Path], Path]      # builds the case under the folder, returns the model path
    expect: str                         # a word the one-line message must contain (lowercased)
    surfaces: tuple[str, ...] = ("api", "cli", "session")
    cli_args: tuple[str, ...] = ()      # extra CLI arguments ({case} is the case folder)
    api_kwargs: Callable[[Path], dict] | None = None
    output: str = "out.onnx"            # the -o / save() path, relative to the case folder
    xfail: dict[str, str] = dataclasses.field(default_factory=dict)
    attack: bool = False                # external data / special file: the session refuses it


def _in_model_dir(fn):
    """Build inside <case>/model, keeping <case>/secret outside it."""
    def build(case: Path) -> Path:
        (case / "secret").write_bytes(SECRET)
        return fn(case / "model", case)
    return build


def _symlinked_folder(model_dir: Path, case: Path) -> Path:
    outside = case / "outside"
    outside.mkdir()
    (outside / "w.data").write_bytes(SECRET)
    model_dir.mkdir()
    os.symlink(outside, model_dir / "sub")
    return _external(model_dir, "sub/w.data")


def _hardlink(model_dir: Path, case: Path) -> Path:
    model_dir.mkdir()
    os.link(case / "secret", model_dir / "hard.data")
    return _external(model_dir, "hard.data")


def _symlink(model_dir: Path, case: Path) -> Path:
    model_dir.mkdir()
    os.symlink(case / "secret", model_dir / "link.data")
    return _external(model_dir, "link.data")


def _fifo_data(model_dir: Path, case: Path) -> Path:
    model_dir.mkdir()
    os.mkfifo(model_dir / "pipe.data")
    return _external(model_dir, "pipe.data")


def _dir_data(model_dir: Path, case: Path) -> Path:
    path = _external(model_dir, "w.data")
    (model_dir / "w.data").unlink()
    (model_dir / "w.data").mkdir()
    return path


def _sparse_attack(model_dir: Path, case: Path) -> Path:
    model = good_model()
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(
        _external_tensor("sv", "../secret", (2,)), numpy_helper.from_array(np.array([0, 1], np.int64), "si"),
        [4]))
    return _write(model_dir, model)


def _constant_attack(model_dir: Path, case: Path) -> Path:
    const = helper.make_node("Constant", [], ["c"], value=_external_tensor("c", "../secret", (64,)))
    model = _model([const, helper.make_node("Add", ["x", "c"], ["y"])], [V("x", TP.FLOAT, [64])],
                   [V("y", TP.FLOAT, [64])])
    return _write(model_dir, model)


def _subgraph_attack(model_dir: Path, case: Path) -> Path:
    then_g = helper.make_graph([helper.make_node("Identity", ["t"], ["o"])], "then", [],
                               [V("o", TP.FLOAT, [16])], [_external_tensor("t", "../secret")])
    else_g = helper.make_graph([helper.make_node("Identity", ["e"], ["o2"])], "else", [],
                               [V("o2", TP.FLOAT, [16])],
                               [numpy_helper.from_array(np.zeros(16, np.float32), "e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return _write(model_dir, _model([node], [V("c", TP.BOOL, [])], [V("y", TP.FLOAT, [16])]))


def _function_attack(model_dir: Path, case: Path) -> Path:
    const = helper.make_node("Constant", [], ["c"], value=_external_tensor("c", "../secret", (16,)))
    fn = helper.make_function("custom", "AddSecret", ["a"], ["b"],
                              [const, helper.make_node("Add", ["a", "c"], ["b"])],
                              [helper.make_opsetid("", 18)])
    model = _model([helper.make_node("AddSecret", ["x"], ["y"], domain="custom")],
                   [V("x", TP.FLOAT, [16])], [V("y", TP.FLOAT, [16])],
                   extra_opsets=[helper.make_opsetid("custom", 1)])
    model.functions.append(fn)
    return _write(model_dir, model)


def _truncated_data_file(model_dir: Path, case: Path) -> Path:
    """The weights file cut short (a copy interrupted), with no `length` entry to say so."""
    path = _external(model_dir, "w.data")
    data = (model_dir / "w.data").read_bytes()
    (model_dir / "w.data").write_bytes(data[:100])
    return path


def _npz(text: bytes, name: str = "in.npz"):
    def build(case: Path) -> Path:
        case.mkdir(parents=True, exist_ok=True)
        (case / name).write_bytes(text)
        return _write(case, good_model())
    return build


def _truncated(case: Path) -> Path:
    data = good_model().SerializeToString()
    return _write(case, data[: len(data) * 2 // 3])


def _not_onnx_protobuf(case: Path) -> Path:
    return _write(case, numpy_helper.from_array(np.arange(8, dtype=np.int64), "t").SerializeToString())


def _cycle(case: Path) -> Path:
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["x", "a"], ["y"])]
    return _write(case, _model(nodes, [V("x", TP.FLOAT, [4])], [V("y", TP.FLOAT, [4])]))


def _with(mutate: Callable[[onnx.ModelProto], None], model: Callable[[], onnx.ModelProto] = good_model):
    def build(case: Path) -> Path:
        m = model()
        mutate(m)
        return _write(case, m)
    return build


def _set(path: str, value) -> Callable[[onnx.ModelProto], None]:
    def mutate(m):
        obj, *attrs = path.split(".")
        target = m
        for a in path.split(".")[:-1]:
            target = getattr(target, a)
        setattr(target, path.split(".")[-1], value)
    return mutate


def _bad_initializer(**fields):
    def mutate(m):
        t = m.graph.initializer[0]
        for k, v in fields.items():
            if k == "dims":
                del t.dims[:]
                t.dims.extend(v)
            else:
                setattr(t, k, v)
    return mutate


def _if_model(then_nodes, then_out="o") -> Callable[[], onnx.ModelProto]:
    def build():
        then_g = helper.make_graph(then_nodes, "then", [], [V(then_out, TP.FLOAT, [4])])
        else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["o2"])], "else", [],
                                   [V("o2", TP.FLOAT, [4])])
        node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
        return _model([node], [V("c", TP.BOOL, []), V("x", TP.FLOAT, [4])], [V("y", TP.FLOAT, [4])])
    return build


def _rules(text: str | bytes, *, name="rules.yaml"):
    def build(case: Path) -> Path:
        case.mkdir(parents=True, exist_ok=True)
        data = text.encode() if isinstance(text, str) else text
        (case / name).write_bytes(data)
        return _write(case, good_model())
    return build


def _fifo_rules(case: Path) -> Path:
    case.mkdir(parents=True, exist_ok=True)
    os.mkfifo(case / "rules.yaml")
    return _write(case, good_model())


def _rules_kwargs(case: Path) -> dict:
    return {"rules": [str(case / "rules.yaml")], "level": 2}


RULES_ARGS = ("--rules", "{case}/rules.yaml", "-O", "2")
YAML_OTHER = "fixed by the rule-loader area (YAML hardening)"
CLI_OTHER = "fixed by the CLI/API area"
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
DEEP = "- name: deep\n  doc: " + "[" * 600 + "]" * 600 + "\n"


def _model_special(kind: str):
    def build(case: Path) -> Path:
        case.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(case / "m.onnx")
            return case / "m.onnx"
        if kind == "dir":
            (case / "m.onnx").mkdir()
            return case / "m.onnx"
        if kind == "missing":
            return case / "m.onnx"
        return Path("/dev/zero")
    return build


CASES = [
    # malformed files
    Case("empty-file", lambda c: _write(c, b""), "empty"),
    Case("random-bytes", lambda c: _write(c, np.random.default_rng(0).bytes(4096)), "not"),
    Case("truncated", _truncated, "not"),
    Case("text-file", lambda c: _write(c, b"ir_version: 9\ngraph { node { op_type: 'Relu' } }\n"), "not"),
    Case("other-protobuf", _not_onnx_protobuf, "not"),
    Case("model-is-a-folder", _model_special("dir"), "folder"),
    Case("model-missing", _model_special("missing"), "no such file"),
    Case("model-is-a-fifo", _model_special("fifo"), "pipe", attack=True),
    Case("model-is-dev-zero", _model_special("devzero"), "device", attack=True),
    Case("ir-version-0", _with(_set("ir_version", 0)), "ir_version", surfaces=("api", "cli")),
    Case("ir-version-99", _with(_set("ir_version", 99)), "ir_version"),
    # graphs
    Case("cycle", _cycle, "invalid onnx graph"),
    Case("undefined-value", _with(lambda m: m.graph.node[1].input.__setitem__(0, "nowhere")), "nowhere"),
    Case("duplicate-output-names", _with(lambda m: m.graph.node[1].output.__setitem__(0, "h")), "h"),
    Case("duplicate-initializers", _with(lambda m: m.graph.initializer.append(m.graph.initializer[0])), "w",
         surfaces=("api", "cli")),
    Case("duplicate-inputs", _with(lambda m: m.graph.input.append(m.graph.input[0])), "x"),
    # optimize() renames the second node (model_io._unique_node_names); the session stays ORT's
    Case("duplicate-node-names", _with(lambda m: [setattr(n, "name", "n") for n in m.graph.node]), "n",
         surfaces=("session",)),
    Case("unknown-op", _with(lambda m: setattr(m.graph.node[1], "op_type", "Frobnicate")), "frobnicate"),
    Case("undeclared-domain", _with(lambda m: setattr(m.graph.node[1], "domain", "com.nowhere")), "com.nowhere"),
    Case("opset-1", _with(lambda m: setattr(m.opset_import[0], "version", 1)), "opset"),
    Case("opset-99", _with(lambda m: setattr(m.opset_import[0], "version", 99)), "opset"),
    Case("no-default-opset", _with(lambda m: m.ClearField("opset_import")), "opset"),
    Case("missing-required-attr", _with(lambda m: m.graph.node.append(
        helper.make_node("Concat", ["y", "y"], ["z"]))), "axis"),
    Case("wrong-input-count", _with(lambda m: m.graph.node[1].input.append("x")), "relu"),
    Case("output-never-produced", _with(lambda m: m.graph.output.append(V("ghost", TP.FLOAT, [1]))), "ghost"),
    Case("initializer-dims-mismatch", _with(_bad_initializer(dims=[1 << 40, 64])), "w"),
    Case("initializer-negative-dim", _with(_bad_initializer(dims=[-5, 64])), "w"),
    Case("initializer-zero-size-with-data", _with(_bad_initializer(dims=[0, 64])), "w"),
    Case("initializer-undefined-dtype", _with(_bad_initializer(data_type=0)), "w"),
    Case("huge-dims-overflowing-int64", _with(_bad_initializer(dims=[1 << 40, 1 << 40, 1 << 40])), "w"),
    Case("subgraph-undefined-value", _with(lambda m: None, _if_model([helper.make_node("Relu", ["nope"], ["o"])])), "nope"),
    Case("subgraph-cycle", _with(lambda m: None, _if_model(
        [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["o"]),
         helper.make_node("Relu", ["o"], ["b"])])), "invalid onnx graph"),
    Case("subgraph-unknown-op", _with(lambda m: None, _if_model(
        [helper.make_node("Frobnicate", ["x"], ["o"])])), "frobnicate"),
    # external data
    Case("ext-dotdot", _in_model_dir(lambda d, c: _external(d, "../secret")), "outside", attack=True),
    Case("ext-absolute", _in_model_dir(lambda d, c: _external(d, str(c / "secret"))), "absolute", attack=True),
    Case("ext-etc-passwd", _in_model_dir(lambda d, c: _external(d, "/etc/passwd")), "absolute", attack=True),
    Case("ext-deep-dotdot", _in_model_dir(lambda d, c: _external(d, "a/../../secret")), "outside", attack=True),
    Case("ext-symlink", _in_model_dir(_symlink), "symlink", attack=True),
    Case("ext-symlinked-folder", _in_model_dir(_symlinked_folder), "outside", attack=True),
    Case("ext-hardlink", _in_model_dir(_hardlink), "hard link", attack=True),
    Case("ext-dev-zero", _in_model_dir(lambda d, c: _external(d, "/dev/zero")), "absolute", attack=True),
    Case("ext-fifo", _in_model_dir(_fifo_data), "pipe", attack=True),
    Case("ext-folder", _in_model_dir(_dir_data), "folder", attack=True),
    Case("ext-missing-file", _in_model_dir(lambda d, c: _external(d, "gone.data")), "not found", attack=True),
    Case("ext-no-location", _in_model_dir(lambda d, c: _external(d, "")), "location", attack=True),
    Case("ext-offset-beyond", _in_model_dir(lambda d, c: _external(d, "w.data", offset="999999")), "beyond", attack=True),
    Case("ext-length-beyond", _in_model_dir(lambda d, c: _external(d, "w.data", length="999999")), "beyond", attack=True),
    Case("ext-negative-offset", _in_model_dir(lambda d, c: _external(d, "w.data", offset="-8")), "beyond", attack=True),
    Case("ext-offset-not-int", _in_model_dir(lambda d, c: _external(d, "w.data", offset="0x10")), "integer", attack=True),
    Case("ext-sparse-initializer", _in_model_dir(_sparse_attack), "outside", attack=True),
    Case("ext-constant-attribute", _in_model_dir(_constant_attack), "outside", attack=True),
    Case("ext-in-subgraph", _in_model_dir(_subgraph_attack), "outside", attack=True),
    Case("ext-in-function", _in_model_dir(_function_attack), "outside", attack=True),
    Case("ext-data-file-truncated", _in_model_dir(_truncated_data_file), "beyond", attack=True),
    # outputs
    Case("output-is-a-folder", lambda c: _write(c, good_model()), "folder", surfaces=("api", "cli"),
         output="."),
    Case("output-folder-missing", lambda c: _write(c, good_model()), "does not exist",
         surfaces=("api", "cli"), output="no/such/dir/out.onnx"),
    Case("output-is-the-input", lambda c: _write(c, good_model()), "overwrite", surfaces=("api", "cli"),
         output="m.onnx"),
    Case("output-name-too-long", lambda c: _write(c, good_model()), "too long", surfaces=("api", "cli"),
         output="o" * 300 + ".onnx"),
    # the write itself fails (disk full): the OSError becomes the one line
    Case("output-disk-full", lambda c: _write(c, good_model()), "no space left", surfaces=("api", "cli"),
         output="/dev/full"),
    # graphs ONNX Runtime loads but that compute nothing
    Case("no-graph-outputs", _with(lambda m: m.graph.ClearField("output")), "no outputs",
         surfaces=("api", "cli")),
    # flags and arguments
    Case("unknown-target", lambda c: _write(c, good_model()), "target", surfaces=("api", "cli"),
         cli_args=("--target", "cuda"), api_kwargs=lambda c: {"target": "cuda"}),
    Case("unknown-level", lambda c: _write(c, good_model()), "7", surfaces=("api", "cli"),
         cli_args=("-O", "7"), api_kwargs=lambda c: {"level": 7}),
    Case("negative-seed", lambda c: _write(c, good_model()), "seed", surfaces=("api", "cli"),
         cli_args=("-O", "1", "--verify", "--seed", "-1"),
         api_kwargs=lambda c: {"level": 1, "verify": True, "seed": -1}),
    Case("shape-malformed", lambda c: _write(c, good_model()), "--shape", surfaces=("cli",),
         cli_args=("-O", "1", "--verify", "--shape", "x=2xabc")),
    Case("shape-unknown-name", lambda c: _write(c, good_model()), "batch", surfaces=("api", "cli"),
         cli_args=("-O", "1", "--verify", "--shape", "batch=2"),
         api_kwargs=lambda c: {"level": 1, "verify": True, "shapes": {"batch": (2,)}}),
    Case("shape-beyond-memory", lambda c: _write(c, good_model()), "memory", surfaces=("api", "cli"),
         cli_args=("-O", "1", "--verify", "--shape", "N=99999999999"),
         api_kwargs=lambda c: {"level": 1, "verify": True, "shapes": {"N": (99999999999,)}}),
    # ORT's own log line ("[E:onnxruntime:...] Non-zero status code ...") came above the error
    Case("original-fails-to-run", lambda c: _write(c, _model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], [V("x", TP.FLOAT, ["N", 4])],
        [V("y", TP.FLOAT, [3, 5])], [numpy_helper.from_array(np.array([3, 5], np.int64), "s")])),
        "fails to run", surfaces=("api", "cli"), cli_args=("-O", "1", "--verify"),
        api_kwargs=lambda c: {"level": 1, "verify": True}),
    Case("inputs-without-verify", _npz(b"PK\x05\x06" + bytes(18)), "--inputs", surfaces=("api", "cli"),
         cli_args=("-O", "1", "--inputs", "{case}/in.npz"),
         api_kwargs=lambda c: {"level": 1, "verify_inputs": str(c / "in.npz")}),
    Case("api-shapes-not-integers", lambda c: _write(c, good_model()), "integer", surfaces=("api",),
         api_kwargs=lambda c: {"level": 1, "verify": True, "shapes": {"N": "2x3"}}),
    Case("api-shapes-negative", lambda c: _write(c, good_model()), "negative", surfaces=("api",),
         api_kwargs=lambda c: {"level": 1, "verify": True, "shapes": {"N": (-2,)}}),
    Case("api-shapes-not-a-mapping", lambda c: _write(c, good_model()), "shapes must map",
         surfaces=("api",), api_kwargs=lambda c: {"level": 1, "verify": True, "shapes": ["N=2"]}),
    Case("api-verify-inputs-of-strings", lambda c: _write(c, good_model()), "numeric", surfaces=("api",),
         api_kwargs=lambda c: {"level": 1, "verify": True, "verify_inputs": {"x": "1, 2"}}),
    Case("api-verify-inputs-not-a-mapping", lambda c: _write(c, good_model()), "verify_inputs",
         surfaces=("api",), api_kwargs=lambda c: {"level": 1, "verify": True, "verify_inputs": 5}),
    Case("inputs-not-npz", _npz(b"x,y\n1,2\n"), "not a .npz", surfaces=("api", "cli"),
         cli_args=("-O", "1", "--verify", "--inputs", "{case}/in.npz"),
         api_kwargs=lambda c: {"level": 1, "verify": True, "verify_inputs": str(c / "in.npz")}),
    Case("output-path-empty", lambda c: _write(c, good_model()), "path is empty", surfaces=("cli",),
         output=""),
    Case("rules-path-empty", lambda c: _write(c, good_model()), "path is empty", surfaces=("api", "cli"),
         cli_args=("--rules", "", "-O", "2"), api_kwargs=lambda c: {"rules": [""], "level": 2}),
    Case("inputs-path-empty", lambda c: _write(c, good_model()), "path is empty", surfaces=("api", "cli"),
         cli_args=("-O", "1", "--verify", "--inputs", ""),
         api_kwargs=lambda c: {"level": 1, "verify": True, "verify_inputs": ""}),
    Case("inputs-is-a-folder", lambda c: (c / "in.npz").mkdir() or _write(c, good_model()), "is a folder",
         surfaces=("api", "cli"), cli_args=("-O", "1", "--verify", "--inputs", "{case}/in.npz"),
         api_kwargs=lambda c: {"level": 1, "verify": True, "verify_inputs": str(c / "in.npz")}),
    # hostile rule files
    Case("rules-python-tag", _rules("- !!python/object/apply:os.system ['echo pwned']\n"), "python",
         surfaces=("api", "cli"), cli_args=RULES_ARGS, api_kwargs=_rules_kwargs),
    Case("rules-deep-nesting", _rules(DEEP), "deep", surfaces=("api", "cli"), cli_args=RULES_ARGS,
         api_kwargs=_rules_kwargs),
    Case("rules-billion-laughs", _rules(LAUGHS), "alias", surfaces=("api", "cli"), cli_args=RULES_ARGS,
         api_kwargs=_rules_kwargs),
    Case("rules-huge-file", _rules("# padding\n" * 3_000_000), "large", surfaces=("api", "cli"),
         cli_args=RULES_ARGS, api_kwargs=_rules_kwargs),
    Case("rules-binary", _rules(b"\xff\xfe\x00garbage\x80\x81"), "rules.yaml", surfaces=("api", "cli"),
         cli_args=RULES_ARGS, api_kwargs=_rules_kwargs),
    Case("rules-missing", lambda c: _write(c, good_model()), "rules.yaml", surfaces=("api", "cli"),
         cli_args=RULES_ARGS, api_kwargs=_rules_kwargs),
    Case("rules-fifo", _fifo_rules, "rules.yaml", surfaces=("api", "cli"), cli_args=RULES_ARGS,
         api_kwargs=_rules_kwargs),
    Case("rules-not-a-list", _rules("just a string\n"), "rules.yaml", surfaces=("api", "cli"),
         cli_args=RULES_ARGS, api_kwargs=_rules_kwargs),
    # names
    Case("non-utf8-node-name", _with(lambda m: None), "utf-8", surfaces=("api", "cli")),
]


def _non_utf8_name_model(case: Path) -> Path:
    """Protobuf strings must be UTF-8; write one that is not by patching the serialized bytes."""
    m = good_model()
    m.graph.node[1].name = "RELU-NAME-MARK"
    data = m.SerializeToString().replace(b"RELU-NAME-MARK", b"RELU-\xff\xfe-NAME-M")  # same length
    return _write(case, data)


for _c in CASES:
    if _c.name == "non-utf8-node-name":
        _c.build = _non_utf8_name_model

# --- running ----------------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, str]:
    """Every entry under the folder (links not followed) and the sha256 of regular files."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = "special"
    return out


class Hang(Exception):
    pass


@pytest.fixture
def case_dir(tmp_path, monkeypatch):
    """The case folder, an isolated cache, and an alarm: an in-process case that blocks (a FIFO
    opened for reading) fails after 60 s instead of hanging the run."""
    import signal

    monkeypatch.setenv("ONNX_FUSE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "case"
    folder.mkdir()

    def hang(signum, frame):
        raise Hang("still running after 60 s: it hangs")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    yield folder
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# The CLI reaches the same code as the API after parsing its flags; what it adds is the error line,
# the exit code and the output path handling. Every case runs through a real subprocess: about
# 1.6 s of CPU each, mostly importing onnx-ir (sympy), so all 65 cost about 105 s of CPU (measured
# 2026-12-01 on the shared 2-core VM: 94 s user + 12 s system). CLI_CASES, one case of each kind of
# failure and the main external-data attacks (about 48 s), run unmarked; the other 35 are marked
# `slow`, so `pytest -m "not slow"` keeps the quick subset and the default run covers the surface.
CLI_CASES = {
    "empty-file", "random-bytes", "truncated", "model-is-a-folder", "model-is-a-fifo",
    "model-is-dev-zero", "cycle", "undefined-value", "unknown-op", "opset-1", "opset-99",
    "initializer-dims-mismatch", "subgraph-undefined-value", "ext-dotdot", "ext-absolute",
    "ext-symlink", "ext-hardlink", "ext-dev-zero", "ext-fifo", "ext-offset-beyond", "ext-in-subgraph",
    "output-is-a-folder", "output-folder-missing", "output-is-the-input", "output-name-too-long",
    "rules-python-tag", "rules-deep-nesting", "rules-billion-laughs", "rules-fifo",
    "non-utf8-node-name",
}


def _params(surface: str):
    out = []
    for c in CASES:
        if surface not in c.surfaces:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail[surface])] if surface in c.xfail else []
        if surface == "cli" and c.name not in CLI_CASES:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


def _one_line(message: str, expect: str) -> None:
    assert message and "\n" not in message.strip(), f"not one line: {message!r}"
    assert "Traceback" not in message and "internal error" not in message, message
    assert expect.lower() in message.lower(), f"{expect!r} not named in: {message!r}"


@pytest.mark.parametrize("case", _params("api"))
def test_api(case: Case, case_dir: Path):
    model = case.build(case_dir)
    before = _snapshot(case_dir)
    kwargs = case.api_kwargs(case_dir) if case.api_kwargs else {"level": 1}
    with pytest.raises(UserError) as e:
        result = onnx_fuse.optimize(model, **kwargs)
        result.save(case_dir / case.output)
    _one_line(str(e.value), case.expect)
    assert _snapshot(case_dir) == before


@pytest.mark.parametrize("case", _params("cli"))
def test_cli(case: Case, case_dir: Path):
    model = case.build(case_dir)
    before = _snapshot(case_dir)
    args = [a.replace("{case}", str(case_dir)) for a in case.cli_args] or ["-O", "1"]
    out = case_dir / case.output if case.output else ""   # "": the empty path itself, not the folder
    cmd = [sys.executable, "-m", "onnx_fuse.cli.main", "optimize", os.fsencode(model), "-o",
           os.fsencode(out), "-q", *args]
    proc = subprocess.run(cmd, capture_output=True, timeout=60, cwd=case_dir.parent,
                          env={**os.environ, "COLUMNS": "200"})
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 2, f"rc {proc.returncode}: {stderr[-1500:]}"
    assert stderr.startswith("error: "), stderr
    _one_line(stderr, case.expect)
    assert _snapshot(case_dir) == before


def _raised(fn) -> BaseException | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the test compares what was raised
            return exc
    return None


@pytest.mark.parametrize("case", _params("session"))
def test_session(case: Case, case_dir: Path):
    model = case.build(case_dir)
    before = _snapshot(case_dir)
    got = _raised(lambda: InferenceSession(os.fspath(model), providers=CPU, optimize_level=1))
    if case.attack:
        assert isinstance(got, UnsafeModelError), repr(got)
        _one_line(str(got), case.expect)
    else:
        want = _raised(lambda: onnxruntime.InferenceSession(os.fspath(model), providers=CPU))
        assert want is not None, "onnxruntime loads this model: not a bad input for a session"
        assert type(got) is type(want), f"raised {got!r}, onnxruntime raises {want!r}"
    assert _snapshot(case_dir) == before
    entries = case_dir.parent / "cache" / "v1" / "entries"
    assert not entries.exists() or not any(entries.iterdir())


@pytest.mark.parametrize("model", [None, 5, ["m.onnx"], ""], ids=["none", "int", "list", "empty-path"])
def test_api_model_of_the_wrong_kind(model):
    """Not a path, bytes, ModelProto or onnx-ir model: a UserError naming what was given, not a
    TypeError from os.fspath; an empty path is not "." (which was reported as a folder)."""
    with pytest.raises(UserError) as e:
        onnx_fuse.optimize(model, level=1)
    _one_line(str(e.value), "empty" if model == "" else type(model).__name__)


def test_corpus_size():
    counts = {s: len(_params(s)) for s in ("api", "cli", "session")}
    assert sum(counts.values()) >= 80, counts
    # the CLI runs every case meant for it (the unmarked subset is a quick selection of them)
    assert counts["cli"] == sum("cli" in c.surfaces for c in CASES)
    assert CLI_CASES <= {c.name for c in CASES if "cli" in c.surfaces}


# --- InferenceSession's own options -----------------------------------------------------------

@pytest.mark.parametrize("kwargs, expect", [
    ({"optimize_level": 9}, "9"), ({"optimize_level": -1}, "-1"), ({"optimize_level": True}, "true"),
    ({"optimize_level": "3"}, "'3'"), ({"target": "cuda"}, "cuda"), ({"target": ""}, "target"),
    ({"cache_size_limit": -1}, "cache_size_limit"), ({"cache_size_limit": "2G"}, "cache_size_limit"),
    ({"rules": 5}, "rules")],
    ids=["level-9", "level-negative", "level-bool", "level-str", "target-cuda", "target-empty",
         "cache-limit-negative", "cache-limit-str", "rules-int"])
def test_session_option_that_does_not_exist(kwargs, expect, case_dir):
    """Our own keyword arguments are the caller's mistake, not an optimization failure: a one-line
    ValueError at construction, not a warning and a session running the original."""
    model = _write(case_dir, good_model())
    before = _snapshot(case_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", onnx_fuse.OnnxFuseWarning)
        with pytest.raises(ValueError) as e:
            InferenceSession(os.fspath(model), providers=CPU, **kwargs)
    _one_line(str(e.value), expect)
    assert _snapshot(case_dir) == before
    assert not (case_dir.parent / "cache").exists()


# --- the other subcommands --------------------------------------------------------------------

def _main_error(capsys, argv: list[str], expect: str, code: int = 2) -> None:
    """In-process ``onnx-fuse ARGV``: exit ``code`` and one ``error:`` line on stderr."""
    from onnx_fuse.cli.main import main

    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    _one_line(err, expect)


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["table", "json"])
def test_check_trt_graph_without_outputs(case_dir, capsys, json_flag):
    """ONNX and ORT accept a graph with no outputs; TensorRT builds nothing from it."""
    model = _with(lambda m: m.graph.ClearField("output"))(case_dir)
    _main_error(capsys, ["check-trt", os.fspath(model), *json_flag], "no outputs")


def _clash_case(case: Path) -> None:
    case.mkdir(parents=True, exist_ok=True)
    _write(case, good_model())
    onnx.save_model(good_model(), case / "ext.onnx", save_as_external_data=True,
                    location="ext.onnx.data", size_threshold=0)
    np.savez(case / "in.npz", x=np.ones((2, 64), np.float32))
    (case / "r.yaml").write_text("[]\n")


@pytest.mark.parametrize("argv, expect", [
    (["optimize", "m.onnx", "-o", "o.onnx", "--report", "m.onnx"], "report would overwrite the input model"),
    (["optimize", "m.onnx", "-o", "o.onnx", "--report", "o.onnx"], "report would overwrite the output model"),
    (["optimize", "ext.onnx", "-o", "o.onnx", "--report", "ext.onnx.data"], "weights file of the input"),
    (["optimize", "m.onnx", "-o", "o.onnx", "-O", "2", "--rules", "r.yaml", "--report", "r.yaml"], "--rules file"),
    (["optimize", "m.onnx", "-o", "in.npz", "-O", "1", "--verify", "--inputs", "in.npz"], "--inputs file"),
    (["demo", "-o", "d.onnx", "--report", "d.onnx"], "report would overwrite the output model"),
    (["run", "m.onnx", "--save-outputs", "m.onnx"], "outputs would overwrite the input model"),
    (["run", "m.onnx", "--inputs", "in.npz", "--save-outputs", "in.npz"], "--inputs file"),
], ids=["report-is-input", "report-is-output", "report-is-weights", "report-is-rules",
        "output-is-inputs-npz", "demo-report-is-output", "run-outputs-is-model", "run-outputs-is-inputs"])
def test_a_written_file_that_is_read_or_written_twice(case_dir, capsys, monkeypatch, argv, expect):
    """`--report m.onnx` replaced the input model with the JSON report (exit 0), `-o x --report x`
    the output model; now refused before any work, nothing written, nothing changed."""
    _clash_case(case_dir)
    monkeypatch.chdir(case_dir)
    before = _snapshot(case_dir)
    _main_error(capsys, [*argv, *(["-q"] if argv[0] != "run" else [])], expect)
    assert _snapshot(case_dir) == before


def test_the_same_special_file_may_take_the_model_and_the_report(case_dir, capsys):
    model = _write(case_dir, good_model())
    from onnx_fuse.cli.main import main

    assert main(["optimize", os.fspath(model), "-o", "/dev/null", "--report", "/dev/null", "-O", "1", "-q"]) == 0


@pytest.mark.parametrize("argv, expect", [
    (["demo", "--layers", "100000"], "--layers: must be <= 64"),
    (["run", "m.onnx", "--compare", "--rtol", "-1"], "--rtol: must be a finite number >= 0"),
    (["run", "m.onnx", "--compare", "--atol", "nan"], "--atol: must be a finite number >= 0"),
], ids=["demo-layers-100000", "run-negative-rtol", "run-nan-atol"])
def test_flag_values_that_mean_nothing(case_dir, capsys, monkeypatch, argv, expect):
    """demo --layers 100000 built for minutes before printing anything; run --rtol -1 compared
    against a negative bound and reported PASSED (exit 0)."""
    from onnx_fuse.cli.main import main

    _write(case_dir, good_model())
    monkeypatch.chdir(case_dir)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    _one_line(err, expect)
