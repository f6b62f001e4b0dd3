"""``onnx-fuse run``: ORT runs with random or .npz inputs, Polygraphy comparisons, plan errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnx_fuse.errors import UserError
from onnx_fuse.plugins.runner import compare_outputs, is_plan, pool_aliases, run
from onnx_fuse.plugins.trt_backend import gpu_identity, try_load_backend


def _cli(argv):
    from onnx_fuse.cli.main import main

    return main(argv)


def test_run_ort_random_inputs_are_seeded(encoder):
    a = run(encoder, backend="ort", seed=3, shapes={"batch": (2,), "seq": (8,)})
    b = run(encoder, backend="ort", seed=3, shapes={"batch": (2,), "seq": (8,)})
    out = a.outputs["last_hidden_state"]
    assert out.shape == (2, 8, 32) and out.dtype == np.float32
    np.testing.assert_array_equal(out, b.outputs["last_hidden_state"])
    assert a.passed is None


def test_run_ort_compare_passes_against_unoptimized_ort(encoder):
    r = run(encoder, backend="ort", compare=True)
    assert r.passed is True
    assert r.comparison[0]["name"] == "last_hidden_state" and r.comparison[0]["passed"]


def test_run_with_npz_inputs(encoder, tmp_path):
    feeds = {"input_ids": np.array([[1, 2, 3]], np.int64),
             "attention_mask": np.ones((1, 3), np.int64)}
    np.savez(tmp_path / "in.npz", **feeds)
    r = run(encoder, backend="ort", inputs=str(tmp_path / "in.npz"))
    assert r.outputs["last_hidden_state"].shape == (1, 3, 32)
    np.savez(tmp_path / "partial.npz", input_ids=feeds["input_ids"])
    with pytest.raises(UserError, match="lacks attention_mask"):
        run(encoder, backend="ort", inputs=str(tmp_path / "partial.npz"))


def test_polygraphy_comparison_detects_a_difference():
    ref = {"y": np.ones((2, 3), np.float32)}
    got = {"y": np.ones((2, 3), np.float32) + np.float32(0.5)}
    ok, rows = compare_outputs(ref, got, ref_name="ref", got_name="got", rtol=None, atol=None)
    assert not ok and rows[0]["max_abs"] == pytest.approx(0.5)
    ok, _ = compare_outputs(ref, got, ref_name="ref", got_name="got", rtol=0.0, atol=0.6)
    assert ok


def test_plan_detection(tmp_path):
    assert is_plan(tmp_path / "m.plan") and not is_plan(tmp_path / "m.onnx")


def test_plan_with_ort_backend_is_refused(tmp_path):
    plan = tmp_path / "m.plan"
    plan.write_bytes(b"x")
    with pytest.raises(UserError, match="--backend trt"):
        run(plan, backend="ort")


def test_running_a_plan_without_gpu_says_why(encoder, tmp_path):
    backend, why = try_load_backend()
    if backend is None:
        pytest.skip(why)
    if gpu_identity() != "none":
        pytest.skip("this machine has a GPU")
    from onnx_fuse.plugins.engine_builder import BuildOptions, build_engine, parse_profiles

    plan = tmp_path / "m.plan"
    build_engine(encoder, plan, BuildOptions(profiles=parse_profiles(
        ["input_ids:1x1,2x16,4x64", "attention_mask:1x1,2x16,4x64"]), cache_dir="",
        progress=False))
    with pytest.raises(UserError, match="needs an NVIDIA GPU"):
        run(plan, backend="trt", compare=True)


def test_run_cli(encoder, tmp_path, capsys):
    assert _cli(["run", str(encoder), "--compare", "--shape", "batch=1", "--shape", "seq=4",
                 "--save-outputs", str(tmp_path / "out.npz")]) == 0
    out = capsys.readouterr().out
    assert "last_hidden_state" in out and "PASSED" in out
    with np.load(tmp_path / "out.npz") as saved:
        assert saved["last_hidden_state"].shape == (1, 4, 32)
    assert _cli(["run", str(tmp_path / "missing.onnx")]) == 2


def test_run_cli_compare_failure_exits_1(encoder, capsys):
    # ORT's fused kernels (LayerNorm, Gelu, MatMul+Add) reorder float sums, so at zero tolerance
    # the optimized run differs from the unoptimized one in the last bits.
    probe = run(encoder, backend="ort", compare=True, rtol=0.0, atol=0.0)
    if probe.comparison[0]["max_abs"] == 0.0:
        pytest.skip("ORT's optimized and unoptimized runs are bit-identical on this machine")
    assert _cli(["run", str(encoder), "--compare", "--rtol", "0", "--atol", "0"]) == 1
    assert "FAILED" in capsys.readouterr().out


# --alias-pools: the paged-KV pool outputs bound to their inputs' buffers (docs/paged_kv.md)

F16 = np.dtype(np.float16)
POOL = ((8, 4, 1, 64), F16)


def test_pool_aliases_pair_each_pool_output_with_its_input():
    inputs = {"input_ids": ((2, 1), np.dtype(np.int64)), "kv_pool_k.0": POOL, "kv_pool_v.0": POOL,
              "kv_pool_k.1": POOL, "kv_pool_v.1": POOL, "block_tables": ((2, 2), np.dtype(np.int32))}
    outputs = {"logits": ((2, 1, 128), np.dtype(np.float32)), "kv_pool_k_out.0": POOL,
               "kv_pool_v_out.0": POOL, "kv_pool_k_out.1": POOL, "kv_pool_v_out.1": POOL,
               "kv_pool_k_out.7": POOL}   # no kv_pool_k.7 input: its own buffer
    assert pool_aliases(inputs, outputs) == {
        "kv_pool_k_out.0": "kv_pool_k.0", "kv_pool_v_out.0": "kv_pool_v.0",
        "kv_pool_k_out.1": "kv_pool_k.1", "kv_pool_v_out.1": "kv_pool_v.1"}
    assert pool_aliases({"kv_pool_k.0": POOL}, {"logits": POOL, "kv_pool_k_out": POOL}) == {}


@pytest.mark.parametrize("out_spec, match", [
    (((8, 4, 1, 32), F16), r"kv_pool_k_out.0 \(8x4x1x32 float16\) cannot share the buffer of "
                           r"kv_pool_k.0 \(8x4x1x64 float16\)"),
    (((8, 4, 1, 64), np.dtype(np.float32)), r"kv_pool_k_out.0 \(8x4x1x64 float32\)"),
])
def test_pool_aliases_refuse_a_pair_that_cannot_share_a_buffer(out_spec, match):
    with pytest.raises(UserError, match=match):
        pool_aliases({"kv_pool_k.0": POOL}, {"kv_pool_k_out.0": out_spec})


def test_alias_pools_needs_the_trt_backend(encoder, capsys):
    with pytest.raises(UserError, match="--alias-pools binds TensorRT buffers"):
        run(encoder, backend="ort", alias_pools=True)
    assert _cli(["run", str(encoder), "--alias-pools"]) == 2
    assert "--alias-pools binds TensorRT buffers" in capsys.readouterr().err


def _pool_update_model() -> onnx.ModelProto:
    """kv_pool_k_out.0 = kv_pool_k.0 + 1: an output that is right only when it was written."""
    from onnx import TensorProto as T
    from onnx import helper as h

    shape = list(POOL[0])
    graph = h.make_graph(
        [h.make_node("Add", ["kv_pool_k.0", "one"], ["kv_pool_k_out.0"])], "pool",
        [h.make_tensor_value_info("kv_pool_k.0", T.FLOAT16, shape)],
        [h.make_tensor_value_info("kv_pool_k_out.0", T.FLOAT16, shape)],
        [h.make_tensor("one", T.FLOAT16, [], [1.0])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_alias_pools_reads_the_update_from_the_input_buffer(tmp_path):
    """On a GPU the aliased output is the input buffer read back after the run: it holds the
    update (pool + 1), so the engine wrote through the shared address; the host feed is
    unchanged."""
    backend, why = try_load_backend()
    if backend is None:
        pytest.skip(f"needs a TensorRT runtime: {why}")
    gpu = gpu_identity()
    if gpu == "none":
        pytest.skip("needs an NVIDIA GPU to run a plan (TensorRT builds here but cannot run)")
    if backend.is_rtx and "sm_90" in gpu:
        pytest.skip(f"{backend.label}'s runtime refuses {gpu}; needs full TensorRT there")
    from onnx_fuse.plugins.engine_builder import BuildOptions, build_engine

    model = tmp_path / "pool.onnx"
    onnx.save(_pool_update_model(), model)
    plan = tmp_path / "pool.plan"
    build_engine(model, plan, BuildOptions(cache_dir="", progress=False))
    pool = np.random.default_rng(0).standard_normal(POOL[0]).astype(np.float16)
    feeds = {"kv_pool_k.0": pool.copy()}
    got = run(plan, backend="trt", alias_pools=True, **_npz(tmp_path, feeds))
    np.testing.assert_array_equal(got.outputs["kv_pool_k_out.0"], pool + np.float16(1))
    np.testing.assert_array_equal(feeds["kv_pool_k.0"], pool)


def _npz(tmp_path, feeds) -> dict:
    path = tmp_path / "feeds.npz"
    np.savez(path, **feeds)
    return {"inputs": str(path)}
