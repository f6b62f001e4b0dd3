"""Fixtures shared across test folders."""

from __future__ import annotations

import os

import pytest

#: A user rule that is deliberately wrong (Relu is not Sigmoid): verify and the per-rewrite check
#: must catch it.
WRONG_RELU_RULE = """\
rules:
  - name: wrong-relu
    doc: Relu(x) -> Sigmoid(x) (deliberately wrong)
    targets: [ort, onnx, trt]
    match: |
      y = Relu(x)
    rewrite: |
      y = Sigmoid(x)
"""


@pytest.fixture
def wrong_relu_rule(tmp_path):
    """Path of a rule file holding WRONG_RELU_RULE."""
    path = tmp_path / "wrong.yaml"
    path.write_text(WRONG_RELU_RULE)
    return path


def _env_count(name: str) -> int | None:
    """$name as a count (negative reads as 0), None where it is unset or blank."""
    env = os.environ.get(name, "").strip()
    return max(0, int(env)) if env else None


def _default_workers() -> int:
    """$ONNX_FUSE_TEST_WORKERS, else one worker per usable CPU, at most 4."""
    env = _env_count("ONNX_FUSE_TEST_WORKERS")
    if env is not None:
        return env
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return min(cpus, 4)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The README's command (`python -m pytest -q`, the whole suite from testpaths) runs on
    pytest-xdist workers (the `test` extra installs it), one per CPU, with --dist worksteal: each
    worker starts on a contiguous half of the suite (a module's fixtures are built there once, again
    only where tests are stolen) and an idle one takes half of another's remaining tests, so one
    long file (tests/test_node_suite.py, the corpus matrix) does not hold the run's end. A run naming files or folders, `-n N` / `-p no:xdist`, --pdb,
    --collect-only, or ONNX_FUSE_TEST_WORKERS=0 or 1 keeps the serial default; without xdist
    installed the suite runs serially as before."""
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    opt = config.option
    if opt.numprocesses is not None or opt.dist != "no" or getattr(opt, "tx", None):
        return
    if opt.collectonly or getattr(opt, "usepdb", False):
        return
    workers = _default_workers()
    if workers > 1:
        opt.numprocesses = workers
        opt.dist = "worksteal"


def _ort_threads() -> int:
    """$ONNX_FUSE_TEST_ORT_THREADS, else 1 (0: ONNX Runtime's own default, one per core)."""
    env = _env_count("ONNX_FUSE_TEST_ORT_THREADS")
    return 1 if env is None else env


def _default_ort_threads(threads: int) -> None:
    """Sessions whose options leave intra_op_num_threads at 0 (ORT's "one per core", the default)
    get ``threads``; an explicit count is kept. The suite's models are tiny: ORT's per-session
    thread pool costs more than it saves (creating one and its spin-waiting), and two test workers
    each spinning a pool per core on a 2-core machine starve each other (measured: 300 sessions of a
    6-MatMul graph, 2 processes at once, 10.4 s each at the default vs 2.2 s with one thread)."""
    try:
        from onnxruntime.capi import onnxruntime_inference_collection as ort_py
    except ImportError:
        return
    cls = ort_py.InferenceSession
    create = cls._create_inference_session
    if getattr(create, "onnx_fuse_tests_threads", None) is not None:
        return

    def _create_inference_session(self, *args, **kwargs):
        if self._sess_options is None:
            self._sess_options = ort_py.C.get_default_session_options()  # a fresh copy
        if self._sess_options.intra_op_num_threads == 0:
            self._sess_options.intra_op_num_threads = threads
        return create(self, *args, **kwargs)

    _create_inference_session.onnx_fuse_tests_threads = threads
    cls._create_inference_session = _create_inference_session


def pytest_configure(config):
    threads = _ort_threads()
    if threads:
        _default_ort_threads(threads)
