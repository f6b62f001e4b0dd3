"""Paged KV for a cropped sliding-window cache (transformers 5's DynamicSlidingWindowLayer, GPT-OSS's
sliding layers): the attention reads Concat(Slice(past, -n), new) and the model's present is the
last n of that (n = W - 1). trt-paged-kv pages it (rules/attention/paged_trt.yaml: the crop
Slices go, graph_io `crop` puts the pool in the cropped present's slot) with window = W proven
by cropped_window() (rewrite/_mask_probe.py); the pool keeps every token.

Checked on the corpus' transformers-5 `kv` exports of Mistral (sliding_window 4, both layers) and
GPT-OSS (a sliding and a full layer, with sinks), and on a one-layer TorchScript export of Mistral
(tests/data/models/mistral_l1__torchscript_kv__trained.onnx: its crop's length is only the Slice's
constant start, shape inference leaves it symbolic, and its mask indexes absolute key positions),
head size 16, so through the rule without its head-size check (conftest's any_head_rule): verify, then the paged batch (ragged past lengths,
decode and two new tokens, shuffled blocks) against the original run per sequence, logits and
the pool's last n tokens against the cropped present. The original runs only with at least n
cached tokens (its mask is [S, n + S]).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from tests.paged_ragged import outputs, per_sequence

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "corpus"
HKV, D, KEPT = 2, 16, 3   # the synthetic crop graphs'
TORCHSCRIPT = "mistral_l1__torchscript_kv__trained"   # tests/data/models, 1 layer, vocab 32


def _load(name: str) -> onnx.ModelProto:
    path = (DATA / "models" if name == TORCHSCRIPT else CORPUS) / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    return onnx.load(str(path))


def _windows(model) -> list[int]:
    return [n.attributes["window"].value for n in model.graph if n.op_type == "PagedAttention"]


def _layers(model) -> int:
    return sum(i.name.startswith("past_key_values.") for i in model.graph.input) // 2


def _paged(model, rule, windows: list[int]):
    """``model`` at trt -O4 with ``rule``: paged with these windows, verified; the result."""
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True, rules=[rule], verify=True)
    assert _windows(result.model) == windows, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
    return result


def _refused(model, rule, reason: str) -> None:
    """``model`` at trt -O4 with ``rule``: not paged, the first refusal naming ``reason``, and the
    contiguous model verified."""
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True, rules=[rule], verify=True)
    assert _windows(result.model) == []
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and reason in notes[0], result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason


@pytest.fixture(scope="module", params=[("mistral__kv__trained", [4, 4]), ("gpt_oss__kv__trained", [4, 0]),
                                        (TORCHSCRIPT, [4])], ids=["mistral", "gpt_oss", "mistral_torchscript"])
def paged(request, any_head_rule):
    name, windows = request.param
    original = _load(name)
    result = onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True,
                                rules=[any_head_rule], verify=True)
    return original, result, windows


def test_cropped_cache_is_paged_with_its_window_and_verified(paged):
    original, result, windows = paged
    assert _windows(result.model) == windows, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
    names = [o.name for o in result.model.graph.outputs]
    assert names[1:] == [f"kv_pool_{t}_out.{i}" for i in range(_layers(original)) for t in "kv"]
    assert not any(i.name.startswith("past_key_values") for i in result.model.graph.inputs)
    # every crop went with the cache: no Slice reads a pool
    pools = {v.name for v in result.model.graph.inputs if v.name.startswith("kv_pool")}
    assert not any(n.op_type == "Slice" and n.inputs[0].name in pools for n in result.model.graph)


def _compare(original, model, past_lens, sq, block_size, seed) -> float:
    rng = np.random.default_rng(seed)
    layers = _layers(original)
    vocab = original.graph.output[0].type.tensor_type.shape.dim[2].dim_value
    feeds = {"input_ids": rng.integers(0, vocab, (len(past_lens), sq)).astype(np.int64)}
    for i in range(layers):
        for kv in ("key", "value"):
            dims = next(v for v in original.graph.input if v.name == f"past_key_values.{i}.{kv}").type.tensor_type.shape.dim
            shape = (len(past_lens), dims[1].dim_value, max(past_lens), dims[3].dim_value)
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal(shape).astype(np.float32)
    pf = paged_inputs_from_contiguous(feeds, block_size, past_lens=past_lens, new_tokens=sq, seed=seed)
    got = outputs(make_session(model), {k: v for k, v in pf.items() if k in {i.name for i in model.graph.inputs}})
    worst = 0.0
    for b, L, f, ref in per_sequence(make_session(original), feeds, past_lens, sq):
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)
        worst = max(worst, float(np.abs(got["logits"][b] - ref["logits"][0]).max()))
        for i in range(layers):
            for kv, t in (("key", "k"), ("value", "v")):
                pool = gather_pool(got[f"kv_pool_{t}_out.{i}"], pf["block_tables"][b], L + sq)
                np.testing.assert_allclose(pool[:, :L], f[f"past_key_values.{i}.{kv}"][0])   # every token kept
                r = ref[f"present.{i}.{kv}"][0]   # cropped: the last KEPT; GPT-OSS's full layer: all
                assert r.shape[1] in (KEPT, L + sq)
                np.testing.assert_allclose(pool[:, L + sq - r.shape[1]:], r, rtol=1e-4, atol=1e-5)
    return worst


@pytest.mark.parametrize("sq, block_size", [(1, 4), (2, 2)])
def test_cropped_paged_batch_matches_the_original(paged, sq, block_size):
    original, result, _ = paged
    _compare(original, result.model, (3, 7, 12), sq, block_size, seed=sq * 10 + block_size)


def test_the_window_is_what_makes_it_exact(paged):
    """The comparison can fail: with window 0 the pool's whole history is read, past the crop."""
    original, result, _ = paged
    proto = ir.serde.serialize_model(result.model)
    for n in proto.graph.node:
        if n.op_type == "PagedAttention":
            for a in n.attribute:
                if a.name == "window":
                    a.i = 0
    with pytest.raises(AssertionError, match="tolerance"):
        _compare(original, ir.serde.deserialize_model(proto), (3, 9), 1, 4, seed=7)


