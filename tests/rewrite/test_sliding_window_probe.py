"""sliding_window() (optimizer/rewrite/_mask_probe.py): the window W of a causal banded mask, read
from its values, on hand-built mask graphs: prefill (no past) and decode (past [B, Hkv, P, D]),
boolean keep-masks and additive ones, the query length free or fixed at 1; and the masks it must
refuse (banded at small positions only, a band that changes width, a non-causal one, a window
read from an input)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._mask_probe import causal_mask, sliding_window


def _graph(*, window: int | None, past: bool, additive: bool, fixed_one: bool = False,
           until: int | None = None, widen: bool = False, window_input: bool = False,
           negative: bool = False, wide_batch: int | None = None,
           wide_lengths: tuple[int, int] | None = None, wide_past: tuple[int, int] | None = None,
           past_batch: str = "b") -> dict:
    """q positions Range(P, P + S), keys Range(0, P + S); keep j <= i (and j > i - window; with
    ``until`` only for i < until; ``widen``: j > i // 2 - 1 instead); AND attention_mask;
    Where(0, finfo.min) when ``additive`` (``negative``: the band as Add(i, -window)). P = Shape(past)[2] (0 without a past), S from the
    hidden state (fixed at 1 with ``fixed_one``, q's length symbolic all the same). ``wide_batch``:
    every key in the band from that batch on (only at S in ``wide_lengths`` when given, and only
    at P in ``wide_past`` when given too; the batch read from the past when ``past_batch``, the
    past's batch symbol, is not q's)."""
    nodes = [helper.make_node("Shape", ["hidden"], ["ss"], start=1, end=2)]
    if past:
        nodes += [helper.make_node("Shape", ["past"], ["ps"], start=2, end=3),
                  helper.make_node("Add", ["ps", "ss"], ["ts"]),
                  helper.make_node("Squeeze", ["ps"], ["p0"])]
    else:
        nodes += [helper.make_node("Identity", ["ss"], ["ts"]), helper.make_node("Identity", ["zero"], ["p0"])]
    nodes += [helper.make_node("Squeeze", ["ts"], ["t0"]),
              helper.make_node("Range", ["p0", "t0", "one"], ["qp"]),
              helper.make_node("Range", ["zero", "t0", "one"], ["kv"]),
              helper.make_node("Unsqueeze", ["qp", "ax1"], ["qc"]),
              helper.make_node("LessOrEqual", ["kv", "qc"], ["causal"])]
    keep = "causal"
    if window is not None or widen:
        w_name = "w_in" if window_input else "w"
        if widen:
            nodes += [helper.make_node("Div", ["qc", "two"], ["qh"]),
                      helper.make_node("Sub", ["qh", "one"], ["lo"])]
        elif negative:
            nodes.append(helper.make_node("Add", ["qc", "w_neg"], ["lo"]))
        else:
            nodes.append(helper.make_node("Sub", ["qc", w_name], ["lo"]))
        nodes.append(helper.make_node("Greater", ["kv", "lo"], ["band"]))
        band = "band"
        if until is not None:
            nodes += [helper.make_node("GreaterOrEqual", ["qc", "until"], ["late"]),
                      helper.make_node("Or", ["band", "late"], ["band2"])]
            band = "band2"
        if wide_batch is not None:
            nodes += [helper.make_node("Shape", ["hidden" if past_batch == "b" else "past"], ["bs"], start=0, end=1),
                      helper.make_node("GreaterOrEqual", ["bs", "wide_b"], ["wide"])]
            if wide_lengths is not None:
                nodes += [helper.make_node("GreaterOrEqual", ["ss", "wide_lo"], ["s_lo"]),
                          helper.make_node("LessOrEqual", ["ss", "wide_hi"], ["s_hi"]),
                          helper.make_node("And", ["wide", "s_lo"], ["wide1"]),
                          helper.make_node("And", ["wide1", "s_hi"], ["wide2"])]
                if wide_past is not None:
                    nodes += [helper.make_node("GreaterOrEqual", ["ps", "wide_plo"], ["p_lo"]),
                              helper.make_node("LessOrEqual", ["ps", "wide_phi"], ["p_hi"]),
                              helper.make_node("And", ["wide2", "p_lo"], ["wide3"]),
                              helper.make_node("And", ["wide3", "p_hi"], ["wide4"])]
            wide = "wide" if wide_lengths is None else "wide2" if wide_past is None else "wide4"
            nodes.append(helper.make_node("Or", [band, wide], ["band3"]))
            band = "band3"
        nodes.append(helper.make_node("And", ["causal", band], ["keep0"]))
        keep = "keep0"
    nodes += [helper.make_node("Unsqueeze", [keep, "ax01"], ["keep4"]),
              helper.make_node("Unsqueeze", ["attention_mask", "ax12"], ["am4"]),
              helper.make_node("Cast", ["am4"], ["amb"], to=TensorProto.BOOL),
              helper.make_node("And", ["keep4", "amb"], ["keepm"])]
    out = "keepm"
    if additive:
        nodes.append(helper.make_node("Where", ["keepm", "zero_f", "neg"], ["mask"]))
        out = "mask"
    inits = [numpy_helper.from_array(np.asarray(v, dt), n) for n, v, dt in [
        ("zero", 0, np.int64), ("one", 1, np.int64), ("two", 2, np.int64), ("w", window or 0, np.int64),
        ("w_neg", -(window or 0), np.int64),
        ("until", until or 0, np.int64), ("wide_b", [wide_batch or 0], np.int64),
        ("wide_lo", [(wide_lengths or (0, 0))[0]], np.int64), ("wide_hi", [(wide_lengths or (0, 0))[1]], np.int64),
        ("wide_plo", [(wide_past or (0, 0))[0]], np.int64), ("wide_phi", [(wide_past or (0, 0))[1]], np.int64), ("ax1", [1], np.int64), ("ax01", [0, 1], np.int64),
        ("ax12", [1, 2], np.int64), ("zero_f", 0.0, np.float32),
        ("neg", np.finfo(np.float32).min, np.float32)]]
    s = 1 if fixed_one else "s"
    ins = [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["b", s, 64]),
           helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 64]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"])]
    if past:
        ins.append(helper.make_tensor_value_info("past", TensorProto.FLOAT, [past_batch, 1, "p", 64]))
    if window_input:
        ins.append(helper.make_tensor_value_info("w_in", TensorProto.INT64, []))
    graph = helper.make_graph(nodes + [helper.make_node("Identity", ["q"], ["y"])], "mask", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info(out, TensorProto.FLOAT if additive else TensorProto.BOOL, None)],
                              inits)
    model = ir.from_proto(onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])))
    vals = {v.name: v for n in model.graph for v in n.outputs}
    ins = {v.name: v for v in model.graph.inputs}
    return {"mask": vals[out], "q": ins["q"], "past": ins.get("past")}


def _w(g) -> int:
    return sliding_window(None, g["mask"], g["q"], g["past"])


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("window", [1, 4, 17, 300])
def test_window_is_read_from_the_band(window, past, additive):
    assert _w(_graph(window=window, past=past, additive=additive)) == window


@pytest.mark.parametrize("past", [False, True])
def test_plain_causal_is_window_zero(past):
    assert _w(_graph(window=None, past=past, additive=True)) == 0


def test_decode_with_the_query_length_fixed_at_one():
    """S fixed at 1 upstream: the probe falls back to one new token and then tries P at 0, 1 and
    around each constant of the cone (the band's edges), all of them one W."""
    assert _w(_graph(window=4, past=True, additive=True, fixed_one=True)) == 4
    assert _w(_graph(window=None, past=True, additive=True, fixed_one=True)) == 0


@pytest.mark.parametrize("past, fixed_one", [(False, False), (True, False), (True, True)])
def test_band_at_small_positions_only_is_refused(past, fixed_one):
    """Banded before position 40, plain causal from there: a probe only past 40 would read
    window 0, one only below it window 4; both are tried and disagree."""
    g = _graph(window=4, past=past, additive=True, fixed_one=fixed_one, until=40)
    with pytest.raises(EvalFailure, match="band of 4 keys at some positions but lets a query see all"):
        _w(g)


@pytest.mark.parametrize("past", [False, True])
def test_band_that_widens_is_refused(past):
    with pytest.raises(EvalFailure, match="not one width"):
        _w(_graph(window=None, widen=True, past=past, additive=True))


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("wide_batch, wide_lengths", [(3, None), (3, (6, 9)), (1, (6, 9))])
def test_band_that_a_batch_or_a_length_drops_is_refused(past, wide_batch, wide_lengths):
    """Every key in the band from a batch of 3 on (at 6..9 new tokens only, with ``wide_lengths``;
    a batch of 1 too: the new tokens' count alone): probes at a batch of 1 with 3 new tokens read
    a window of 4; the counts beside each constant of the cone, and the batches beside them at
    each probed length, show the rows that see more."""
    g = _graph(window=4, past=past, additive=True, wide_batch=wide_batch, wide_lengths=wide_lengths)
    with pytest.raises(EvalFailure):
        _w(g)
    assert _w(_graph(window=4, past=past, additive=True, wide_batch=None)) == 4


@pytest.mark.parametrize("wide_lengths, wide_past", [((5, 6), (1, 2)), ((5, 6), (0, 2)), ((1, 2), (5, 6))])
def test_band_that_a_cache_and_a_count_drop_together_is_refused(wide_lengths, wide_past):
    """Every key in the band only where both the new tokens' count and the cache length are in a
    range (5..6 new tokens after at most 2 cached ones, say): probing the counts over a cache past
    every constant, and the prefill of ``far`` tokens, sees neither (session 29 review: the P x S
    grid was not probed jointly), so the band must be probed at each count beside a constant
    after each cache length beside one."""
    with pytest.raises(EvalFailure):
        _w(_graph(window=4, past=True, additive=True, wide_batch=1, wide_lengths=wide_lengths,
                  wide_past=wide_past))


def test_band_that_the_past_s_batch_drops_is_refused():
    """The batch read from the past, whose batch symbol is not q's (exporters name them apart; a run
    has one batch, the past concatenated with the new keys): the probe at each batch must feed the
    past that batch too (session 29 review: it fed the past a batch of 1)."""
    with pytest.raises(EvalFailure):
        _w(_graph(window=4, past=True, additive=True, wide_batch=3, past_batch="past_batch"))
    assert _w(_graph(window=4, past=True, additive=True, past_batch="past_batch")) == 4


def test_window_from_an_input_is_refused():
    """An integer input's values are unknown to the probe: the mask changes with them (fed all 0
    it would not see its own key), so no W can be proven."""
    with pytest.raises(EvalFailure, match="the mask changes with the values of the integer input 'w_in'"):
        _w(_graph(window=4, past=True, additive=True, window_input=True))


def test_without_names_an_input_the_mask_must_not_read():
    g = _graph(window=4, past=False, additive=False)
    am = next(v for v in g["mask"].graph.inputs if v.name == "attention_mask")
    with pytest.raises(EvalFailure, match="attention_mask"):
        sliding_window(None, g["mask"], g["q"], None, am)


def test_constant_masks():
    """A folded mask: every position it covers is in the array (P = T - S)."""
    pos = np.arange(6)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - 3)
    graph = helper.make_graph([helper.make_node("Identity", ["m"], ["y"])], "c",
                              [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 6, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.where(band, 0.0, -np.inf).astype(np.float32)[None, None], "m")])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    m = model.graph.initializers["m"]
    assert sliding_window(None, m, model.graph.inputs[0], None) == 3
    upper = ~band
    m.const_value = ir.tensor(np.where(upper, 0.0, -np.inf).astype(np.float32)[None, None])
    with pytest.raises(EvalFailure, match="not causal"):
        sliding_window(None, m, model.graph.inputs[0], None)


def test_windows_past_the_square_probe_bound():
    """W = 10000: a prefill probe past it would build a 10002 x 10002 mask, so prefill refuses
    (too large); with a cache the probe at P past W is 3 rows, but the new-token counts beside
    10000 (10000 x 20002 entries after the far cache) fit no probe, and a band dropped at such a
    count would not show: refused too (session 30; it was read as 10000 before,
    tests/rewrite/test_probe_size_limits.py). A band that widens past P = 20000 refuses either way."""
    with pytest.raises(EvalFailure, match="too large"):
        _w(_graph(window=10000, past=False, additive=False))
    with pytest.raises(EvalFailure, match="too large"):
        _w(_graph(window=10000, past=True, additive=True))
    with pytest.raises(EvalFailure):
        _w(_graph(window=10000, past=True, additive=True, until=20000))


@pytest.mark.parametrize("past", [False, True])
def test_window_added_as_a_negative_constant(past):
    """kv > q + (-W): the window is the magnitude of a negative integer constant, so the probe
    goes past W = 40 there too (at the 16 tokens it uses without one, the band never shows and
    the mask reads as plain causal); causal_mask refuses the band for the same reason."""
    g = _graph(window=40, past=past, additive=True, negative=True)
    assert _w(g) == 40
    if past:
        with pytest.raises(EvalFailure, match="sliding window of 40"):
            causal_mask(None, g["mask"], g["q"], g["past"])


def test_window_constant_reads_a_negative_window():
    """verify's window_constant (the past it feeds grows past W) reads Add(q, -W) as W too."""
    from onnx_fuse.verify import window_constant

    graph = helper.make_graph(
        [helper.make_node("Add", ["qc", "w_neg"], ["lo"]), helper.make_node("Greater", ["kv", "lo"], ["y"])],
        "w", [helper.make_tensor_value_info("qc", TensorProto.INT64, ["s", 1]),
              helper.make_tensor_value_info("kv", TensorProto.INT64, ["t"])],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
        [numpy_helper.from_array(np.asarray(-40, np.int64), "w_neg")])
    assert window_constant(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])) == 40


def _attention_in_a_branch(**attrs) -> onnx.ModelProto:
    attn = helper.make_node("FusedAttention", ["x", "x", "x"], ["a"], domain="onnx_fuse", num_heads=1, **attrs)
    branch = helper.make_graph([attn], "b", [], [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["c"])], "o", [],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)], "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("onnx_fuse", 1)])


def test_fused_attention_in_a_branch_counts_for_the_long_prefill():
    """verify adds the long-prefill case when the optimized graph holds our attention op (a rule
    that dropped the band leaves no window attribute); one in an If branch counts too, as
    window_attribute already read its window there."""
    from onnx_fuse.verify import _has_fused_attention, window_attribute

    assert _has_fused_attention(_attention_in_a_branch()) and window_attribute(_attention_in_a_branch()) == 0
    assert window_attribute(_attention_in_a_branch(window=4)) == 4
