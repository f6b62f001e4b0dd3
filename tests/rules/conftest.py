"""Helpers for the rule-pack tests: run the real pipeline on a tiny graph, count fused ops, compare
with the original in ONNX Runtime, and ask `explain` why a near-miss did not fuse."""

from __future__ import annotations

import collections
import importlib
import re
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper

import onnx_fuse
from onnx_fuse.rewrite import explain, load_rule_set
from onnx_fuse.verify import make_session

# the shared helpers of tests/rules (attention_testing.py) importable under --import-mode=importlib
sys.path.insert(0, str(Path(__file__).parent))

F32 = TensorProto.FLOAT


def fuse(model: onnx.ModelProto, target: str, level: int = 3) -> onnx.ModelProto:
    """The real pipeline (onnx_fuse.optimize, which runs the target's prepare/finish passes); at
    -O4 trt with the plugin ops also on float32 graphs (float32_plugins), which the rule tests check
    through the NumPy reference at float32 tolerance."""
    out = onnx_fuse.optimize(model, level=level, target=target, float32_plugins=True).to_proto()
    onnx.checker.check_model(out, full_check=False)
    return out


def ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(
        (f"{n.domain}::" if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in model.graph.node)


def fired(model: onnx.ModelProto) -> collections.Counter:
    """Rule name -> nodes it emitted (metadata onnx_fuse.rule)."""
    c = collections.Counter()
    for n in model.graph.node:
        for p in n.metadata_props:
            if p.key == "onnx_fuse.rule":
                c[p.value] += 1
    return c


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return make_session(model).run(None, feeds)


def assert_close(original: onnx.ModelProto, fused: onnx.ModelProto, feeds: dict, *,
                 atol: float = 1e-5, rtol: float = 1e-4, valid: np.ndarray | None = None) -> float:
    """Outputs equal within float32 tolerance; ``valid`` [B,S] restricts [B,S,...] outputs to
    unpadded rows. Prints and returns the max abs error."""
    ref, got = run(original, feeds), run(fused, feeds)
    worst = 0.0
    for r, g in zip(ref, got):
        assert r.shape == g.shape and r.dtype == g.dtype
        r64, g64 = r.astype(np.float64), g.astype(np.float64)
        if valid is not None and r.ndim >= 3 and r.shape[:2] == valid.shape:
            r64, g64 = r64[valid.astype(bool)], g64[valid.astype(bool)]
        err = np.abs(r64 - g64)
        rel = err / np.maximum(np.abs(r64), 1e-6)
        print(f"max abs {err.max():.3g}  max rel {rel.max():.3g}")
        np.testing.assert_allclose(g64, r64, atol=atol, rtol=rtol)
        worst = max(worst, float(err.max()))
    return worst


def reasons(model: onnx.ModelProto, target: str, rule: str) -> list[str]:
    """explain(): '<status>: <reason>' for every candidate anchor of ``rule``."""
    work = ir.serde.deserialize_model(model)
    tmod = importlib.import_module(f"onnx_fuse.targets.{target}")
    for p in tmod.pre_fusion_passes(3):
        p(work)
    rs = load_rule_set(target=target, max_level=4)
    return [f"{r.status.value}: {r.reason}" for r in explain(work, rs, rule)]


def stays(model: onnx.ModelProto, rule: str, why: str, feeds: dict, *, op: str, target: str = "ort",
          level: int = 2) -> None:
    """A near miss: ``rule`` refuses with a reason matching the regex ``why``, no ``op`` is made, and
    the optimized model still computes the original's outputs."""
    got = reasons(model, target, rule)
    assert any(re.search(why, r) for r in got), got
    out = fuse(model, target, level=level)
    assert op not in ops(out), ops(out)
    assert_close(model, out, feeds)


def make_model(nodes, inputs, outputs, inits=(), opset: int = 23) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def vi(name, shape, elem=F32):
    return oh.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def h():
    """The helpers above as one namespace (tests import nothing from conftest)."""
    return types.SimpleNamespace(fuse=fuse, ops=ops, fired=fired, run=run, assert_close=assert_close,
                                 reasons=reasons, stays=stays, make_model=make_model, vi=vi, node=oh.make_node,
                                 F32=F32, rng=np.random.default_rng(0))
