"""`--precision fp16|bf16` on a paged-KV model (O4, trt): PagedAttention's pools are graph I/O
in the op's 16-bit type, wired straight to the op (passes/_kv_pools.py), so the TensorRT plugin's
in-place update (key_cache_out aliases key_cache) lands in the caller's pool and no step converts
a whole pool. Before, the pools stayed float32 graph I/O with a Cast on each side of the op.

The real decode exports tests/data/models/{llama64,gpt264}_kv_dynamo (head size 64) are optimized
as the CLI does (`-O4 --target trt --precision fp16`) and run in ONNX Runtime with PagedAttention
through its NumPy reference, fed fp16 pools, against the float32 original per sequence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T

import onnx_fuse
from onnx_fuse.passes.precision import emulate_bf16
from onnx_fuse.plugins.check_trt import check_model
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from kv_feeds import LAYERS, VOCAB, decode_feeds, rel_err, run_original

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
HKV = {"llama64_kv_dynamo": 1, "gpt264_kv_dynamo": 2}
LOW = {"fp16": T.FLOAT16, "bf16": T.BFLOAT16}
TOL = {"fp16": 5e-3, "bf16": 5e-2}   # docs/precision.md, of the output's max magnitude
POOLS_IN = [f"kv_pool_{t}.{i}" for i in range(LAYERS) for t in "kv"]
POOLS_OUT = [f"kv_pool_{t}_out.{i}" for i in range(LAYERS) for t in "kv"]


def _optimize(name: str, precision: str, static: bool = False, **kw) -> onnx.ModelProto:
    proto = onnx.load(str(MODELS / f"{name}.onnx"))
    if static:   # the query length fixed at 1: the decode graph the AOT kernel serves
        dim = next(i for i in proto.graph.input if i.name == "input_ids").type.tensor_type.shape.dim[1]
        dim.ClearField("dim_param")
        dim.dim_value = 1
    return ir.to_proto(onnx_fuse.optimize(proto, level=4, target="trt", precision=precision,
                                          float32_plugins=True, **kw).model)


def _types(values) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in values}


@pytest.mark.parametrize("precision", sorted(LOW))
@pytest.mark.parametrize("name", sorted(HKV))
def test_pool_io_is_the_ops_type_with_no_cast_between(name, precision):
    proto = _optimize(name, precision)
    onnx.checker.check_model(proto, full_check=True)
    ins, outs = _types(proto.graph.input), _types(proto.graph.output)
    assert {ins[p] for p in POOLS_IN} == {outs[p] for p in POOLS_OUT} == {LOW[precision]}
    assert ins["input_ids"] == T.INT64 and outs["logits"] == T.FLOAT   # the rest keeps its I/O
    nodes = [n for n in proto.graph.node if n.op_type == "PagedAttention"]
    assert [list(n.input[3:5]) for n in nodes] == [[f"kv_pool_k.{i}", f"kv_pool_v.{i}"]
                                                   for i in range(LAYERS)]
    assert [list(n.output[1:3]) for n in nodes] == [[f"kv_pool_k_out.{i}", f"kv_pool_v_out.{i}"]
                                                    for i in range(LAYERS)]
    pool_names = set(POOLS_IN) | set(POOLS_OUT)
    casts = [n.name for n in proto.graph.node if n.op_type == "Cast"
             and pool_names & {*n.input, *n.output}]
    assert not casts, casts
    readers = [n.op_type for n in proto.graph.node if set(n.input) & set(POOLS_IN)]
    assert readers == ["PagedAttention"] * LAYERS   # each reads its k and v pools, nothing else


def _run(sess, feeds: dict) -> dict:
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.mark.parametrize("name", sorted(HKV))
def test_fp16_pools_match_the_original_and_change_only_the_new_slots(name):
    """A ragged batch (past lengths 7 and 3, block size 4) fed fp16 pools: logits and the pools
    read back match the float32 original per sequence within fp16 tolerance, the pools come back
    fp16, and every slot but the new token's is bit for bit what was fed (the in-place contract)."""
    past_lens = (7, 3)
    feeds = decode_feeds(2, max(past_lens), seed=2, hkv=HKV[name])
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=1, seed=1)
    pf = {k: v.astype(np.float16) if k in POOLS_IN else v for k, v in pf.items()}
    got = _run(make_session(_optimize(name, "fp16")), pf)
    orig = make_session(onnx.load(str(MODELS / f"{name}.onnx")))
    new_slots = {(int(pf["block_tables"][b, L // 4]), L % 4) for b, L in enumerate(past_lens)}
    for b, L in enumerate(past_lens):
        ref = run_original(orig, feeds, b, L)
        assert rel_err(ref["logits"][0], got["logits"][b]) <= TOL["fp16"]
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                pool = got[f"kv_pool_{t}_out.{i}"]
                assert pool.dtype == np.float16
                seq = gather_pool(pool, pf["block_tables"][b], L + 1)
                assert rel_err(ref[f"present.{i}.{kv}"][0], seq) <= TOL["fp16"]
    for p_in, p_out in zip(POOLS_IN, POOLS_OUT):
        before, after = pf[p_in], got[p_out]
        same = (before == after) | (np.isnan(before) & np.isnan(after))
        changed = {(int(i), int(j)) for i, j in zip(*np.nonzero(~same.all(axis=(2, 3))))}
        assert changed == new_slots


def test_fp16_decode_loop_feeds_the_pools_back_as_they_come():
    """Three decode steps: each step's fp16 pool outputs are the next step's inputs unchanged
    (no conversion between steps), and the logits follow the float32 original."""
    name = "llama64_kv_dynamo"
    new = make_session(_optimize(name, "fp16"))
    orig = make_session(onnx.load(str(MODELS / f"{name}.onnx")))
    feeds = decode_feeds(1, 4, seed=11, hkv=HKV[name])
    pf = paged_inputs_from_contiguous(feeds, 2, past_lens=(4,), new_tokens=3, seed=5)
    pf = {k: v.astype(np.float16) if k in POOLS_IN else v for k, v in pf.items()}
    past = {k: v for k, v in feeds.items() if k.startswith("past_key_values.")}
    rng = np.random.default_rng(12)
    for step in range(3):
        ids = rng.integers(0, VOCAB, (1, 1)).astype(np.int64)
        pf.update(input_ids=ids, seq_lens=np.array([5 + step], np.int32))
        got = _run(new, pf)
        ref = _run(orig, {"input_ids": ids, "attention_mask": np.ones((1, 5 + step), np.int64), **past})
        assert rel_err(ref["logits"], got["logits"]) <= TOL["fp16"]
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                assert got[f"kv_pool_{t}_out.{i}"].dtype == np.float16
                pf[f"kv_pool_{t}.{i}"] = got[f"kv_pool_{t}_out.{i}"]
                past[f"past_key_values.{i}.{kv}"] = ref[f"present.{i}.{kv}"]


def test_bf16_pools_match_the_original_in_emulation():
    """bf16 pools through emulate_bf16 (ORT CPU has no bf16 feeds: the emulated model takes the
    pools as float32 holding bf16 values)."""
    name, past_lens = "gpt264_kv_dynamo", (6, 2)
    feeds = decode_feeds(2, max(past_lens), seed=4, hkv=HKV[name])
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=1, seed=3)
    got = _run(make_session(emulate_bf16(_optimize(name, "bf16"))), pf)
    orig = make_session(onnx.load(str(MODELS / f"{name}.onnx")))
    for b, L in enumerate(past_lens):
        ref = run_original(orig, feeds, b, L)
        assert rel_err(ref["logits"][0], got["logits"][b]) <= TOL["bf16"]
        seq = gather_pool(got["kv_pool_v_out.1"], pf["block_tables"][b], L + 1)
        assert rel_err(ref["present.1.value"][0], seq) <= TOL["bf16"]


@pytest.mark.parametrize("static, aot", [(True, 1), (False, 0)])
def test_check_trt_accepts_the_16_bit_pools(static, aot):
    """What `onnx-fuse build` gets: fp16 pools pass check-trt whole, the static decode graph keeps
    the embedded decode kernel (aot = 1), the dynamic one the JIT path."""
    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    prepared, changed = prepare_for_tensorrt(_optimize("llama64_kv_dynamo", "fp16", static=static))
    assert changed == LAYERS
    assert [onnx.helper.get_attribute_value(a) for n in prepared.graph.node
            if n.op_type == "PagedAttention" for a in n.attribute if a.name == "aot"] == [aot] * LAYERS
    assert {_types(prepared.graph.input)[p] for p in POOLS_IN} == {T.FLOAT16}
    assert not check_model(prepared).issues, [vars(i) for i in check_model(prepared).issues]


@pytest.mark.parametrize("precision", sorted(LOW))
def test_verify_feeds_the_pools_in_their_type(precision):
    """optimize(verify=True) compares the 16-bit paged model with the float32 original: the
    original's past goes in as pools of the model's pool type (fp16; bf16 runs emulated)."""
    result = onnx_fuse.optimize(str(MODELS / "llama64_kv_dynamo.onnx"), level=4, target="trt",
                                precision=precision, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    compared = {o["name"] for o in result.report.verify["outputs"]}
    assert {"logits", "present.0.key", "present.1.value"} <= compared
    stats = next(p for p in result.report.pass_summary() if p["pass"] == "precision")["stats"]
    assert stats[f"kv-pools-{precision}"] == 2 * LAYERS   # the report says what the pools became


def test_fp8_pools_after_fp16_precision_have_no_cast_either():
    """--kv-cache-dtype fp8 after --precision fp16 (the shared helper, both passes)."""
    proto = _optimize("gpt264_kv_dynamo", "fp16", static=True, kv_cache_dtype="fp8")
    ins, outs = _types(proto.graph.input), _types(proto.graph.output)
    assert {ins[p] for p in POOLS_IN} == {outs[p] for p in POOLS_OUT} == {T.FLOAT8E4M3FN}
    pool_names = set(POOLS_IN) | set(POOLS_OUT)
    assert not [n for n in proto.graph.node if n.op_type == "Cast" and pool_names & {*n.input, *n.output}]


@pytest.mark.parametrize("keep_io_types", [True, False])
def test_precision_never_makes_a_pool_cast(keep_io_types):
    """The pools are exempt from keep_io_types where the boundary Casts are made: every Cast the
    pass inserts is still in the graph (none is made on a pool and removed afterwards)."""
    from onnx_fuse.passes.precision import PrecisionConversionPass

    model = onnx_fuse.optimize(str(MODELS / "llama64_kv_dynamo.onnx"), level=4, target="trt",
                               float32_plugins=True).model
    p = PrecisionConversionPass("fp16", keep_io_types=keep_io_types)
    p(model)
    casts = [n for n in model.graph if n.op_type == "Cast" and n.name.startswith("precision/cast/")]
    assert p.stats["casts-removed"] == 0
    assert p.stats["casts-inserted"] == len(casts) > 0
    assert not [n.name for n in casts if "kv_pool" in n.name]
    assert p.stats["kv-pools-fp16"] == 2 * LAYERS


def test_precision_leaves_fp8_pools_as_they_are():
    """The precision pass on a float32 model whose pools are already fp8 (kv-cache-fp8 ran
    first): the pools keep float8e4m3fn and the scales float32 while the op goes fp16 (the pass
    used to retype the fp8 pools to the op's 16-bit type)."""
    from onnx_fuse.passes.precision import PrecisionConversionPass

    model = ir.from_proto(_optimize("llama64_kv_dynamo", None, static=True, kv_cache_dtype="fp8"))
    p = PrecisionConversionPass("fp16")
    p(model)
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    ins, outs = _types(proto.graph.input), _types(proto.graph.output)
    assert {ins[x] for x in POOLS_IN} == {outs[x] for x in POOLS_OUT} == {T.FLOAT8E4M3FN}
    assert {ins[f"kv_scale_{t}.{i}"] for i in range(LAYERS) for t in "kv"} == {T.FLOAT}
    assert "kv-pools-fp16" not in p.stats and p.stats["nodes-lowered"] > 0
