"""verify: comparison statistics, tolerance handling, input generation, failure detection."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_fuse.errors import UserError, VerificationError
from onnx_fuse.verify import compare_arrays, make_inputs, parse_shapes, verify


def _unary_model(op: str, **attrs) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_compare_passes_within_tolerance_and_reports_stats():
    ref = np.array([1.0, 2.0, -3.0], np.float32)
    got = ref + np.float32(1e-6)
    d = compare_arrays("y", ref, got, atol=1e-5, rtol=0)
    assert d.passed and 0 < d.max_abs < 2e-6


def test_compare_fails_over_tolerance_shape_dtype_and_nan():
    ref = np.array([1.0, 2.0], np.float32)
    assert not compare_arrays("y", ref, ref + 1, 1e-3, 1e-3).passed
    assert not compare_arrays("y", ref, ref[:1], 1e-3, 1e-3).passed
    assert not compare_arrays("y", ref, ref.astype(np.float64), 1e-3, 1e-3).passed
    nan = ref.copy()
    nan[0] = np.nan
    assert not compare_arrays("y", ref, nan, 1e-3, 1e-3).passed
    assert compare_arrays("y", nan, nan.copy(), 1e-3, 1e-3).passed  # NaN in the same place is equal


def test_compare_integers_exact():
    a = np.arange(4)
    assert compare_arrays("i", a, a.copy(), 0, 0).passed
    b = a.copy()
    b[2] += 1
    assert not compare_arrays("i", a, b, 10, 10).passed


def test_compare_saturates_at_the_low_types_bound():
    """--precision fp16 computes in float16: where the original gives finfo(float32).min (a mask fill that is
    an output), the converted model can only give -65504 (constants are clipped to it) or -inf. With the
    bound those match; a value inside the range that moved (-60000) does not, nor does the wrong sign."""
    lo = float(np.finfo(np.float32).min)
    ref = np.array([lo, 1.0, -lo], np.float32)
    for got in ([-65504.0, 1.0, 65504.0], [-np.inf, 1.0, np.inf]):
        got = np.array(got, np.float32)
        assert not compare_arrays("y", ref, got, 1e-3, 1e-2).passed
        assert compare_arrays("y", ref, got, 1e-3, 1e-2, bound=65504.0).passed
    for got in ([-60000.0, 1.0, 65504.0], [65504.0, 1.0, 65504.0], [-65504.0, 1.5, 65504.0]):
        assert not compare_arrays("y", ref, np.array(got, np.float32), 1e-3, 1e-2, bound=65504.0).passed


def test_compare_saturates_a_scaled_fill():
    """Where(causal, s, finfo.min) * 0.29 as an output (fuzz 25001, seed 3123461614): the original's masked
    entries are -9.8e37, float16's the clipped fill times the scale, -65504 * 0.29 = -18910; that is the
    same computation on the clipped constant, not a wrong value. A value that is neither (-1000, or the
    scale's result on another fill, -9000) still differs."""
    lo = float(np.finfo(np.float32).min)
    ref = np.array([lo * 0.2887, 1.0, 2.0], np.float32)
    assert compare_arrays("y", ref, np.array([-18902.8, 1.0, 2.0], np.float32), 1e-3, 1e-2, bound=65504.0).passed
    for got in ([-1000.0, 1.0, 2.0], [-9000.0, 1.0, 2.0], [18910.0, 1.0, 2.0]):
        assert not compare_arrays("y", ref, np.array(got, np.float32), 1e-3, 1e-2, bound=65504.0).passed


def test_precision_fp16_verifies_a_mask_fill_output():
    """A float32 min mask fill that is a graph output (Where(keep, x W, min), then softmax and P W),
    optimized with --precision fp16 and verified: the Where runs in float16, so the output is -65504 where
    the original has -3.4e38 (within the saturation rule); the old check failed it by 3.4e38."""
    from onnx import numpy_helper

    from onnx_fuse import optimize

    rng = np.random.default_rng(0)
    lo = helper.make_tensor("lo", TensorProto.FLOAT, [], [float(np.finfo(np.float32).min)])
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["s"]), helper.make_node("Where", ["keep", "s", "lo"], ["filled"]),
         helper.make_node("Softmax", ["filled"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "w"], ["y"])],
        "mask_fill_out", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
                          helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 8])],
        [helper.make_tensor_value_info("filled", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [lo, w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    keep = np.ones((2, 8), bool)
    keep[:, 5:] = False
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32), "keep": keep}
    result = optimize(model, level=1, precision="fp16", verify=True, verify_inputs=feeds)
    assert "Cast" in result.report.ops_after, "the model must compute in float16"
    assert result.report.verify["passed"], result.report.verify
    filled = next(o for o in result.report.verify["outputs"] if o["name"] == "filled")
    assert filled["max_abs"] < 0.01  # fp16 rounding of the kept scores; -65504 against -3.4e38 saturated


def test_verify_detects_a_wrong_rewrite():
    original = _unary_model("Relu")
    wrong = _unary_model("Sigmoid")
    assert verify(original, original)["passed"]
    result = verify(original, wrong)
    assert not result["passed"] and result["outputs"][0]["max_abs"] > 0.1
    with pytest.raises(VerificationError, match="output 'y' differs"):
        verify(original, wrong, raise_on_failure=True)


def test_make_inputs_uses_symbolic_dims_consistently_and_is_seeded():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])])
    model = helper.make_model(graph)
    feeds = make_inputs(model, shapes={"batch": (3,), "seq": (5,)}, seed=1)
    assert feeds["a"].shape == feeds["b"].shape == (3, 5)
    again = make_inputs(model, shapes={"batch": (3,), "seq": (5,)}, seed=1)
    np.testing.assert_array_equal(feeds["a"], again["a"])


