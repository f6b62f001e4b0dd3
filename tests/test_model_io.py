"""Safe model I/O: every bad input is a one-line UserError; saves are atomic; inputs untouched."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse
from onnx_fuse import model_io
from onnx_fuse.errors import InternalError, UserError
from onnx_fuse.model_io import load_model, save_model
from onnx_fuse.verify import verify


def small_model(n: int = 64) -> onnx.ModelProto:
    """y = (x @ W + b) with W foldable through an Identity; weights big enough to go external."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    nodes = [helper.make_node("Identity", ["W"], ["Wi"]),
             helper.make_node("MatMul", ["x", "Wi"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def save_external(model: onnx.ModelProto, folder: Path, name="m.onnx", location="m.data") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def set_location(path: Path, **entries: str) -> None:
    """Rewrite the external_data entries of every external tensor in the saved model file."""
    proto = onnx.load_model(path, load_external_data=False)
    for t in proto.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            info.update(entries)
            del t.external_data[:]
            for k, v in info.items():
                t.external_data.add(key=k, value=v)
    path.write_bytes(proto.SerializeToString())


def assert_one_line_user_error(exc_info, pattern: str):
    message = str(exc_info.value)
    assert "\n" not in message
    assert pattern in message, message


# --- broken files ---------------------------------------------------------------------------

def test_garbage_bytes(tmp_path):
    p = tmp_path / "g.onnx"
    p.write_bytes(b"\x08\xff\xff\xff garbage \x00\x12" * 10)
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, str(p))


def test_truncated_protobuf(tmp_path):
    data = small_model().SerializeToString()
    p = tmp_path / "t.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "not")


def test_empty_file(tmp_path):
    p = tmp_path / "e.onnx"
    p.write_bytes(b"")
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "empty")


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(UserError) as e:
        load_model(tmp_path / "nope.onnx")
    assert_one_line_user_error(e, "no such file")
    with pytest.raises(UserError) as e:
        load_model(tmp_path)
    assert_one_line_user_error(e, "not a file")


def test_invalid_graph(tmp_path):
    model = small_model()
    model.graph.node[1].input[0] = "undefined_value"
    p = tmp_path / "bad.onnx"
    p.write_bytes(model.SerializeToString())
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "invalid ONNX graph")


def test_opset_too_new(tmp_path):
    model = small_model()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    p = tmp_path / "new.onnx"
    p.write_bytes(model.SerializeToString())
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "newer than")


# --- external data --------------------------------------------------------------------------

def test_external_location_outside_folder(tmp_path):
    (tmp_path / "outside.data").write_bytes(b"\0" * (1 << 16))
    p = save_external(small_model(), tmp_path / "model")
    set_location(p, location="../outside.data")
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "outside the model's folder")


def test_external_absolute_path(tmp_path):
    p = save_external(small_model(), tmp_path / "model")
    set_location(p, location=str((tmp_path / "model" / "m.data").resolve()))
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "absolute")


def test_external_symlink(tmp_path):
    p = save_external(small_model(), tmp_path / "model")
    os.symlink(tmp_path / "model" / "m.data", tmp_path / "model" / "link.data")
    set_location(p, location="link.data")
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "symlink")


def test_external_hardlink(tmp_path):
    p = save_external(small_model(), tmp_path / "model")
    secret = tmp_path / "secret.bin"
    secret.write_bytes((tmp_path / "model" / "m.data").read_bytes())
    os.link(secret, tmp_path / "model" / "hard.data")
    set_location(p, location="hard.data")
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "hard links")


@pytest.mark.parametrize("entries", [{"offset": "99999999"}, {"length": "99999999"},
                                     {"offset": "-4"}])
def test_external_range_beyond_file(tmp_path, entries):
    p = save_external(small_model(), tmp_path / "model")
    set_location(p, **entries)
    with pytest.raises(UserError) as e:
        load_model(p)
    assert_one_line_user_error(e, "beyond the end")


def test_external_data_round_trip_and_inputs_untouched(tmp_path):
    src = save_external(small_model(), tmp_path / "in")
    before = {f.name: f.read_bytes() for f in (tmp_path / "in").iterdir()}
    model = load_model(src)
    assert isinstance(model.graph.initializers["W"].const_value, ir.ExternalTensor)
    result = onnx_fuse.optimize(src, level=1)
    assert "Identity" not in result.report.ops_after
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    written = result.save(out)
    # Weights came external, so they stay external beside the output.
    assert sorted(p.name for p in written) == ["o.onnx", "o.onnx.data"]
    assert (tmp_path / "out" / "o.onnx.data").stat().st_size >= 64 * 64 * 4
    after = {f.name: f.read_bytes() for f in (tmp_path / "in").iterdir()}
    assert after == before
    assert verify(onnx.load(src), onnx.load(out))["passed"]