def test_a_present_cropped_other_than_the_past_is_refused(any_head_rule):
    """The present keeps 2 tokens where the attention read 3 (its window): not a rolling window
    of the read cache, so the pool cannot replace it; the model stays contiguous and exact."""
    model = _load("mistral__kv__trained")
    node = next(n for n in model.graph.node if n.op_type == "Slice" and "present.0.key" in n.output)
    model.graph.initializer.append(numpy_helper.from_array(np.array([-2], np.int64), "rc_two_back"))
    node.input[1] = "rc_two_back"
    for o in model.graph.output:
        if o.name == "present.0.key":
            o.type.tensor_type.shape.dim[2].dim_value = 2
    _refused(model, any_head_rule, "not its last 3 positions")


def _crop_mask_graph(band: int | None, kept: int = KEPT, seq: int | str = "sequence",
                     wide_batch: int | None = None, wide_lengths: tuple[int, int] | None = None) -> ir.Graph:
    """q [B,4,S,16] (S = ``seq``), past [B,2,P,16] and its crop [B,2,kept,16]; a mask over the
    kept + S keys (key j, query i at crop position kept + i): causal, And-ed with j > kept + i - band
    (with ``wide_batch``, the band Or-ed with B >= wide_batch: every kept key at such a batch; only at
    S in ``wide_lengths`` too when given)."""
    from onnx import TensorProto, helper

    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Slice", ["past", "neg", "big", "two"], ["kept"]),
        helper.make_node("Shape", ["q"], ["s1"], start=2, end=3),
        helper.make_node("Squeeze", ["s1"], ["s"]),
        helper.make_node("Add", ["s", "n"], ["t"]),
        helper.make_node("Range", ["zero", "t", "one"], ["keys"]),
        helper.make_node("Range", ["n", "t", "one"], ["rows0"]),
        helper.make_node("Unsqueeze", ["rows0", "last"], ["rows"]),
        helper.make_node("LessOrEqual", ["keys", "rows"], ["keep0"]),
    ]
    if band is not None:
        nodes += [helper.make_node("Sub", ["rows", "w"], ["lo"]),
                  helper.make_node("Greater", ["keys", "lo"], ["inband"])]
        if wide_batch is not None:
            nodes += [helper.make_node("Shape", ["q"], ["b1"], start=0, end=1),
                      helper.make_node("GreaterOrEqual", ["b1", "wb"], ["wide"]),
                      helper.make_node("Or", ["inband", "wide" if wide_lengths is None else "wide2"], ["inband2"])]
            if wide_lengths is not None:
                nodes[-1:-1] = [helper.make_node("GreaterOrEqual", ["s1", "wlo"], ["s_lo"]),
                                helper.make_node("LessOrEqual", ["s1", "whi"], ["s_hi"]),
                                helper.make_node("And", ["wide", "s_lo"], ["wide1"]),
                                helper.make_node("And", ["wide1", "s_hi"], ["wide2"])]
        nodes.append(helper.make_node("And", ["keep0", "inband2" if wide_batch is not None else "inband"], ["keep"]))
    else:
        nodes.append(helper.make_node("Identity", ["keep0"], ["keep"]))
    nodes.append(helper.make_node("Where", ["keep", "fzero", "ninf"], ["mask"]))
    inits = [i64("neg", [-kept]), i64("big", [2 ** 63 - 1]), i64("two", [2]), i64("n", kept), i64("zero", 0),
             i64("one", 1), i64("last", [-1]), i64("w", band or 0), i64("wb", [wide_batch or 0]),
             i64("wlo", [(wide_lengths or (0, 0))[0]]), i64("whi", [(wide_lengths or (0, 0))[1]]),
             numpy_helper.from_array(np.array(0, np.float32), "fzero"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")]
    g = helper.make_graph(nodes, "crop", [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 4, seq, D]),
        helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", HKV, "past_sequence", D])],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["batch", HKV, kept, D])], inits)
    return ir.serde.deserialize_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])).graph