def test_parse_shapes():
    assert parse_shapes(["input_ids=2x16", "batch=4", "x=1,2,3"]) == {
        "input_ids": (2, 16), "batch": (4,), "x": (1, 2, 3)}
    with pytest.raises(UserError, match="bad --shape"):
        parse_shapes(["input_ids=2xq"])


def test_kv_cache_total_length_is_past_plus_new():
    """total_sequence = past_sequence + sequence, or a decoder's original model cannot run."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["mask"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "total_sequence"]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", 2, "past_sequence", 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", "total_sequence"])])
    model = helper.make_model(graph)
    feeds = make_inputs(model, shapes={"past_sequence": (5,), "sequence": (1,)})
    assert feeds["mask"].shape == (2, 6) and feeds["past"].shape == (2, 2, 5, 4)
    assert make_inputs(model, shapes={"total_sequence": (3,)})["mask"].shape == (2, 3)  # user wins


def test_verify_runs_a_kv_cache_decoder_export():
    from pathlib import Path

    path = Path(__file__).parent / "data" / "models" / "llama_kv_dynamo.onnx"
    if not path.exists():
        pytest.skip("tests/data/models/llama_kv_dynamo.onnx is not there")
    model = onnx.load(path)
    assert verify(model, model)["passed"]


def test_changed_inputs_are_a_clear_user_error():
    original = _unary_model("Relu")
    renamed = _unary_model("Relu")
    renamed.graph.input[0].name = "x2"
    renamed.graph.node[0].input[0] = "x2"
    with pytest.raises(UserError, match=r"changed the model's inputs \(added x2; removed x\)"):
        verify(original, renamed)


def test_masks_unpadded_on_request():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["attention_mask"], ["y"])], "g",
        [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 6])])
    model = helper.make_model(graph)
    assert make_inputs(model)["attention_mask"].min() == 0  # padded by default
    assert make_inputs(model, pad_masks=False)["attention_mask"].min() == 1


def test_index_inputs_stay_inside_the_embedding_table():
    """token_type_ids index a 2-row table: random ids in [0, 4) would crash the original model."""
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "token_type_ids"], ["y"])], "g",
        [helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 3])],
        [onnx.numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    ids = make_inputs(model)["token_type_ids"]
    assert ids.min() >= 0 and ids.max() <= 1 and len(np.unique(ids)) == 2
    assert verify(model, model)["passed"]


def test_inputs_the_original_cannot_run_are_a_user_error():
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UserError, match="fails to run the original model on these inputs.*--inputs"):
        verify(model, model, inputs={"x": np.zeros((2, 8), np.float32),
                                     "shape": np.array([3, 3], np.int64)})


# --- decoders with a KV cache, Optimum's naming ---------------------------------------------------

def _decoder_body(past: bool, suffix: str = "", scale: float = 1.0) -> tuple[list, list]:
    """Nodes of a tiny decoder step: new K/V from the embedded ids, concatenated after the past
    when ``past``; the mask must cover exactly past + new tokens (Mul broadcasts over it) and
    the positions are passed through. Returns (nodes, output names)."""
    s = suffix
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], [f"x{s}"]),
        helper.make_node("Reshape", [f"x{s}", "heads"], [f"xr{s}"]),
        helper.make_node("Transpose", [f"xr{s}"], [f"kn{s}"], perm=[0, 2, 1, 3]),
    ]
    if past:
        nodes += [helper.make_node("Concat", ["past_key_values.0.key", f"kn{s}"], [f"k{s}"], axis=2),
                  helper.make_node("Concat", ["past_key_values.0.value", f"kn{s}"], [f"v{s}"], axis=2)]
    else:
        nodes += [helper.make_node("Identity", [f"kn{s}"], [f"k{s}"]),
                  helper.make_node("Identity", [f"kn{s}"], [f"v{s}"])]
    nodes += [
        helper.make_node("Cast", ["attention_mask"], [f"mf{s}"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", [f"mf{s}", "axes13"], [f"m4{s}"]),
        helper.make_node("Mul", [f"k{s}", f"m4{s}"], [f"km{s}"]),
        helper.make_node("Mul", [f"km{s}", "scale"], [f"kms{s}"]),
        helper.make_node("ReduceSum", [f"kms{s}", "axes2"], [f"y{s}"], keepdims=0),
    ]
    return nodes, [f"y{s}", f"k{s}", f"v{s}"]


def _optimum_decoder(*, merged: bool = False, wrong_no_cache_branch: bool = False) -> onnx.ModelProto:
    inits = [onnx.numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(16, 4) / 64, "emb"),
             onnx.numpy_helper.from_array(np.array([0, 0, 1, 4], np.int64), "heads"),
             onnx.numpy_helper.from_array(np.array([1, 3], np.int64), "axes13"),
             onnx.numpy_helper.from_array(np.array([2], np.int64), "axes2"),
             onnx.numpy_helper.from_array(np.array(1.0, np.float32), "scale"),
             onnx.numpy_helper.from_array(np.array(2.0 if wrong_no_cache_branch else 1.0, np.float32),
                                          "scale_nc")]
    past_shape = ["batch_size", 1, "past_sequence_length", 4]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "past_sequence_length + 1"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, past_shape),
              helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, past_shape)]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("positions", TensorProto.INT64, None)]
    pos = helper.make_node("Identity", ["position_ids"], ["positions"])
    if not merged:
        nodes, names = _decoder_body(True)
        nodes += [helper.make_node("Identity", [n], [o.name]) for n, o in zip(names, outs)] + [pos]
    else:
        inputs.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))
        branches = []
        for with_past, sfx in ((True, "_wp"), (False, "_nc")):
            body, names = _decoder_body(with_past, sfx)
            if not with_past:
                body[-2].input[1] = "scale_nc"
            branches.append(helper.make_graph(
                body, f"branch{sfx}", [], [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                           for n in names]))
        nodes = [helper.make_node("If", ["use_cache_branch"], [o.name for o in outs[:3]],
                                  then_branch=branches[0], else_branch=branches[1]), pos]
    graph = helper.make_graph(nodes, "decoder", inputs, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_optimum_decoder_inputs_cover_past_and_new_tokens():
    model = _optimum_decoder()
    feeds = make_inputs(model)
    past = feeds["past_key_values.0.key"].shape[2]
    new = feeds["input_ids"].shape[1]
    assert past != new and past > 0
    assert feeds["attention_mask"].shape == (2, past + new)       # spans past + new tokens
    np.testing.assert_array_equal(feeds["position_ids"][0], past + np.arange(new))
    np.testing.assert_array_equal(feeds["position_ids"][1], past + np.arange(new))
    result = verify(model, model)     # the original runs on them
    assert result["passed"] and result["cases"] == ["padded-row"]   # its first row fully padded too
    assert make_inputs(model, shapes={"past_sequence_length": (3,), "sequence_length": (1,)})[
        "attention_mask"].shape == (2, 4)


def test_merged_decoder_verifies_both_branches():
    model = _optimum_decoder(merged=True)
    result = verify(model, model)
    assert result["passed"]
    assert result["cases"] == ["use_cache_branch=1", "use_cache_branch=0", "padded-row"]
    names = [o["name"] for o in result["outputs"]]
    assert "logits [use_cache_branch=1]" in names and "logits [use_cache_branch=0]" in names
    from onnx_fuse.verify import input_cases

    (_, with_past), (_, no_past) = input_cases(model)
    assert with_past["use_cache_branch"].tolist() == [True] and no_past["use_cache_branch"].tolist() == [False]
    assert no_past["past_key_values.0.key"].shape[2] == 0
    assert no_past["attention_mask"].shape[1] == no_past["input_ids"].shape[1]
    np.testing.assert_array_equal(no_past["position_ids"][0], np.arange(no_past["input_ids"].shape[1]))


def test_merged_decoder_mask_declared_as_the_no_cache_decoders():
    """optimum.onnx.merge_decoders declares each input as the no-cache decoder has it: the mask is
    [batch_size, sequence_length] like input_ids; the cache branch still reads it over past + new."""
    model = _optimum_decoder(merged=True)
    mask = next(vi for vi in model.graph.input if vi.name == "attention_mask")
    mask.type.tensor_type.shape.dim[1].dim_param = "sequence_length"
    from onnx_fuse.verify import input_cases

    (_, with_past), (_, no_past) = input_cases(model)
    assert with_past["attention_mask"].shape[1] == (with_past["past_key_values.0.key"].shape[2]
                                                    + with_past["input_ids"].shape[1])
    assert no_past["attention_mask"].shape[1] == no_past["input_ids"].shape[1]
    result = verify(model, model)
    assert result["passed"] and result["cases"] == ["use_cache_branch=1", "use_cache_branch=0", "padded-row"]


def test_merged_decoder_difference_in_the_no_cache_branch_is_caught():
    result = verify(_optimum_decoder(merged=True), _optimum_decoder(merged=True, wrong_no_cache_branch=True))
    bad = {o["name"] for o in result["outputs"] if not o["passed"]}
    assert not result["passed"]
    assert "logits [use_cache_branch=0]" in bad and "logits [use_cache_branch=1]" not in bad


def test_past_key_and_past_value_naming():
    graph = helper.make_graph(
        [helper.make_node("Concat", ["past_key.0", "k"], ["present_key.0"], axis=2)], "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"]),
         helper.make_tensor_value_info("past_key.0", TensorProto.FLOAT, ["b", 2, "p", 4]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, ["b", 2, "s", 4])],
        [helper.make_tensor_value_info("present_key.0", TensorProto.FLOAT, None)])
    feeds = make_inputs(helper.make_model(graph))
    assert feeds["attention_mask"].shape[1] == feeds["past_key.0"].shape[2] + feeds["input_ids"].shape[1]


@pytest.mark.parametrize("cross_key,memory,memory_mask", [
    ("past_key_values.0.encoder.key", "encoder_hidden_states", "encoder_attention_mask"),
    ("past_cross.0", "memory", "memory_mask")])  # named for the encoder, or sharing its length
def test_seq2seq_decoder_cross_cache_keeps_the_encoder_length(cross_key, memory, memory_mask):
    """The cross-attention cache and the encoder mask are as long as the encoder output, not the
    decoder's past (+ new tokens): a rewrite may read that length from any of them."""
    f, i = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Concat", ["past_key_values.0.decoder.key", "k"], ["present.0.decoder.key"], axis=2),
         helper.make_node("Shape", [memory], ["enc_shape"])], "g",
        [helper.make_tensor_value_info("input_ids", i, ["b", "s"]),
         helper.make_tensor_value_info(memory, f, ["b", "e", 4]),
         helper.make_tensor_value_info(memory_mask, i, ["b", "e"]),
         helper.make_tensor_value_info("past_key_values.0.decoder.key", f, ["b", 2, "past", 4]),
         helper.make_tensor_value_info(cross_key, f, ["b", 2, "e", 4]),
         helper.make_tensor_value_info("k", f, ["b", 2, "s", 4])],
        [helper.make_tensor_value_info("present.0.decoder.key", f, None),
         helper.make_tensor_value_info("enc_shape", i, None)])
    feeds = make_inputs(helper.make_model(graph), shapes={"e": (6,)})
    assert feeds[cross_key].shape[2] == feeds[memory].shape[1] == feeds[memory_mask].shape[1] == 6
    assert feeds["past_key_values.0.decoder.key"].shape[2] == 5      # the self-attention past
    assert feeds[memory_mask][-1].tolist() == [1, 1, 1, 0, 0, 0]     # still padded