def test_forced_external_save_of_embedded_model(tmp_path):
    model = load_model(small_model())
    out = tmp_path / "x.onnx"
    written = save_model(model, out, external_data=True)
    assert [p.name for p in written] == ["x.onnx.data", "x.onnx"]
    proto = onnx.load_model(out, load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer
               if t.name == "W")
    reloaded = load_model(out)
    assert verify(small_model(), reloaded)["passed"]


def test_refuses_to_overwrite_input_or_its_weights(tmp_path):
    src = save_external(small_model(), tmp_path, name="w", location="w.data")
    data = (tmp_path / "w.data").read_bytes()
    result = onnx_fuse.optimize(src, level=1)
    with pytest.raises(UserError) as e:
        result.save(src)
    assert_one_line_user_error(e, "overwrite")
    # Output "w" would write its weights to "w.data", which the model still reads.
    with pytest.raises(UserError) as e:
        save_model(result.model, tmp_path / "w2")  # fine: different data file
        result.save(tmp_path / "w")
    assert (tmp_path / "w.data").read_bytes() == data


def test_save_into_folder_or_missing_folder_is_user_error(tmp_path):
    model = load_model(small_model())
    with pytest.raises(UserError) as e:
        save_model(model, tmp_path)
    assert_one_line_user_error(e, "is a folder")
    with pytest.raises(UserError) as e:
        save_model(model, tmp_path / "no" / "such" / "dir.onnx")
    assert_one_line_user_error(e, "does not exist")


# --- atomic save ----------------------------------------------------------------------------

@pytest.mark.parametrize("external", [False, True])
def test_failed_save_leaves_no_partial_output(tmp_path, monkeypatch, external):
    out = tmp_path / "o.onnx"
    out.write_bytes(b"previous good model")

    def crash_embedded(model, f):
        f.write(b"half a mod")  # a partial file, then the crash
        raise OSError("disk full")

    def crash_external(model, path, **kw):
        Path(path).write_bytes(b"half a mod")
        raise OSError("disk full")

    monkeypatch.setattr(model_io, "write_embedded", crash_embedded)
    monkeypatch.setattr(model_io.ir, "save", crash_external)
    with pytest.raises(UserError, match=r"o\.onnx: cannot write the output model \(disk full\)"):
        save_model(load_model(small_model()), out, external_data=external)
    assert out.read_bytes() == b"previous good model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]  # no temp file left


def test_failing_pass_writes_nothing(tmp_path, monkeypatch):
    from onnx_fuse.cli.main import main
    from onnx_fuse.passes.constant_folding import ConstantFoldingPass

    src = tmp_path / "m.onnx"
    onnx.save(small_model(), src)
    before = src.read_bytes()

    def boom(self, model):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(ConstantFoldingPass, "call", boom)
    with pytest.raises(InternalError, match="constant-folding"):
        onnx_fuse.optimize(src, level=1)
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-O", "1", "-q"]) == 1
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert src.read_bytes() == before


# --- models handed over in memory -------------------------------------------------------------

def _proto_with_external(tmp_path: Path) -> tuple[onnx.ModelProto, Path]:
    folder = tmp_path / "model"
    path = save_external(small_model(), folder)
    return onnx.load_model(path, load_external_data=False), folder


def test_modelproto_with_external_data_needs_its_folder(tmp_path, monkeypatch):
    proto, folder = _proto_with_external(tmp_path)
    # The current directory holds a file of the same name: it must never be read.
    decoy = tmp_path / "cwd"
    decoy.mkdir()
    (decoy / "m.data").write_bytes(b"\x42" * (1 << 16))
    monkeypatch.chdir(decoy)
    with pytest.raises(UserError) as e:
        onnx_fuse.optimize(proto, level=1)
    assert_one_line_user_error(e, "base_dir")
    result = onnx_fuse.optimize(proto, level=1, base_dir=folder)
    out = tmp_path / "o.onnx"
    result.save(out, external_data=False)
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    want = numpy_helper.to_array(small_model().graph.initializer[0])
    np.testing.assert_array_equal(saved["W"], want)