def _vals(g: ir.Graph) -> dict:
    out = {v.name: v for v in g.inputs}
    out.update({v.name: v for n in g for v in n.outputs})
    return out


def test_cropped_window_reads_the_band_over_the_kept_tokens():
    from onnx_fuse.rewrite._expr import EvalFailure
    from onnx_fuse.rewrite._mask_probe import cropped_window

    v = _vals(_crop_mask_graph(KEPT + 1))
    assert cropped_window(None, v["mask"], v["q"], v["kept"], v["past"]) == KEPT + 1
    with pytest.raises(EvalFailure, match="the whole past, not a crop"):
        cropped_window(None, v["mask"], v["q"], v["past"], v["past"])
    v = _vals(_crop_mask_graph(None))    # plain causal over the crop: query i sees kept + i + 1
    with pytest.raises(EvalFailure, match=r"no single window: queries see the last 4 for new token 0 of 3 "
                                          r"after \d+, 5 for new token 1 of 3 after \d+, 6 for new token 2"):
        cropped_window(None, v["mask"], v["q"], v["kept"], v["past"])
    v = _vals(_crop_mask_graph(2))       # a band narrower than the crop plus one
    with pytest.raises(EvalFailure, match="keeps the last 3 tokens but the mask's window is 2"):
        cropped_window(None, v["mask"], v["q"], v["kept"], v["past"])


def test_a_band_that_a_larger_batch_drops_is_refused():
    """The band over the crop at a batch of 1 and 2, plain causal from a batch of 3 on: the probes at
    the batches beside each constant of the cone show those rows (was proven at a batch of 1 only)."""
    from onnx_fuse.rewrite._expr import EvalFailure
    from onnx_fuse.rewrite._mask_probe import cropped_window

    v = _vals(_crop_mask_graph(KEPT + 1, wide_batch=3))
    with pytest.raises(EvalFailure, match="no single window"):
        cropped_window(None, v["mask"], v["q"], v["kept"], v["past"])


@pytest.mark.parametrize("wide_batch", [1, 3])
def test_a_band_that_some_new_token_counts_drop_is_refused(wide_batch):
    """The band over the crop, plain causal at 5..6 new tokens (from a batch of ``wide_batch``): the
    probes at 1 and 3 new tokens read the band (session 29 review: only those two counts were
    probed), the counts beside each constant of the cone show the rows that see more."""
    from onnx_fuse.rewrite._expr import EvalFailure
    from onnx_fuse.rewrite._mask_probe import cropped_window

    v = _vals(_crop_mask_graph(KEPT + 1, wide_batch=wide_batch, wide_lengths=(5, 6)))
    with pytest.raises(EvalFailure, match="no single window"):
        cropped_window(None, v["mask"], v["q"], v["kept"], v["past"])


def test_one_new_token_over_the_whole_crop_is_the_window():
    """With S fixed at 1 the one query sees the n kept keys and its own: exactly the last n + 1
    positions, the keys before the crop being gone, so a plain causal mask (or a decode graph's
    all-kept one) proves the window n + 1; a band narrower than that is still refused."""
    from onnx_fuse.rewrite._expr import EvalFailure
    from onnx_fuse.rewrite._mask_probe import cropped_window

    for band in (None, KEPT + 1):
        v = _vals(_crop_mask_graph(band, seq=1))
        assert cropped_window(None, v["mask"], v["q"], v["kept"], v["past"]) == KEPT + 1
    v = _vals(_crop_mask_graph(KEPT, seq=1))
    with pytest.raises(EvalFailure, match="keeps the last 3 tokens but the mask's window is 3, not 4"):
        cropped_window(None, v["mask"], v["q"], v["kept"], v["past"])