@pytest.mark.parametrize("name", ["llama_kv_dynamo", "gpt2_kv_dynamo"])
def test_dynamo_kv_exports_verify_after_optimization(name):
    from pathlib import Path

    import onnx_fuse

    path = Path(__file__).parent / "data" / "models" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} is not there")
    result = onnx_fuse.optimize(path, level=3, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason


def test_optimum_corpus_decoders_run_on_random_inputs():
    """Optimum exports in the corpus (when it has been built): the original runs on our inputs."""
    from pathlib import Path

    corpus = Path(__file__).parent / "data" / "corpus"
    def decoder_only_kv(p):  # past + attention_mask over past + new (seq2seq decoders have neither form)
        names = [i.name for i in onnx.load(p, load_external_data=False).graph.input]
        return "attention_mask" in names and any(n.startswith("past") for n in names)

    files = [p for p in sorted(corpus.glob("*__optimum__*.onnx")) if corpus.exists() and decoder_only_kv(p)]
    if not files:
        pytest.skip("no Optimum KV-cache exports under tests/data/corpus")
    for path in files[:3]:
        model = onnx.load(path, load_external_data=False)
        feeds = make_inputs(model)
        past = next(v for k, v in feeds.items() if k.startswith("past")).shape[2]
        assert feeds["attention_mask"].shape[1] == past + feeds["input_ids"].shape[1], path.name
        result = verify(str(path), str(path))
        assert result["passed"], path.name


# --- what ORT cannot run ---------------------------------------------------------------------------

def test_custom_op_is_a_one_line_user_error():
    graph = helper.make_graph(
        [helper.make_node("Foo", ["x"], ["y"], domain="my.ops")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("my.ops", 1)])
    with pytest.raises(UserError, match=r"^cannot verify: the model uses the custom op my\.ops::Foo") as info:
        verify(model, model)
    assert "\n" not in str(info.value)


def test_optimized_model_ort_refuses_fails_verification():
    """What users would hit loading the optimized model is a failed verification, not a crash."""
    original = _unary_model("Relu")
    broken = _unary_model("Relu")
    del broken.graph.node[:]
    broken.graph.node.append(helper.make_node("MultiHeadAttention", ["x", "x", "x"], ["y"],
                                              domain="com.microsoft"))  # num_heads missing
    broken.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    result = verify(original, broken)
    assert not result["passed"] and "refuses the optimized model" in result["error"]
    with pytest.raises(VerificationError, match="refuses the optimized model"):
        verify(original, broken, raise_on_failure=True)


def test_big_models_run_from_files_not_inlined(tmp_path, monkeypatch):
    """Over the inline limit ORT loads each side from a file with external data (the 2 GB
    protobuf limit and copies of every weight do not apply); a user's path is used as it is."""
    import onnx_ir as ir

    import onnx_fuse.verify as verify_module

    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    src = tmp_path / "m.onnx"
    onnx.save_model(model, str(src), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    monkeypatch.setattr(verify_module, "_INLINE_LIMIT", 0)
    from onnx_fuse.model_io import load_model

    assert verify(str(src), load_model(src))["passed"]
    wrong = ir.from_proto(model)
    wrong.graph.initializers["w"].const_value = ir.tensor(w * 2, name="w")
    assert not verify(str(src), wrong)["passed"]


def test_session_warns_when_verification_fails(tmp_path, wrong_relu_rule):
    import warnings

    import onnx_fuse

    rule = wrong_relu_rule
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), src)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = onnx_fuse.InferenceSession(str(src), providers=["CPUExecutionProvider"], verify=True,
                                          rules=[str(rule)], cache_dir=False)
    assert any(issubclass(w.category, onnx_fuse.OnnxFuseWarning) and "verification failed" in str(w.message)
               for w in caught)
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0) + x)  # the original runs


