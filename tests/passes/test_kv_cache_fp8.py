"""kv_cache_dtype="fp8" (passes/kv_cache_fp8.py): the paged KV pools become float8e4m3fn with
per-layer scale inputs, on the real decode exports tests/data/models/{llama64,gpt264}_kv_dynamo
with the query length fixed at 1 (as tests/targets/test_trt_paged_kv.py fixes it).

The converted model runs in ONNX Runtime through the reference (onnx_fuse.reference.ort_ops: the
fp8 registration) on pools quantized from the same past the original model reads dequantized:
the logits differ from the original's only by the e4m3 rounding of the new token's K/V, and the
pools come back with every old byte unchanged and the new token written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import yaml

import onnx_fuse
from onnx_fuse.cli.main import main
from onnx_fuse.errors import UserError
from onnx_fuse.passes.kv_cache_fp8 import FP8_HEAD_DIMS
from onnx_fuse.targets.paged_kv_feeds import paged_inputs_from_contiguous, round_e4m3, run_paged
from onnx_fuse.verify import make_session
from tests.decode_models import static_decode

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
HKV = {"llama64_kv_dynamo": 1, "gpt264_kv_dynamo": 2}
LAYERS, D, VOCAB = 2, 64, 128
F8 = onnx.TensorProto.FLOAT8E4M3FN



def _types(values) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in values}


@pytest.mark.parametrize("name", sorted(HKV))
def test_pools_become_fp8_with_scale_inputs(name):
    model = ir.to_proto(onnx_fuse.optimize(static_decode(name), level=4, target="trt", float32_plugins=True,
                                           kv_cache_dtype="fp8").model)
    onnx.checker.check_model(model, full_check=True)
    ins, outs = _types(model.graph.input), _types(model.graph.output)
    for i in range(LAYERS):
        for t in "kv":
            assert ins[f"kv_pool_{t}.{i}"] == F8 and outs[f"kv_pool_{t}_out.{i}"] == F8
            assert ins[f"kv_scale_{t}.{i}"] == onnx.TensorProto.FLOAT
            scale = next(v for v in model.graph.input if v.name == f"kv_scale_{t}.{i}")
            assert [d.dim_value for d in scale.type.tensor_type.shape.dim] == [HKV[name]]
    nodes = [n for n in model.graph.node if n.op_type == "PagedAttention"]
    assert [list(n.input[7:]) for n in nodes] == [[f"kv_scale_k.{i}", f"kv_scale_v.{i}"]
                                                  for i in range(LAYERS)]
    assert outs["logits"] == onnx.TensorProto.FLOAT   # the rest keeps its types


def _fp8_feeds(name, past_lens, seed):
    """Original feeds (past = e4m3-rounded values) and the fp8 model's (pools of their bytes, NaN
    bytes in the unused slots, per-kv-head scales): the shared harness verify and the fuzzer use."""
    rng = np.random.default_rng(seed)
    B, P, hkv = len(past_lens), max(past_lens), HKV[name]
    feeds = {"input_ids": rng.integers(0, VOCAB, (B, 1)).astype(np.int64)}
    scales = {}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            x = rng.standard_normal((B, hkv, P, D)).astype(np.float32) * (2.0 if kv == "key" else 0.5)
            feeds[f"past_key_values.{i}.{kv}"], scales[f"kv_pool_{kv[0]}.{i}"] = round_e4m3(x)
    paged = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=1, seed=seed, scales=scales)
    return feeds, paged


def _run_fp8(model, feeds):
    return run_paged(make_session(model), model, feeds)


@pytest.mark.parametrize("name", sorted(HKV))
def test_fp8_model_matches_the_original_up_to_the_new_tokens_rounding(name):
    fp8 = ir.to_proto(onnx_fuse.optimize(static_decode(name), level=4, target="trt", float32_plugins=True,
                                         kv_cache_dtype="fp8").model)
    orig = make_session(onnx.load(str(MODELS / f"{name}.onnx")))
    past_lens = (7, 2)
    feeds, paged = _fp8_feeds(name, past_lens, seed=5)
    got = _run_fp8(fp8, paged)
    for b, L in enumerate(past_lens):
        f = {"input_ids": feeds["input_ids"][b:b + 1], "attention_mask": np.ones((1, L + 1), np.int64)}
        f.update({k: v[b:b + 1, :, :L] for k, v in feeds.items() if k.startswith("past_key_values.")})
        ref = orig.run(["logits"], f)[0][0]
        err = np.linalg.norm(got["logits"][b] - ref) / np.linalg.norm(ref)
        assert 0 < err < 0.05, err   # e4m3 rounding of the new token's K/V, and only that
    for key in [k for k in paged if k.startswith("kv_pool_")]:
        out = got[key.replace("kv_pool_k", "kv_pool_k_out").replace("kv_pool_v", "kv_pool_v_out")]
        changed = np.argwhere((out != paged[key]).any(axis=(2, 3)))
        # only the slot of position L (the new token) of each sequence changes
        want = {(int(paged["block_tables"][b, L // 4]), L % 4) for b, L in enumerate(past_lens)}
        assert {tuple(map(int, c)) for c in changed} == want


@pytest.mark.parametrize("name", sorted(HKV))
def test_verify_compares_fp8_pools_at_e4m3_tolerance(name):
    """verify feeds an fp8-pool model the original's past rounded to e4m3 (the original reruns on
    that) and compares at e4m3's tolerance: it passes, and a doubled softmax scale fails."""
    from onnx_fuse.verify import FP8_NOTE, verify

    result = onnx_fuse.optimize(static_decode(name), level=4, target="trt", float32_plugins=True,
                                kv_cache_dtype="fp8", verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    assert FP8_NOTE in result.report.verify["notes"]
    assert {"logits", "present.0.key", "present.1.value"} <= {o["name"] for o in result.report.verify["outputs"]}
    wrong = ir.from_proto(ir.to_proto(result.model))
    for node in wrong.graph:
        if node.op_type == "PagedAttention":
            node.attributes["scale"] = ir.AttrFloat32("scale", node.attributes["scale"].value * 2)
    bad = verify(static_decode(name), wrong)
    assert any(o["name"] == "logits" and not o["passed"] for o in bad["outputs"]), bad["outputs"]


def test_fp16_precision_keeps_the_scales_float32_and_passes_check_trt():
    from onnx_fuse.plugins.check_trt import check_model
    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    model = ir.to_proto(onnx_fuse.optimize(static_decode("llama64_kv_dynamo"), level=4,
                                           target="trt", precision="fp16",
                                           kv_cache_dtype="fp8").model)
    assert _types(model.graph.input)["kv_scale_k.0"] == onnx.TensorProto.FLOAT
    assert _types(model.graph.input)["kv_pool_k.0"] == F8
    prepared, _ = prepare_for_tensorrt(model)
    aot = [a.i for n in prepared.graph.node if n.op_type == "PagedAttention"
           for a in n.attribute if a.name == "aot"]
    assert aot == [0] * LAYERS   # fp8 pools run on the JIT path
    assert not check_model(prepared).issues, [vars(i) for i in check_model(prepared).issues]


@pytest.mark.parametrize("kw, match", [
    (dict(model="dynamic"), "decode-only"),
    (dict(level=3), "only -O4 --target trt"),
    (dict(target="ort", level=4), "only -O4 --target trt"),
    (dict(kv_cache_dtype="int8"), "unknown KV cache dtype 'int8'"),
    (dict(model="bert"), "no paged KV cache"),
])
def test_refusals_are_user_errors(kw, match):
    kw = {"level": 4, "target": "trt", "kv_cache_dtype": "fp8", "float32_plugins": True, **kw}
    model = kw.pop("model", "static")
    src = {"static": lambda: static_decode("gpt264_kv_dynamo"),
           "dynamic": lambda: onnx.load(str(MODELS / "gpt264_kv_dynamo.onnx")),
           "bert": lambda: onnx.load(str(MODELS / "bert_sdpa_dynamo.onnx"))}[model]()
    with pytest.raises(UserError, match=match):
        onnx_fuse.optimize(src, **kw)


def test_cli_option_and_its_refusal(tmp_path, capsys):
    src = tmp_path / "decode.onnx"
    onnx.save(static_decode("gpt264_kv_dynamo"), src)
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-O", "4", "--target", "trt",
                 "--kv-cache-dtype", "fp8", "--float32-plugins", "--verify",
                 "-q"]) == 0   # verified at e4m3 tolerance
    assert _types(onnx.load(str(out)).graph.input)["kv_pool_v.1"] == F8
    capsys.readouterr()
    dyn = tmp_path / "o2.onnx"
    assert main(["optimize", str(MODELS / "gpt264_kv_dynamo.onnx"), "-o", str(dyn), "-O", "4",
                 "--target", "trt", "--kv-cache-dtype", "fp8", "--float32-plugins", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decode-only" in err[0] and "Traceback" not in err[0]
    assert not dyn.exists()


def test_head_sizes_are_the_plugin_contract():
    from onnx_fuse.plugins import paged_attention_plugin as pa

    contract = yaml.safe_load((Path(pa.__file__).parent / "paged_attention.yaml").read_text())
    assert FP8_HEAD_DIMS == pa.FP8_HEAD_DIMS == tuple(contract["kernel"]["fp8_pool"]["head_dims"])


def test_a_cast_between_a_pool_and_the_op_is_refused():
    """fp8 pool bytes are state and never converted: a pool reaching the op through a Cast (no
    pass of ours makes one; precision exempts the pools) is refused whole, nothing half
    converted. The pass used to remove such a Cast and retype the pool behind it."""
    from onnx_fuse.passes.kv_cache_fp8 import KvCacheFp8Pass

    model = onnx_fuse.optimize(static_decode("gpt264_kv_dynamo"), level=4, target="trt",
                               float32_plugins=True).model
    node = next(n for n in model.graph if n.op_type == "PagedAttention")
    pool = node.inputs[3]
    cast = ir.node("Cast", [pool], attributes={"to": ir.DataType.FLOAT}, name="pool_cast",
                   outputs=[ir.Value(name="pool_cast_out", type=pool.type, shape=pool.shape)])
    model.graph.insert_before(node, cast)
    node.replace_input_with(3, cast.outputs[0])
    before = _types(ir.to_proto(model).graph.input)
    with pytest.raises(UserError, match=r"k or v pool is not a graph input .*no Cast between"):
        KvCacheFp8Pass()(model)
    assert _types(ir.to_proto(model).graph.input) == before


def test_decode_is_read_from_any_of_q_k_v():
    """q, k and v share S (the op's contract): a query whose length shape inference left unknown
    (RoPE broadcast against positions of unnamed length) is still decode when v's is 1."""
    from onnx_fuse.passes.kv_cache_fp8 import KvCacheFp8Pass

    model = onnx_fuse.optimize(static_decode("gpt264_kv_dynamo"), level=4, target="trt",
                               float32_plugins=True).model
    nodes = [n for n in model.graph if n.op_type == "PagedAttention"]
    for n in nodes:
        for v in n.inputs[:2]:
            v.shape = ir.Shape([v.shape[0], ir.SymbolicDim("unk__r9_0"), v.shape[2]])
        assert nodes[0].inputs[2].shape[1] == 1
    KvCacheFp8Pass()(model)
    assert {n.inputs[3].type.dtype for n in nodes} == {ir.DataType.FLOAT8E4M3FN}
    # the pass infers shapes again, so S is what the model proves, not what a value was left with:
    # the export with a symbolic query length is refused
    fresh = onnx_fuse.optimize(str(MODELS / "gpt264_kv_dynamo.onnx"), level=4, target="trt",
                               float32_plugins=True).model
    assert [n for n in fresh.graph if n.op_type == "PagedAttention"]
    with pytest.raises(UserError, match="decode-only"):   # nothing says S = 1: refused
        KvCacheFp8Pass()(fresh)


@pytest.mark.parametrize("fp16", [False, True])
def test_multi_layer_decode_with_range_positions_pages_and_verifies(fp16):
    """Positions Range(P, P + S) on a 3-layer decode step: shape inference carries S = 1 through
    each PagedAttention (passes/_op_shapes.py), so every layer takes fp8 pools; verify passes."""
    import sys

    from onnx_fuse.verify import FP8_NOTE, verify

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from fuzz_motifs import make_decoder_case

    case = make_decoder_case(7, head=64, heads=4, kv_heads=2, layers=3, window=0, sinks=False, upcast=fp16,
                             padded=False, kv_fp8=True, fp16=fp16, decode=True, positions="range",
                             repeat="hf", present_dims=True, dim_names="short")
    result = onnx_fuse.optimize(case.model, level=4, target="trt", float32_plugins=True, kv_cache_dtype="fp8")
    assert result.report.rule_fires.get("trt-paged-kv") == 3
    got = verify(case.model, result.model, shapes={k: tuple(a.shape) for k, a in case.feeds.items()})
    assert FP8_NOTE in got["notes"]
    outputs = [o for o in got["outputs"] if not o["name"].startswith("attention ")]
    assert got["passed"] and len(outputs) == 7, got["outputs"]
    assert len(got["outputs"]) == 7 + 3   # one fp8 attention check per layer (fp8_attention_check)