def test_a_decode_graph_over_a_cropped_cache_is_paged(any_head_rule):
    """The corpus Mistral with its query length fixed at 1 (a decode graph): its mask keeps all
    n + 1 keys of the crop, which is the window n + 1, proven on values (was refused as 'the
    whole crop'); paged, verified, and a ragged decode batch against the original."""
    model = _load("mistral__kv__trained")
    dim = model.graph.input[0].type.tensor_type.shape.dim[1]
    dim.Clear()
    dim.dim_value = 1
    result = _paged(model, any_head_rule, [4, 4])
    _compare(model, result.model, (3, 6, 11), 1, 4, seed=3)


def test_torchscript_band_narrower_than_its_crop_is_refused(any_head_rule):
    """TorchScript's mask over the crop (absolute key positions) is proven on values, not taken on
    trust: its band written as key > query - 2 (the export has - 4) keeps 2 of the crop's keys,
    so it is refused with that window and stays contiguous and exact."""
    model = _load(TORCHSCRIPT)
    made = {o: n for n in model.graph.node for o in n.output}
    band = [made[i] for n in model.graph.node if n.op_type == "Greater" for i in n.input if made[i].op_type == "Sub"]
    assert len(band) == 1
    const = made[band[0].input[1]]
    assert int(numpy_helper.to_array(const.attribute[0].t)) == 4
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(2, np.int64)))
    _refused(model, any_head_rule, "keeps the last 3 tokens but the mask's window is 2, not 4")


def _computed_crop(op: str, operand: int) -> onnx.ModelProto:
    """The corpus Mistral with each past crop's start computed from the past's shape:
    ``op(Shape(past)[2], operand)`` instead of the constant -3."""
    from onnx import helper

    model = _load("mistral__kv__trained")
    made = []
    for node in model.graph.node:
        if node.op_type == "Slice" and node.input[0].startswith("past_key_values"):
            p = node.input[0]
            model.graph.initializer.append(numpy_helper.from_array(np.array([operand], np.int64), f"{p}_operand"))
            made += [helper.make_node("Shape", [p], [f"{p}_len"], start=2, end=3),
                     helper.make_node(op, [f"{p}_len", f"{p}_operand"], [f"{p}_start"])]
            node.input[1] = f"{p}_start"
    assert len(made) == 8
    for n in reversed(made):
        model.graph.node.insert(0, n)
    return model


def test_a_crop_start_computed_from_the_past_length_is_probed(any_head_rule):
    """Slice(past, Shape(past)[2] - 3): the last 3 at every past length, proven on values
    (crop_length), so paged like the constant crop, verified, ragged batches vs the original."""
    model = _computed_crop("Sub", KEPT)
    result = _paged(model, any_head_rule, [4, 4])
    _compare(model, result.model, (3, 7, 12), 2, 2, seed=5)


def test_a_crop_start_that_moves_with_the_past_length_is_refused(any_head_rule):
    """Slice(past, Shape(past)[2] / 2) keeps the last half: no fixed crop, refused with the
    positions it kept; the model stays contiguous and exact."""
    _refused(_computed_crop("Div", 2), any_head_rule, "not a fixed crop")


def test_a_cropped_present_read_inside_the_graph_is_refused(any_head_rule):
    """The pool cannot stand in for a cropped present that something else still reads."""
    from onnx import helper

    model = _load("mistral__kv__trained")
    model.graph.node.append(helper.make_node("ReduceSum", ["present.0.key"], ["rc_sum"], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("rc_sum", onnx.TensorProto.FLOAT, ["batch", 2, 16]))
    _refused(model, any_head_rule, "is not a graph output read by nothing else")


@pytest.mark.slow
def test_a_band_dropped_at_counts_past_the_batch_probe_size_is_refused():
    """A crop of 4096 (band 4097), plain causal at 4098..4099 new tokens: each such probe is over 16M
    entries (4098 x 8194), which cropped_window left out even at a batch of 1, so the mask read as
    window 4097 (session 30, trust30). A batch of 1 runs them now (up to a prefill's square bound)."""
    from onnx_fuse.rewrite._expr import EvalFailure
    from onnx_fuse.rewrite._mask_probe import cropped_window

    v = _vals(_crop_mask_graph(4097, kept=4096, wide_batch=1, wide_lengths=(4098, 4099)))
    with pytest.raises(EvalFailure, match="no single window"):
        cropped_window(None, v["mask"], v["q"], v["kept"], v["past"])