def test_session_warns_when_ort_refuses_the_optimized_model(tmp_path):
    """A verification that fails without any output compared (ORT refuses the optimized model)
    still gives the session a one-line reason."""
    import warnings

    import onnx_fuse

    rule = tmp_path / "refused.yaml"
    rule.write_text("""\
rules:
  - name: refused-relu
    doc: Relu(x) -> com.microsoft::MultiHeadAttention without num_heads (ORT refuses it)
    targets: [ort, onnx, trt]
    match: |
      y = Relu(x)
    rewrite: |
      y = com.microsoft::MultiHeadAttention(x, x, x) : like(x)
""")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 4, 8])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), src)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        onnx_fuse.InferenceSession(str(src), providers=["CPUExecutionProvider"], verify=True,
                                   rules=[str(rule)], cache_dir=False)
    msgs = [str(w.message) for w in caught if issubclass(w.category, onnx_fuse.OnnxFuseWarning)]
    assert len(msgs) == 1 and "VerificationError" in msgs[0] and "refuses the optimized model" in msgs[0], msgs


@pytest.mark.parametrize("name", ["llama64_kv_dynamo", "gpt264_kv_dynamo"])  # head size 64: lowered
def test_paged_kv_rewrite_is_verified_against_the_contiguous_original(name):
    """-O4 --target trt turns the KV cache into pools: verify feeds the original's past as
    shuffled pool blocks and compares present.* with the pools read back, and logits as they are."""
    from pathlib import Path

    import onnx_ir as ir

    import onnx_fuse

    path = Path(__file__).parent / "data" / "models" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} is not there")
    result = onnx_fuse.optimize(path, level=4, target="trt", float32_plugins=True, verify=True)
    assert "onnx_fuse::PagedAttention" in result.report.ops_after, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
    names = {o["name"] for o in result.report.verify["outputs"]}
    assert {"logits", "present.0.key", "present.1.value"} <= names
    # the same model with a wrong softmax scale must fail
    wrong = ir.from_proto(ir.to_proto(result.model))
    for node in wrong.graph:
        if node.op_type == "PagedAttention":
            node.attributes["scale"] = ir.AttrFloat32("scale", node.attributes["scale"].value * 2)
    bad = verify(str(path), wrong)
    assert not bad["passed"]
    assert any(o["name"] == "logits" and not o["passed"] for o in bad["outputs"])
    with pytest.raises(UserError, match="paged-KV model is verified from random inputs only"):
        verify(str(path), result.model, inputs=make_inputs(onnx.load(path)))


