"""Typical onnxruntime usage, run unchanged against onnxruntime.InferenceSession and
onnx_fuse.InferenceSession (default options, and level 1 which optimizes today), comparing results.

Each test takes ``InferenceSession`` from the parametrized module; everything else is plain
onnxruntime. The reference is always a plain onnxruntime session of the same model.
"""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import onnxruntime
import pytest

import onnx_fuse
from onnx_fuse.session import OnnxFuseWarning

from .conftest import demo_feeds, small_model

CPU = ["CPUExecutionProvider"]


@pytest.fixture(params=["onnxruntime", "onnx_fuse", "onnx_fuse_O1"])
def InferenceSession(request):  # noqa: N802 - it stands in for the class
    if request.param == "onnxruntime":
        return onnxruntime.InferenceSession
    if request.param == "onnx_fuse":
        return onnx_fuse.InferenceSession
    return functools.partial(onnx_fuse.InferenceSession, optimize_level=1)


def ref_session(model, **kw):
    return onnxruntime.InferenceSession(model, providers=CPU, **kw)


def small_feeds(batch=3, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 4)).astype(np.float32)}


def describe(args):
    return [(a.name, a.type, a.shape) for a in args]


def test_names_types_shapes(InferenceSession, small_bytes, demo_bytes):
    for model in (small_bytes, demo_bytes):
        sess, ref = InferenceSession(model, providers=CPU), ref_session(model)
        assert describe(sess.get_inputs()) == describe(ref.get_inputs())
        assert describe(sess.get_outputs()) == describe(ref.get_outputs())
        assert describe(sess.get_overridable_initializers()) == describe(ref.get_overridable_initializers())
        assert isinstance(sess, onnxruntime.InferenceSession)


