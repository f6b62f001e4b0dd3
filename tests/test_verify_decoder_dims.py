"""verify's inputs for KV-cache decoders whose dim names follow no convention (b, s, p, t): the
mask's length is tied to past + new by where the dims sit (verify.length_ties), for the
whole-model check and for the per-rewrite checks' cut-outs alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.verify import length_ties, make_inputs, make_session, verify

MODELS = Path(__file__).parent / "data" / "models"


def _rename_dims(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """``model`` with its dim names replaced word by word, inside expressions too
    ('past_sequence + sequence' -> 'p + s'), as an exporter given those names writes them."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in [*out.graph.input, *out.graph.output, *out.graph.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_param = " ".join(names.get(w, w) for w in d.dim_param.split())
    return out


SHORT = {"batch": "b", "sequence": "s", "past_sequence": "p", "total_sequence": "t"}


def _hidden_state_step(decode: bool) -> onnx.ModelProto:
    """A decoder step fed its hidden state (no input_ids) whose mask must span past + new: the
    key positions Range(0, P + S) are anded with the mask (a mask of another length cannot
    broadcast), as HF's exports build the causal + padding mask. ``decode``: S fixed at 1."""
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    s = 1 if decode else "s"
    nodes = [
        helper.make_node("Shape", ["past_key_values.0.key"], ["p"], start=2, end=3),
        helper.make_node("Shape", ["hidden"], ["s"], start=1, end=2),
        helper.make_node("Add", ["p", "s"], ["t"]),
        helper.make_node("Squeeze", ["t"], ["t0"]),
        helper.make_node("Range", ["zero", "t0", "one"], ["kpos"]),
        helper.make_node("Unsqueeze", ["kpos", "axis0"], ["kpos2"]),               # [1, T]
        helper.make_node("GreaterOrEqual", ["kpos2", "zero"], ["valid"]),
        helper.make_node("Cast", ["attention_mask"], ["am"], to=TensorProto.BOOL),  # [B, T]
        helper.make_node("And", ["valid", "am"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["y"], to=f),
        helper.make_node("Reshape", ["hidden", "heads"], ["k4"]),                  # [B, S, 2, 4]
        helper.make_node("Transpose", ["k4"], ["k"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["past_key_values.0.key", "k"], ["present.0.key"], axis=2),
    ]
    inits = [helper.make_tensor("zero", i64, [], [0]), helper.make_tensor("one", i64, [], [1]),
             helper.make_tensor("axis0", i64, [1], [0]), helper.make_tensor("heads", i64, [4], [0, 0, 2, 4])]
    graph = helper.make_graph(nodes, "step", [
        helper.make_tensor_value_info("hidden", f, ["b", s, 8]),
        helper.make_tensor_value_info("attention_mask", i64, ["b", "t"]),
        helper.make_tensor_value_info("past_key_values.0.key", f, ["b", 2, "p", 4]),
    ], [helper.make_tensor_value_info("y", f, None),
        helper.make_tensor_value_info("present.0.key", f, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("decode", [False, True])
def test_hidden_state_decoder_with_short_dim_names_gets_a_mask_over_past_and_new(decode):
    """Before, only input_ids / inputs_embeds told the new tokens and only total_x = past_x + x
    names tied the mask: this step got a mask of 8 beside a past of 8 (+ S) and failed to run."""
    model = _hidden_state_step(decode)
    assert length_ties(model) == {"t": ("p", 1 if decode else "s")}
    feeds = make_inputs(model)
    make_session(model).run(None, feeds)       # the original runs on them
    past, new = feeds["past_key_values.0.key"].shape[2], feeds["hidden"].shape[1]
    assert past != new and feeds["attention_mask"].shape == (2, past + new)
    assert verify(model, model)["passed"]
    # the user's value of a dim wins; a mask whose length something else fixes is left alone
    assert make_inputs(model, shapes={"t": (3,)})["attention_mask"].shape == (2, 3)
    shared = onnx.ModelProto()
    shared.CopyFrom(model)
    shared.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "p"
    assert length_ties(shared) == {}
    assert make_inputs(shared)["attention_mask"].shape[1] == past


@pytest.mark.parametrize("name", ["gpt264_kv_dynamo", "llama64_kv_dynamo"])
def test_short_dim_names_check_every_rewrite_the_long_names_check(name):
    """A committed dynamo decoder with its dims renamed b, s, p, t: verify passes and the
    per-rewrite checks cover as many rewrites as with the exporter's names. Before, the
    attention cut-outs got a mask of 8 keys beside p + s = 16 and ORT refused them ('original
    refuses random inputs'), so those rewrites went unchecked."""
    long = onnx.load(str(MODELS / f"{name}.onnx"))
    short = _rename_dims(long, SHORT)
    assert {d.dim_param for vi in short.graph.input for d in vi.type.tensor_type.shape.dim
            if d.dim_param} == {"b", "s", "p", "t"}
    counts = []
    for model in (long, short):
        result = onnx_fuse.optimize(model, level=3, verify=True)
        assert result.report.status == "PASSED", result.report.status_reason
        rw = result.report.verify["rewrites"]
        assert not [r for r in rw["unchecked_reasons"] if "refuses random inputs" in r], rw["unchecked_reasons"]
        counts.append((rw["checked"], rw["unchecked"]))
    assert counts[0] == counts[1]


def test_verify_inputs_run_every_generated_decoder_step(monkeypatch):
    """The differential fuzzer's decoder steps (tools/fuzz_decoder.py: hidden-state input, Optimum's
    or short dim names, S symbolic or fixed at 1, windows, sinks, fp16, padding): the original runs
    on verify's inputs, both branches where there are two. Before, 101 of the first 150 seeds gave
    a mask of the wrong length (every decode step, every short-named one)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "tools"))
    from fuzz_motifs import make_decoder_case

    from onnx_fuse.verify import input_cases, window_constant

    failed = []
    for seed in range(60):
        model = make_decoder_case(seed).model
        sess = make_session(model, quiet=True)
        for _, feeds in input_cases(model, window=window_constant(model)):
            try:
                sess.run(None, feeds)
            except Exception as exc:  # noqa: BLE001 - ORT's refusal, whatever its type
                failed.append((seed, str(exc).splitlines()[0][-120:]))
    assert not failed, failed