def _trilu_band_step(window: int, band: bool = True, merged: bool = False) -> onnx.ModelProto:
    """A one-head decoder step whose sliding band is written with Trilu, as older transformers
    did (Mistral's triu(mask, diagonal=-W), Gemma 2's tril(ones, diagonal=-W)): key j is dropped
    for the query at P + i when j <= P + i - W, i.e. Trilu(ones, k = P - W). ``band=False``: the
    same step with the band lost (a wrong rewrite); ``merged``: the step in both branches of an
    If on ``use_cache_branch``, as Optimum's merged decoders hold it."""
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    nodes = [
        helper.make_node("Unsqueeze", ["hidden", "axis1"], ["q"]),                          # [b, 1, s, 4]
        helper.make_node("Concat", ["past_key_values.0.key", "q"], ["present.0.key"], axis=2),
        helper.make_node("Concat", ["past_key_values.0.value", "q"], ["present.0.value"], axis=2),
        helper.make_node("Transpose", ["present.0.key"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),                                # [b, 1, s, t]
        helper.make_node("Shape", ["hidden"], ["s"], start=1, end=2),
        helper.make_node("Shape", ["present.0.key"], ["t"], start=2, end=3),
        helper.make_node("Shape", ["past_key_values.0.key"], ["p1"], start=2, end=3),
        helper.make_node("Squeeze", ["p1"], ["p"]),
        helper.make_node("Concat", ["s", "t"], ["st"], axis=0),
        helper.make_node("ConstantOfShape", ["st"], ["ones"], value=helper.make_tensor("v", TensorProto.BOOL, [1], [True])),
        helper.make_node("Trilu", ["ones", "p"], ["causal"], upper=0),
        helper.make_node("Sub", ["p", "w"], ["pw"]),
        helper.make_node("Trilu", ["ones", "pw"], ["far"], upper=0),
        helper.make_node("Not", ["far"], ["near"]),
        helper.make_node("And", ["causal", "near"] if band else ["causal", "causal"], ["keep"]),
        helper.make_node("Cast", ["attention_mask"], ["am_b"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["am_b", "axes12"], ["am4"]),                         # [b, 1, 1, t]
        helper.make_node("And", ["keep", "am4"], ["keep4"]),
        helper.make_node("Where", ["keep4", "scores", "ninf"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "present.0.value"], ["out"]),
    ]
    inits = [helper.make_tensor("axis1", i64, [1], [1]), helper.make_tensor("axes12", i64, [2], [1, 2]),
             helper.make_tensor("w", i64, [], [window]), helper.make_tensor("ninf", f, [], [-1e9])]
    past = lambda name: helper.make_tensor_value_info(name, f, ["b", 1, "p", 4])  # noqa: E731
    inputs = [helper.make_tensor_value_info("hidden", f, ["b", "s", 4]),
              helper.make_tensor_value_info("attention_mask", i64, ["b", "t"]),
              past("past_key_values.0.key"), past("past_key_values.0.value")]
    outs = [helper.make_tensor_value_info(n, f, None) for n in ("out", "present.0.key", "present.0.value")]
    if merged:
        branches = []
        for sfx in ("_wp", "_nc"):
            body = onnx.GraphProto()
            body.CopyFrom(helper.make_graph(nodes, f"branch{sfx}", [], outs))
            rename = {o: o + sfx for n in body.node for o in n.output}
            for n in body.node:
                n.input[:] = [rename.get(x, x) for x in n.input]
                n.output[:] = [rename[o] for o in n.output]
            for o in body.output:
                o.name = rename[o.name]
            branches.append(body)
        inputs.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))
        nodes = [helper.make_node("If", ["use_cache_branch"], [o.name for o in outs],
                                  then_branch=branches[0], else_branch=branches[1])]
    graph = helper.make_graph(nodes, "step", inputs, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("merged", [False, True])
def test_a_window_written_as_a_trilu_diagonal_makes_the_past_longer(merged):
    """window_constant reads a Trilu diagonal of P - W (or -W) too, and inside an If's branches
    (a merged decoder): with the past at W + 1 a step that lost the band fails; at the old 5 + 8
    tokens a window of 16 never showed and it passed."""
    import onnx_ir as ir

    from onnx_fuse.verify import window_constant

    original = _trilu_band_step(16, merged=merged)
    assert window_constant(original) == 16 and window_constant(ir.from_proto(original)) == 16
    bad = verify(original, _trilu_band_step(16, band=False, merged=merged))
    assert not bad["passed"]
    want = ["out [use_cache_branch=1]"] if merged else ["out"]   # the no-cache branch has no past
    want.append("out [padded-row]")   # the first case's feeds (the long past), row 0 fully padded
    assert [o["name"] for o in bad["outputs"] if not o["passed"]] == want
    assert verify(original, _trilu_band_step(16, merged=merged))["passed"]


@pytest.mark.parametrize("k, data_from_window, want", [(-16, False, 16), (1, False, 0), (1, True, 0)])
def test_window_constant_reads_a_constant_trilu_diagonal(k, data_from_window, want):
    """tril(ones, diagonal=-W) gives W; a causal triu(diagonal=1) no window; a constant that
    reaches a Trilu's data, not its diagonal, none either."""
    from onnx_fuse.verify import window_constant

    nodes = [helper.make_node("Add", ["x", "w"], ["xw"])] if data_from_window else []
    nodes.append(helper.make_node("Trilu", ["xw" if data_from_window else "x", "k"], ["y"], upper=0))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, ["s", "t"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["s", "t"])],
        [helper.make_tensor("k", TensorProto.INT64, [], [k]), helper.make_tensor("w", TensorProto.INT64, [], [16])])
    assert window_constant(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])) == want


def test_a_rank0_bool_input_is_fed_as_an_array():
    """An If on a scalar condition input: rng.random([]) < 0.5 is a numpy.bool scalar, which ORT
    refuses ("Unable to handle object of type numpy.bool"), so verify said it could not run the
    original and `onnx-fuse run` was an internal error."""
    v = helper.make_tensor_value_info
    branch = lambda op, out: helper.make_graph([helper.make_node(op, ["x"], [out])], op, [],  # noqa: E731
                                               [v(out, TensorProto.FLOAT, [4])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu", "t"),
                          else_branch=branch("Neg", "e"))], "g",
        [v("c", TensorProto.BOOL, []), v("x", TensorProto.FLOAT, [4])], [v("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    feeds = make_inputs(model)
    assert isinstance(feeds["c"], np.ndarray) and feeds["c"].shape == () and feeds["c"].dtype == np.bool_
    assert verify(model, model)["passed"]