def test_modelproto_base_dir_does_not_lift_the_checks(tmp_path):
    proto, folder = _proto_with_external(tmp_path)
    (tmp_path / "secret").write_bytes(b"s" * (1 << 16))
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../secret"
    with pytest.raises(UserError) as e:
        onnx_fuse.optimize(proto, level=1, base_dir=folder)
    assert_one_line_user_error(e, "outside the model's folder")


def test_ir_model_external_tensor_without_folder_is_refused(tmp_path, monkeypatch):
    proto, folder = _proto_with_external(tmp_path)
    model = ir.serde.deserialize_model(proto)  # ExternalTensor with no base folder
    monkeypatch.chdir(folder)  # the relative path would resolve here
    with pytest.raises(UserError) as e:
        load_model(model)
    assert_one_line_user_error(e, "base_dir")
    assert load_model(model, base_dir=folder).graph.initializers["W"].const_value.numpy().shape == (64, 64)


# --- embedded saves -------------------------------------------------------------------------

def test_embedded_save_of_external_model_holds_the_weights(tmp_path):
    """--external-data no used to write a model still pointing at the source's weight file."""
    src = save_external(small_model(), tmp_path / "in")
    result = onnx_fuse.optimize(src, level=1)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    written = result.save(out_dir / "o.onnx", external_data=False)
    assert [p.name for p in written] == ["o.onnx"]
    proto = onnx.load_model(out_dir / "o.onnx", load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)
    onnx.checker.check_model(proto, full_check=True)
    (tmp_path / "in" / "m.data").unlink()  # the output must not need the source any more
    assert verify(small_model(), proto)["passed"]


