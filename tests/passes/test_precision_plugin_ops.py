"""Precision conversion of the onnx_fuse plugin ops (FusedAttention, PagedAttention).

The kernels/TensorRT plugins take fp16 and bf16 only (plugins/*.yaml ``dtype_combinations``), so
``--precision fp16|bf16`` makes them LOW: float I/O in the low type, integer inputs (seq_lens,
block_tables) untouched. The O4/trt outputs of the tiny LLaMA exports are converted and run in ONNX
Runtime (CPU), the plugin ops through their NumPy references (onnx_fuse.reference.ort_ops: float16
and bfloat16 nodes run the float32 reference between Casts); bf16 graphs run through
``emulate_bf16``. Compared with the float32 original export: fp16 within TOL of docs/precision.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnx_fuse
from onnx_fuse.passes.precision import PrecisionConversionPass, emulate_bf16, plugin_low_ops
from onnx_fuse.plugins.check_trt import check_model
from onnx_fuse.reference.attention import fused_attention_op
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from kv_feeds import LAYERS, VOCAB, decode_feeds, rel_err, run_original

TOL = {"fp16": 5e-3, "bf16": 5e-2}  # docs/precision.md, of the output's max magnitude
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
# the plugin ops need a head size their kernels take: the head-size-64 exports
SDPA, KV = MODELS / "llama64_sdpa_dynamo.onnx", MODELS / "llama64_kv_dynamo.onnx"
LOW = {"fp16": T.FLOAT16, "bf16": T.BFLOAT16}
HKV = 1

pytestmark = pytest.mark.skipif(not (SDPA.is_file() and KV.is_file()),
                                reason=f"exported test models missing under {MODELS}")


def _convert(path: Path, precision: str, keep_io_types: bool = True) -> onnx.ModelProto:
    model = onnx_fuse.optimize(str(path), level=4, target="trt", float32_plugins=True).model
    PrecisionConversionPass(precision, keep_io_types=keep_io_types)(model)
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _types(proto: onnx.ModelProto) -> dict[str, int]:
    g = proto.graph
    t = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]}
    t.update({i.name: i.data_type for i in g.initializer})
    return t


def _plugin_nodes(proto):
    return [n for n in proto.graph.node if n.domain == "onnx_fuse"]


def test_contracts_make_both_ops_low():
    assert plugin_low_ops(ir.DataType.FLOAT16) == {"FusedAttention", "PagedAttention"}
    assert plugin_low_ops(ir.DataType.BFLOAT16) == {"FusedAttention", "PagedAttention"}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("path, op, n_int", [(SDPA, "FusedAttention", 1), (KV, "PagedAttention", 2)])
def test_plugin_float_io_in_low_type_and_check_trt_accepts_dtypes(path, op, n_int, precision):
    proto = _convert(path, precision)
    types = _types(proto)
    nodes = _plugin_nodes(proto)
    assert nodes and {n.op_type for n in nodes} == {op}
    for n in nodes:
        ins = [types.get(x) for x in n.input if x]
        outs = [types.get(x) for x in n.output if x]
        assert ins.count(T.INT32) == n_int  # seq_lens / block_tables untouched
        assert [t for t in ins if t != T.INT32] == [LOW[precision]] * (len(ins) - n_int)
        assert outs == [LOW[precision]] * len(outs)
    # graph I/O keep float32 (keep_io_types=True), except PagedAttention's pools: state the op
    # updates in place, in its own type with no Cast (tests/passes/test_precision_kv_pools.py)
    io = [v.name for v in [*proto.graph.input, *proto.graph.output]]
    pools = [n for n in io if n.startswith("kv_pool_")]
    assert len(pools) == (8 if op == "PagedAttention" else 0)
    assert {types[n] for n in pools} <= {LOW[precision]}
    assert all(types[n] != LOW[precision] for n in io if n not in pools)
    issues = [i for i in check_model(proto).issues if "onnx_fuse" in str(vars(i))]
    reasons = [str(vars(i)) for i in issues]
    assert not [r for r in reasons if "dtype" in r or "float16 or bfloat16" in r or "fp32" in r], reasons
    assert not reasons, reasons


def _sdpa_feeds():
    rng = np.random.default_rng(0)
    mask = np.ones((2, 16), np.int64)
    mask[1, 10:] = 0  # right padding: FusedAttention zeroes padded rows, so compare valid rows
    return {"input_ids": rng.integers(0, VOCAB, (2, 16)).astype(np.int64), "attention_mask": mask}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_fused_attention_low_matches_fp32_original(precision):
    feeds = _sdpa_feeds()
    ref = make_session(onnx.load(str(SDPA))).run(None, feeds)[0]
    proto = _convert(SDPA, precision)
    got = make_session(proto if precision == "fp16" else emulate_bf16(proto)).run(None, feeds)[0]
    assert got.dtype == np.float32
    valid = feeds["attention_mask"].astype(bool)
    assert rel_err(ref, got, valid) <= TOL[precision]


@pytest.mark.parametrize("precision, keep_io_types", [("fp16", True), ("fp16", False), ("bf16", True)])
def test_paged_attention_low_matches_fp32_original(precision, keep_io_types):
    past_lens = (7, 3)
    feeds = decode_feeds(2, max(past_lens), seed=0, hkv=HKV)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=1, seed=1)
    proto = _convert(KV, precision, keep_io_types)
    types = _types(proto)
    pools = [v.name for v in proto.graph.input if v.name.startswith("kv_pool_")]
    # the pools take the op's type whatever keep_io_types says (no per-step pool cast)
    assert {types[p] for p in pools} == {LOW[precision]}
    if precision == "fp16":   # bf16 runs emulated: its pools are float32 inputs there
        pf = {k: v.astype(np.float16) if k in pools else v for k, v in pf.items()}
    sess = make_session(proto if precision == "fp16" else emulate_bf16(proto))
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, pf)))
    orig = make_session(onnx.load(str(KV)))
    for b, L in enumerate(past_lens):
        ref = run_original(orig, feeds, b, L)
        assert rel_err(ref["logits"][0], got["logits"][b]) <= TOL[precision]
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                pool = got[f"kv_pool_{t}_out.{i}"]
                assert pool.dtype == (np.float16 if precision == "fp16" else np.float32)
                seq = gather_pool(pool, pf["block_tables"][b], L + 1)
                assert rel_err(ref[f"present.{i}.{kv}"][0], seq) <= TOL[precision]


@pytest.mark.parametrize("elem", [T.FLOAT16, T.BFLOAT16])
def test_ort_reference_runs_low_precision_node(elem):
    """A float16/bfloat16 FusedAttention node runs the float32 reference between Casts, in ORT CPU
    (graph I/O float32, Cast to ``elem`` around the node: ORT feeds have no bfloat16)."""
    import ml_dtypes

    B, S, H, Hkv, Dh = 2, 5, 4, 2, 8
    nodes = [h.make_node("Cast", [n], [n + "_low"], to=elem) for n in "qkv"]
    nodes += [h.make_node("FusedAttention", ["q_low", "k_low", "v_low", "lens"], ["y_low"],
                          domain="onnx_fuse", num_heads=H, kv_num_heads=Hkv, causal=1, name="fa"),
              h.make_node("Cast", ["y_low"], ["y"], to=T.FLOAT)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("q", T.FLOAT, [B, S, H * Dh]),
                                      h.make_tensor_value_info("k", T.FLOAT, [B, S, Hkv * Dh]),
                                      h.make_tensor_value_info("v", T.FLOAT, [B, S, Hkv * Dh]),
                                      h.make_tensor_value_info("lens", T.INT32, [B])],
                         [h.make_tensor_value_info("y", T.FLOAT, [B, S, H * Dh])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 20), h.make_opsetid("onnx_fuse", 1)])
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((B, S, c * Dh)).astype(np.float32)
             for n, c in (("q", H), ("k", Hkv), ("v", Hkv))}
    feeds["lens"] = np.array([5, 3], np.int32)
    low = np.float16 if elem == T.FLOAT16 else ml_dtypes.bfloat16
    rnd = lambda x: x.astype(low).astype(np.float32)  # noqa: E731
    got = make_session(model).run(None, feeds)[0]
    ref = rnd(fused_attention_op(*(rnd(feeds[n]) for n in "qkv"), feeds["lens"], num_heads=H,
                                 kv_num_heads=Hkv, causal=1))
    np.testing.assert_array_equal(got, ref)
