"""rules/attention/gqa_key_padding.yaml: grouped-kv encoder attention at ort over an attention_mask mask.

An encoder with fewer kv heads (EmbeddingGemma, T5Gemma 2's encoder) lowers to GroupQueryAttention
(causal=0) at ort, which takes a mask only as a 4-D attention_bias [B|1, H|1, S, T]. Its full layers'
mask is attention_mask's key padding alone, which transformers 5 builds as Where(GatherND(attention_mask,
batch / key index grids), 0, finfo.min) (about 15 ops): attention-gqa-ort-key-padding rebuilds that bias
from the [B, T] input (Cast, Unsqueeze, Where, its Expand to the query rows), so the exporter's ops die,
as attention-mha-ort and attention-onnx already do. The sliding layers' bidirectional window
(|i - j| < W and the key padding) is no key padding, and GroupQueryAttention's local_window_size is a
causal left window ("must be -1 when causal is 0"): that mask stays the 4-D bias.
Numerics against the original in ORT with right, left, inner and full padding.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

H, HKV, D = 4, 2, 8
MIN = float(np.finfo(np.float32).min)


def _mask_nodes(n, window: int | None) -> list:
    """transformers 5's padding_mask[batch_idx, kv_idx] (GatherND over index grids), with a
    bidirectional window |q - k| < window on top when given, as Where(keep, 0, min) -> ``mask``."""
    nodes = [n("Shape", ["attention_mask"], ["ash"]), n("Gather", ["ash", "i0"], ["nb"], axis=0),
             n("Gather", ["ash", "i1"], ["ns"], axis=0), n("Range", ["i0", "nb", "i1"], ["rb"]),
             n("Range", ["i0", "ns", "i1"], ["rs"]),
             n("Unsqueeze", ["rb", "ax123"], ["bi"]), n("Unsqueeze", ["rs", "ax012"], ["ki"]),
             n("Max", ["bi", "ki"], ["bk"]), n("Shape", ["bk"], ["bks"]),
             n("Expand", ["bi", "bks"], ["bix"]), n("Unsqueeze", ["bix", "axm1"], ["biu"]),
             n("Expand", ["ki", "bks"], ["kix"]), n("Unsqueeze", ["kix", "axm1"], ["kiu"]),
             n("Concat", ["biu", "kiu"], ["idx"], axis=-1), n("Cast", ["attention_mask"], ["amb"], to=9),
             n("GatherND", ["amb", "idx"], ["keep"])]
    cond = "keep"
    if window is not None:   # EmbeddingGemma / Gemma 3 encoder sliding layers: |q - k| < W
        nodes += [n("Unsqueeze", ["rs", "ax013"], ["qi"]), n("Sub", ["qi", "ki"], ["dist"]),
                  n("Abs", ["dist"], ["adist"]), n("Less", ["adist", "win"], ["near"]),
                  n("And", ["keep", "near"], ["keepw"])]
        cond = "keepw"
    nodes.append(n("Where", [cond, "zero", "fmin"], ["mask"]))
    return nodes


def _attention(n, t: str, mask: str) -> list:
    """Attention over the graph inputs q3<t> / k3<t> / v3<t> and ``mask`` -> y<t> (names suffixed with t)."""
    nodes = [n("Reshape", [f"q3{t}", "qshape"], [f"qr{t}"]), n("Transpose", [f"qr{t}"], [f"q4{t}"], perm=[0, 2, 1, 3])]
    for c in "kv":
        c_ = c + t
        nodes += [n("Reshape", [f"{c}3{t}", "kvshape"], [f"{c_}r"]),
                  n("Transpose", [f"{c_}r"], [f"{c_}4"], perm=[0, 2, 1, 3]),
                  n("Shape", [f"{c_}4"], [f"{c_}s"]), n("Gather", [f"{c_}s", "j0"], [f"{c_}b"]),
                  n("Gather", [f"{c_}s", "j2"], [f"{c_}l"]),
                  n("Concat", [f"{c_}b", "kvh", "rep", f"{c_}l", "dd"], [f"{c_}xs"], axis=0),
                  n("Concat", [f"{c_}b", "hq", f"{c_}l", "dd"], [f"{c_}rs"], axis=0),
                  n("Unsqueeze", [f"{c_}4", "ax2"], [f"{c_}u"]), n("Expand", [f"{c_}u", f"{c_}xs"], [f"{c_}x"]),
                  n("Reshape", [f"{c_}x", f"{c_}rs"], [f"{c_}h"])]
    nodes += [n("Transpose", [f"k{t}h"], [f"kt{t}"], perm=[0, 1, 3, 2]),
              n("MatMul", [f"q4{t}", f"kt{t}"], [f"sc{t}"]),
              n("Mul", [f"sc{t}", "scale"], [f"ss{t}"]), n("Add", [f"ss{t}", mask], [f"sm{t}"]),
              n("Softmax", [f"sm{t}"], [f"p{t}"], axis=-1), n("IsNaN", [f"p{t}"], [f"isn{t}"]),
              n("Where", [f"isn{t}", "zero", f"p{t}"], [f"pz{t}"]), n("MatMul", [f"pz{t}", f"v{t}h"], [f"o{t}"]),
              n("Transpose", [f"o{t}"], [f"ot{t}"], perm=[0, 2, 1, 3]), n("Reshape", [f"ot{t}", "merge"], [f"y{t}"])]
    return nodes


def _model(h, window: int | None = None, shared: bool = False):
    """One attention over q3 [B,S,H*D] and k3 / v3 [B,S,HKV*D] (repeat_kv to H heads), the mask
    added to the scaled scores, the sdpa NaN guard after Softmax. ``shared``: a second attention
    over the key mask alone, whose GatherND the windowed mask also reads (EmbeddingGemma's full and
    sliding layers), output y2."""
    n = h.node
    nodes = _mask_nodes(n, window)
    if shared:
        nodes.append(n("Where", ["keep", "zero", "fmin"], ["mask2"]))
    outputs = []
    for t, m in (("", "mask"), ("2", "mask2")) if shared else (("", "mask"),):
        nodes += _attention(n, t, m)
        outputs.append(h.vi(f"y{t}", ["batch", "seq", H * D]))
    inputs = [h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64)]
    for t in ("", "2") if shared else ("",):
        inputs += [h.vi(f"q3{t}", ["batch", "seq", H * D]), h.vi(f"k3{t}", ["batch", "seq", HKV * D]),
                   h.vi(f"v3{t}", ["batch", "seq", HKV * D])]
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "j0": np.array([0], np.int64), "j2": np.array([2], np.int64),
             "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
             "ax013": np.array([0, 1, 3], np.int64), "axm1": np.array([-1], np.int64),
             "ax2": np.array([2], np.int64), "win": np.array(window or 0, np.int64),
             "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
             "qshape": np.array([0, 0, H, D], np.int64), "kvshape": np.array([0, 0, HKV, D], np.int64),
             "kvh": np.array([HKV], np.int64), "rep": np.array([H // HKV], np.int64),
             "hq": np.array([H], np.int64), "dd": np.array([D], np.int64),
             "merge": np.array([0, 0, H * D], np.int64), "scale": np.array(D ** -0.5, np.float32)}
    return h.make_model(nodes, inputs, outputs, inits)


def _check(h, model, fused):
    """Right, full, left and inner padding at two lengths (the window's edge inside and past them)."""
    rng = np.random.default_rng(3)
    for b, s in ((4, 7), (4, 3)):
        am = np.ones((b, s), np.int64)
        am[0, s - 2:] = 0
        am[1, :] = 0
        am[2, :2] = 0
        am[3, 1] = 0
        feeds = {"attention_mask": am}
        for i in model.graph.input[1:]:
            feeds[i.name] = rng.standard_normal((b, s, H * D if i.name[0] == "q" else HKV * D)).astype(np.float32)
        h.assert_close(model, fused, feeds)


def _gqa(fused):
    """The GroupQueryAttention node and the producer of every value."""
    node = next(n for n in fused.graph.node if n.op_type == "GroupQueryAttention")
    return node, {o: n for n in fused.graph.node for o in n.output}


def test_key_padding_bias_rebuilt_from_attention_mask(h):
    """The GatherND key mask dies: GroupQueryAttention's attention_bias is Expand(Where(Unsqueeze(
    Cast(attention_mask)), 0, fill)) (fails on the old lowering, which kept the export's ops)."""
    model = _model(h)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::GroupQueryAttention"] == 1 and ops["Softmax"] == 0, ops
    assert "attention-gqa-ort-key-padding" in h.fired(fused), h.fired(fused)
    assert ops["GatherND"] == 0 and ops["Range"] == 0 and ops["Max"] == 0, ops
    node, producer = _gqa(fused)
    bias = producer[node.input[10]]
    assert bias.op_type == "Expand", bias
    where = producer[bias.input[0]]
    assert where.op_type == "Where", where
    unsq = producer[where.input[0]]
    cast = producer[unsq.input[0]]
    assert unsq.op_type == "Unsqueeze" and cast.op_type == "Cast" and cast.input[0] == "attention_mask"
    # a finite fill: no row can lose every key, so the export's NaN guard has nothing to zero
    assert ops["IsNaN"] == 0, ops
    _check(h, model, fused)


@pytest.mark.parametrize("window", [2, 4])
def test_bidirectional_window_keeps_the_bias(h, window):
    """|q - k| < W and the key padding: no key padding alone, and GroupQueryAttention's
    local_window_size is a causal left window only: the 4-D bias stays, numerics as the original."""
    model = _model(h, window)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::GroupQueryAttention"] == 1 and ops["Softmax"] == 0, ops
    assert "attention-gqa-ort-key-padding" not in h.fired(fused), h.fired(fused)
    assert ops["GatherND"] == 1 and ops["Abs"] == 1, ops
    node, _ = _gqa(fused)
    assert len(node.input) > 10 and node.input[10], node.input
    assert {a.name: a.i for a in node.attribute}.get("local_window_size", -1) == -1
    _check(h, model, fused)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_other_targets_unchanged(h, target):
    """Attention-23 already took the key mask from attention_mask (attention-onnx / attention-trt)."""
    model = _model(h)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["GatherND"] == 0, ops
    assert "attention-gqa-ort-key-padding" not in h.fired(fused)
    _check(h, model, fused)


def test_shared_key_mask_keeps_the_bias(h):
    """The key mask's GatherND also builds the windowed mask: rebuilding the key mask would free only
    its Where (fewer nodes than the rebuilt bias adds, net_nodes), so both layers keep their biases
    (the key-padding layer's as attention-gqa-ort gives it: the export's Where, broadcast)."""
    model = _model(h, window=2, shared=True)
    base = h.fuse(model, "ort")
    ops = h.ops(base)
    assert ops["com.microsoft::GroupQueryAttention"] == 2 and ops["Softmax"] == 0, ops
    assert ops["GatherND"] == 1, ops
    # the key mask's bias is the export's Where(keep, 0, min), not one rebuilt from attention_mask
    producer = {o: n for n in base.graph.node for o in n.output}
    biases = [producer[n.input[10]] for n in base.graph.node if n.op_type == "GroupQueryAttention"]
    wheres = [producer[b.input[0]] if b.op_type == "Expand" else b for b in biases]
    assert all(w.op_type == "Where" for w in wheres), biases
    assert all(producer[w.input[0]].op_type in ("GatherND", "And") for w in wheres), wheres
    _check(h, model, base)


def _bert_mask_model(h, fill: float = -10000.0):
    """BERT's extended mask, (1 - attention_mask[:, None, None, :]) * fill: 4 ops (Unsqueeze, Cast,
    Sub, Mul) die with it, one more than the rebuilt bias adds (Cast, Unsqueeze, Where: the Expand to
    the query rows is built either way)."""
    n = h.node
    nodes = [n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]), n("Cast", ["am4"], ["amf"], to=TensorProto.FLOAT),
             n("Sub", ["one", "amf"], ["inv"]), n("Mul", ["inv", "fill"], ["mask"])] + _attention(n, "", "mask")
    inputs = [h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64), h.vi("q3", ["batch", "seq", H * D]),
              h.vi("k3", ["batch", "seq", HKV * D]), h.vi("v3", ["batch", "seq", HKV * D])]
    inits = {"j0": np.array([0], np.int64), "j2": np.array([2], np.int64), "ax12": np.array([1, 2], np.int64),
             "ax2": np.array([2], np.int64), "one": np.array(1.0, np.float32), "fill": np.array(fill, np.float32),
             "zero": np.array(0.0, np.float32),
             "qshape": np.array([0, 0, H, D], np.int64), "kvshape": np.array([0, 0, HKV, D], np.int64),
             "kvh": np.array([HKV], np.int64), "rep": np.array([H // HKV], np.int64),
             "hq": np.array([H], np.int64), "dd": np.array([D], np.int64),
             "merge": np.array([0, 0, H * D], np.int64), "scale": np.array(D ** -0.5, np.float32)}
    return h.make_model(nodes, [*inputs], [h.vi("y", ["batch", "seq", H * D])], inits)


def _decisions(h, monkeypatch, model) -> dict:
    """Node counts at ort as the rule decides (net_nodes) and with the rebuild forced / refused."""
    from onnx_fuse.rewrite import _expr

    real = _expr._net_nodes
    counts = {}
    for mode in ("computed", -1, 1):
        monkeypatch.setattr(_expr, "_net_nodes", real if mode == "computed" else (lambda ctx, *a, m=mode: m))
        fused = h.fuse(model, "ort")
        counts[mode] = len(fused.graph.node)
        if mode == "computed":
            _check(h, model, fused)
            counts["fused"] = fused
    return counts


@pytest.mark.parametrize("kind, rebuilt", [("bert", True), ("shared", False)])
def test_the_decision_is_the_leaner_graph(h, monkeypatch, kind, rebuilt):
    """The rebuild is chosen by net_nodes, not by freed_ops(mask) > 4: BERT's 4-op mask frees one op
    more than the rebuild adds, so it is rebuilt (the old count kept it: fails on it, the patched
    decisions do not move the graph); the key mask the windowed mask shares frees 1 and stays."""
    model = _bert_mask_model(h) if kind == "bert" else _model(h, window=2, shared=True)
    counts = _decisions(h, monkeypatch, model)
    assert counts[-1] != counts[1], counts   # the two graphs differ: the test decides something
    assert counts["computed"] == min(counts[-1], counts[1]), counts
    assert (counts["computed"] == counts[-1]) == rebuilt, counts
    ops = h.ops(counts["fused"])
    assert ops["com.microsoft::GroupQueryAttention"] == (1 if kind == "bert" else 2), ops
    assert (ops["Mul"] == 0 if kind == "bert" else ops["GatherND"] == 1), ops   # BERT's (1 - m) * fill died