def _sparse_external_model(folder: Path, n_bytes: int) -> Path:
    """A model whose one float weight lives in a sparse file of ``n_bytes`` (no disk cost)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "big.data", "wb") as f:
        f.truncate(n_bytes)
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[n_bytes // 4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "big.data"), ("offset", "0"), ("length", str(n_bytes))):
        t.external_data.add(key=k, value=v)
    g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n_bytes // 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n_bytes // 4])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    (folder / "big.onnx").write_bytes(m.SerializeToString())
    return folder / "big.onnx"


@pytest.mark.parametrize("how", ["save", "cli"])
def test_embedding_over_2gb_is_refused(tmp_path, how):
    src = _sparse_external_model(tmp_path / "in", 2_200_000_000)
    out = tmp_path / "o.onnx"
    if how == "save":
        model = load_model(src)
        with pytest.raises(UserError) as e:
            save_model(model, out, external_data=False)
        assert_one_line_user_error(e, "at most 2 GB")
    else:
        from onnx_fuse.cli.main import main

        assert main(["optimize", str(src), "-o", str(out), "-O", "0", "-q",
                     "--external-data", "no"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_streamed_embedded_save_round_trips(tmp_path):
    """Large initializers are appended one by one after the skeleton; the file is one ModelProto."""
    model = small_model(n=128)
    model.graph.initializer.append(numpy_helper.from_array(np.arange(5, dtype=np.int64), "small"))
    model.graph.initializer.append(helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"]))
    out = tmp_path / "o.onnx"
    save_model(load_model(model), out, external_data=False)
    back = onnx.load(out)
    onnx.checker.check_model(back, full_check=True)
    got = {t.name: numpy_helper.to_array(t) for t in back.graph.initializer}
    for t in model.graph.initializer:
        np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t))


def test_weights_inside_a_large_onnx_are_mapped_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(model_io, "MAP_FILES_FROM", 0)  # map even this small file
    src = tmp_path / "m.onnx"
    onnx.save(small_model(), src)
    model = load_model(src)
    w = model.graph.initializers["W"].const_value
    assert isinstance(w, ir.ExternalTensor) and Path(w.path).resolve() == src.resolve()
    result = onnx_fuse.optimize(src, level=1)
    written = result.save(tmp_path / "o.onnx")  # still embedded: the source was one file
    assert [p.name for p in written] == ["o.onnx"]
    assert verify(small_model(), onnx.load(tmp_path / "o.onnx"))["passed"]


# --- where outputs land ------------------------------------------------------------------------

def test_symlinked_output_replaces_the_link_target(tmp_path):
    """Used to write into the target's folder under the link's name, leaving the target stale."""
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "model.onnx"
    target.write_bytes(b"old")
    link = tmp_path / "link.onnx"
    os.symlink(target, link)
    result = onnx_fuse.optimize(small_model(), level=1)
    result.save(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert verify(small_model(), onnx.load(target))["passed"]
    assert sorted(p.name for p in real_dir.iterdir()) == ["model.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.onnx", "real"]
    # With external data the weights go beside the target, under the target's name.
    result.save(link, external_data=True)
    assert sorted(p.name for p in real_dir.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert verify(small_model(), onnx.load(target))["passed"]


def test_dangling_symlink_output_creates_its_target(tmp_path):
    link = tmp_path / "link.onnx"
    os.symlink(tmp_path / "made.onnx", link)
    onnx_fuse.optimize(small_model(), level=1).save(link)
    assert link.is_symlink() and (tmp_path / "made.onnx").is_file()


def test_special_file_outputs_are_written_through(tmp_path):
    import stat
    import threading

    result = onnx_fuse.optimize(small_model(), level=1)
    result.save("/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    result.save(fifo)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert verify(small_model(), onnx.ModelProto.FromString(got[0]))["passed"]
    with pytest.raises(UserError) as e:
        result.save(fifo, external_data=True)
    assert_one_line_user_error(e, "not a regular file")


def test_outputs_follow_the_umask_and_keep_an_existing_mode(tmp_path):
    old = os.umask(0o027)
    try:
        onnx_fuse.optimize(small_model(), level=1).save(tmp_path / "new.onnx")
        existing = tmp_path / "old.onnx"
        existing.write_bytes(b"x")
        existing.chmod(0o604)
        onnx_fuse.optimize(small_model(), level=1).save(existing)
    finally:
        os.umask(old)
    assert (tmp_path / "new.onnx").stat().st_mode & 0o777 == 0o640
    assert existing.stat().st_mode & 0o777 == 0o604


def test_cli_report_and_output_through_symlink_and_fifo(tmp_path):
    import json
    import stat
    import subprocess
    import sys
    import threading

    src = tmp_path / "m.onnx"
    onnx.save(small_model(), src)
    report_target = tmp_path / "r.json"
    os.symlink(report_target, tmp_path / "report-link.json")
    fifo = tmp_path / "out.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    proc = subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", "optimize", str(src), "-o",
                           str(fifo), "-O", "1", "-q", "--report", str(tmp_path / "report-link.json")],
                          capture_output=True, text=True, timeout=120)
    reader.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and (tmp_path / "report-link.json").is_symlink()
    assert json.loads(report_target.read_text())["level"] == 1
    assert verify(small_model(), onnx.ModelProto.FromString(got[0]))["passed"]


def test_duplicate_node_names_are_made_unique_per_graph():
    """ONNX Runtime refuses two nodes of one name in a graph (onnx's checker does not), so the
    optimized model was written and failed to load; a branch may repeat a main-graph name."""
    import onnxruntime

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n"), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Abs", ["b"], ["c"], name="n_1"), helper.make_node("Exp", ["c"], ["y"], name="n")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    before = proto.SerializeToString()
    out = onnx_fuse.optimize(proto, level=1).to_proto()
    assert [n.name for n in out.graph.node] == ["n", "n_2", "n_1", "n_3"]
    onnxruntime.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    assert proto.SerializeToString() == before


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_empty_dim_names_are_unknown_dims(target):
    """dim_param "" names nothing: ONNX Runtime runs x: ['', 4] and y: ['', 4] at batch 2 and 3. The
    passes read two equal names as one size, so Shape(x)[0] - Shape(y)[0] folded to 0 (at O1 already)."""
    import onnxruntime

    zero = helper.make_tensor("z", TensorProto.INT64, [], [0])
    nodes = [helper.make_node("Relu", ["x"], ["rx"]), helper.make_node("Relu", ["y"], ["ry"]),
             helper.make_node("Shape", ["rx"], ["sx"]), helper.make_node("Shape", ["ry"], ["sy"]),
             helper.make_node("Constant", [], ["z"], value=zero),
             helper.make_node("Gather", ["sx", "z"], ["bx"]), helper.make_node("Gather", ["sy", "z"], ["by"]),
             helper.make_node("Sub", ["bx", "by"], ["d"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["", 4]) for n in "yx"],
                              [helper.make_tensor_value_info("d", TensorProto.INT64, [])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.ones((2, 4), np.float32), "y": np.ones((3, 4), np.float32)}
    for level in (1, 3):
        out = onnx_fuse.optimize(proto, level=level, target=target).to_proto()
        got = onnxruntime.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        assert int(got[0]) == -1
    dims = list(load_model(proto).graph.inputs[0].shape)
    assert dims[0].value is None and dims[1] == 4