def test_run_with_output_names_and_none(InferenceSession, small_bytes):
    sess, ref = InferenceSession(small_bytes, providers=CPU), ref_session(small_bytes)
    feeds = small_feeds()
    y_only = sess.run(["y"], feeds)
    assert len(y_only) == 1
    z_y = sess.run(["z", "y"], feeds)
    all_out = sess.run(None, feeds)
    want = ref.run(None, feeds)
    np.testing.assert_allclose(y_only[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z_y[0], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z_y[1], want[0], rtol=1e-5, atol=1e-6)
    for got, exp in zip(all_out, want):
        assert got.dtype == exp.dtype and got.shape == exp.shape
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_demo_model_outputs(InferenceSession, demo_bytes):
    sess, ref = InferenceSession(demo_bytes, providers=CPU), ref_session(demo_bytes)
    for batch, seq in ((1, 3), (2, 7)):
        feeds = demo_feeds(batch, seq)
        (got,), (want,) = sess.run(None, feeds), ref.run(None, feeds)
        assert got.shape == want.shape == (batch, seq, 64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_override_initializer(InferenceSession, small_bytes):
    sess, ref = InferenceSession(small_bytes, providers=CPU), ref_session(small_bytes)
    feeds = {**small_feeds(), "b": np.full(8, 3.0, np.float32)}
    for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The default still applies when the initializer is not fed.
    np.testing.assert_allclose(sess.run(["y"], small_feeds())[0], ref.run(["y"], small_feeds())[0],
                               rtol=1e-5, atol=1e-6)


def test_sessions_from_bytes_str_and_pathlike(InferenceSession, small_bytes, tmp_path):
    path = tmp_path / "small.onnx"
    path.write_bytes(small_bytes)
    feeds = small_feeds()
    want = ref_session(small_bytes).run(None, feeds)
    for source in (small_bytes, str(path), path):
        got = InferenceSession(source, providers=CPU).run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_session_options_threads(InferenceSession, demo_bytes):
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    sess = InferenceSession(demo_bytes, so, providers=CPU)
    assert sess.get_session_options().intra_op_num_threads == 1
    feeds = demo_feeds()
    np.testing.assert_allclose(sess.run(None, feeds)[0], ref_session(demo_bytes).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_providers_and_provider_options(InferenceSession, small_bytes):
    sess = InferenceSession(small_bytes, providers=[("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})])
    ref = onnxruntime.InferenceSession(small_bytes, providers=[("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})])
    assert sess.get_providers() == ref.get_providers() == CPU
    assert sess.get_provider_options() == ref.get_provider_options()
    sess2 = InferenceSession(small_bytes, providers=CPU, provider_options=[{}])
    assert sess2.get_providers() == CPU
    # No providers at all: ORT's default choice.
    assert InferenceSession(small_bytes).get_providers() == onnxruntime.InferenceSession(small_bytes).get_providers()


def test_modelmeta(InferenceSession, small_bytes):
    got = InferenceSession(small_bytes, providers=CPU).get_modelmeta()
    want = ref_session(small_bytes).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description",
                  "version", "custom_metadata_map"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.custom_metadata_map == {"author": "tests", "purpose": "drop-in"}


def test_io_binding_cpu(InferenceSession, small_bytes):
    sess, ref = InferenceSession(small_bytes, providers=CPU), ref_session(small_bytes)
    feeds = small_feeds(batch=5)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", feeds["x"])
    binding.bind_output("y")
    z_out = onnxruntime.OrtValue.ortvalue_from_shape_and_type([5, 4], np.float32)
    binding.bind_ortvalue_output("z", z_out)
    sess.run_with_iobinding(binding)
    y, z = binding.copy_outputs_to_cpu()
    want_y, want_z = ref.run(None, feeds)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z_out.numpy(), want_z, rtol=1e-5, atol=1e-6)


def test_run_with_ort_values(InferenceSession, small_bytes):
    sess, ref = InferenceSession(small_bytes, providers=CPU), ref_session(small_bytes)
    feeds = small_feeds()
    ort_feeds = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    outs = sess.run_with_ort_values(["y"], ort_feeds)
    np.testing.assert_allclose(outs[0].numpy(), ref.run(["y"], feeds)[0], rtol=1e-5, atol=1e-6)


def test_run_options_and_profiling(InferenceSession, small_bytes, tmp_path):
    so = onnxruntime.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = InferenceSession(small_bytes, so, providers=CPU)
    ro = onnxruntime.RunOptions()
    ro.log_severity_level = 3
    sess.run(None, small_feeds(), ro)
    prof = sess.end_profiling()
    assert os.path.exists(prof)


def test_set_providers_and_fallback_switches(InferenceSession, small_bytes):
    sess = InferenceSession(small_bytes, providers=CPU)
    sess.disable_fallback()
    sess.enable_fallback()
    sess.set_providers(CPU)
    assert sess.get_providers() == CPU
    want = ref_session(small_bytes).run(None, small_feeds())
    for g, w in zip(sess.run(None, small_feeds()), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _error_of(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - we compare what was raised
            return type(exc), [w for w in caught if issubclass(w.category, OnnxFuseWarning)]
    return None, [w for w in caught if issubclass(w.category, OnnxFuseWarning)]


def test_errors_are_onnxruntimes(InferenceSession, small_bytes, tmp_path):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(small_bytes[: len(small_bytes) // 2])
    cases = {
        "missing file": lambda S: S(str(tmp_path / "nope.onnx"), providers=CPU),
        "garbage bytes": lambda S: S(b"definitely not onnx", providers=CPU),
        "truncated file": lambda S: S(str(truncated), providers=CPU),
        "unknown provider": lambda S: S(small_bytes, providers=["NoSuchExecutionProvider"]),
        "providers conflict": lambda S: S(small_bytes, providers=["TensorrtExecutionProvider",
                                                                 "NvTensorRTRTXExecutionProvider"]),
        "bad type": lambda S: S(12345, providers=CPU),
    }
    for what, case in cases.items():
        want, _ = _error_of(lambda: case(onnxruntime.InferenceSession))
        got, fuse_warnings = _error_of(lambda: case(InferenceSession))
        assert want is not None or what == "unknown provider", what
        assert got is want, f"{what}: raised {got}, onnxruntime raises {want}"
        if want is not None:
            assert not fuse_warnings, f"{what}: a user error must not also warn: {fuse_warnings[0].message}"


def test_run_errors_are_onnxruntimes(InferenceSession, small_bytes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OnnxFuseWarning)  # the default level may fall back today
        sess = InferenceSession(small_bytes, providers=CPU)
    ref = ref_session(small_bytes)
    cases = {
        "bad feed name": lambda s: s.run(None, {"nope": np.zeros((1, 4), np.float32)}),
        "bad feed dtype": lambda s: s.run(None, {"x": np.zeros((1, 4), np.int64)}),
        "bad feed rank": lambda s: s.run(None, {"x": np.zeros((4,), np.float32)}),
        "bad output name": lambda s: s.run(["nope"], small_feeds()),
        "missing feed": lambda s: s.run(None, {}),
    }
    for what, case in cases.items():
        want, _ = _error_of(lambda: case(ref))
        got, _ = _error_of(lambda: case(sess))
        assert want is not None, what
        assert got is want, f"{what}: raised {got}, onnxruntime raises {want}"
