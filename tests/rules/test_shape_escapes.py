"""Shape reads of a fusion's intermediates (rewrite/_shape_reads.py): a Shape outside the match that
reads one of its intermediates moves onto a chain input with the same dims side by side, so the
intermediate no longer escapes and the fusion fires; with no such input it still escapes.

- transformers 4.45's BERT-family eager attention: every layer's merge view reads layer 0's
  ``Shape(key projection)`` ([batch, sequence, hidden]: no graph input holds it, so shape-cse keeps
  that read as every layer's copy), which kept layer 0 out of packed Attention at ort-O3;
- Swin's shifted window as transformers 4.45 / 4.53 wrote it: scores-bias-in-view reads
  ``Shape(q, 0, 1)`` of the head Transpose for its zeros, which kept that window's attention out of
  packed Attention (docs/holdout.md, sweep 24, root causes 1 and 3)."""

from __future__ import annotations

import re

import numpy as np
import pytest

B, S, H, D, V = 2, 5, 2, 16, 50
C = H * D


def _bert_445(h, layers=2, key_shape_out=False):
    """``layers`` eager BERT self-attentions over embeddings of ``ids``; each merge view reads layer
    0's Shape(key projection). ``key_shape_out``: also a graph output Shape(k^T) of layer 0's key
    heads ([batch, H, D, sequence], which no chain input holds side by side)."""
    n, rng = h.node, np.random.default_rng(1)
    inits = {"emb": rng.standard_normal((V, C)).astype(np.float32), "hd": np.array([H, D], np.int64),
             "sc": np.array(np.sqrt(D), np.float32)}
    nodes = [n("Gather", ["emb", "ids"], ["x0"]),
             n("Shape", ["ids"], ["b"], start=0, end=1), n("Shape", ["ids"], ["s"], start=1, end=2),
             n("Concat", ["b", "s", "hd"], ["heads"], axis=0)]
    x = "x0"
    for i in range(layers):
        for p in "qkv":
            inits[f"w{p}{i}"] = (rng.standard_normal((C, C)) / np.sqrt(C)).astype(np.float32)
            inits[f"b{p}{i}"] = (0.1 * rng.standard_normal(C)).astype(np.float32)
            nodes += [n("MatMul", [x, f"w{p}{i}"], [f"m{p}{i}"]), n("Add", [f"m{p}{i}", f"b{p}{i}"], [f"{p}3{i}"]),
                      n("Reshape", [f"{p}3{i}", "heads"], [f"{p}r{i}"])]
        if i == 0:
            nodes.append(n("Shape", ["k30"], ["kshape"]))   # key_layer.size(): every layer's merge target
        nodes += [n("Transpose", [f"qr{i}"], [f"q{i}"], perm=[0, 2, 1, 3]),
                  n("Transpose", [f"kr{i}"], [f"kt{i}"], perm=[0, 2, 3, 1]),
                  n("Transpose", [f"vr{i}"], [f"v{i}"], perm=[0, 2, 1, 3]),
                  n("MatMul", [f"q{i}", f"kt{i}"], [f"s{i}"]), n("Div", [f"s{i}", "sc"], [f"sd{i}"]),
                  n("Softmax", [f"sd{i}"], [f"p{i}"], axis=-1), n("MatMul", [f"p{i}", f"v{i}"], [f"o{i}"]),
                  n("Transpose", [f"o{i}"], [f"ot{i}"], perm=[0, 2, 1, 3]),
                  n("Reshape", [f"ot{i}", "kshape"], [f"y{i}"])]
        x = f"y{i}"
    outputs = [h.vi(x, ["batch", "sequence", C])]
    if key_shape_out:
        nodes.append(n("Shape", ["kt0"], ["khs"]))
        outputs.append(h.vi("khs", [4], 7))
    return h.make_model(nodes, [h.vi("ids", ["batch", "sequence"], 7)], outputs, inits, opset=17)


def _feeds(h):
    return {"ids": h.rng.integers(0, V, (B, S)).astype(np.int64)}


def test_bert_445_key_shape_read_moves_to_the_layer_input(h):
    model = _bert_445(h)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    # both layers packed (before: layer 0 MultiHeadAttention over pack-matmul's Split)
    assert ops["com.microsoft::Attention"] == 2 and "com.microsoft::MultiHeadAttention" not in ops, ops
    assert "Softmax" not in ops and "Split" not in ops, ops
    # the merge views went with the attentions: the key's Shape, moved to layer 0's input, too
    assert "Shape" not in ops and "Reshape" not in ops, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_bert_445_other_targets_unchanged_in_number(h, target):
    model = _bert_445(h)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_shape_of_heads_no_input_holds_still_escapes(h):
    """Near miss: Shape(k^T) of the key heads ([batch, H, D, sequence]) is a graph output; no chain
    input holds those dims side by side, so the attention is not recognized, as before."""
    model = _bert_445(h, layers=1, key_shape_out=True)
    got = h.reasons(model, "ort", "attention")
    assert any(re.search(r"intermediate 'kt0' is also used by .*\(Shape\)", r) for r in got), got
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out) and "com.microsoft::Attention" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def _swin_shifted(h, nw=4, n_tok=16):
    """One shifted-window attention as Swin 4.45 wrote it: windows [batch*nW, N, C], the scores
    viewed [batch, nW, H, N, N] for the window mask, viewed back [-1, H, N, N]."""
    n, rng = h.node, np.random.default_rng(2)
    mask = np.where(rng.random((1, nw, 1, n_tok, n_tok)) < 0.2, -100.0, 0.0).astype(np.float32)
    inits = {"win": np.array([-1, n_tok, C], np.int64), "heads": np.array([0, 0, H, D], np.int64),
             "tail5": np.array([nw, H, n_tok, n_tok], np.int64), "back": np.array([-1, H, n_tok, n_tok], np.int64),
             "mask": mask, "sc": np.array(np.sqrt(D), np.float32)}
    nodes = [n("Reshape", ["x", "win"], ["xw"]), n("Shape", ["x"], ["bt"], start=0, end=1),
             n("Concat", ["bt", "tail5"], ["v5"], axis=0)]
    for p in "qkv":
        inits[f"w{p}"] = (rng.standard_normal((C, C)) / np.sqrt(C)).astype(np.float32)
        inits[f"b{p}"] = (0.1 * rng.standard_normal(C)).astype(np.float32)
        nodes += [n("MatMul", ["xw", f"w{p}"], [f"m{p}"]), n("Add", [f"m{p}", f"b{p}"], [f"{p}3"]),
                  n("Reshape", [f"{p}3", "heads"], [f"{p}r"])]
    nodes += [n("Transpose", ["qr"], ["q"], perm=[0, 2, 1, 3]), n("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["vr"], ["v"], perm=[0, 2, 1, 3]),
              n("MatMul", ["q", "kt"], ["s"]), n("Div", ["s", "sc"], ["sd"]),
              n("Reshape", ["sd", "v5"], ["s5"]), n("Add", ["s5", "mask"], ["sm5"]),
              n("Reshape", ["sm5", "back"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "win"], ["y"])]
    return h.make_model(nodes, [h.vi("x", ["batch", nw, n_tok, C])], [h.vi("y", None)], inits, opset=17)


def test_swin_shifted_window_q_shape_read_moves_to_the_windows(h):
    model = _swin_shifted(h)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert h.fired(out)["scores-bias-in-view"] >= 1
    assert ops["com.microsoft::Attention"] == 1 and "com.microsoft::MultiHeadAttention" not in ops, ops
    assert "Softmax" not in ops, ops
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, 4, 16, C)).astype(np.float32)})
