"""traced-lengths: a declared symbol a Reshape's element count pins (passes/traced_lengths.py).

TorchScript's export of torch nn.MultiheadAttention (batch_first, need_weights=False) with the
sequence axis declared dynamic views its keys and values ``[6, B*H, D]``: the tracer wrote the
export's length, 6, where the queries' view reads ``Shape(x)[0]``. The model runs at seq = 6 alone
(the Reshape fails elsewhere); with the inner shapes at 6 the key / value head views are proven like
the queries' and the layout glue around the fused attention goes, as in the static export. The graph
below is that export after the exporter's shape arithmetic (Split for its packed picks); LayerNorm
and biases trained-like, every result compared with the original in ONNX Runtime at seq = 6.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_fuse
import pytest
from onnx import TensorProto, helper

from onnx_fuse.passes._dim_products import to_dim
from onnx_fuse.passes.traced_lengths import pinned_symbol

C, H, D, TRACED = 32, 4, 8, 6
ATTN = {"ort": "MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _ts_mha(traced: int | None = TRACED, *, pins: tuple[int, ...] = ()) -> onnx.ModelProto:
    """torch MHA's SDPA path as TorchScript writes it; ``traced``: the constant key length of the
    k / v views (None: read from the shape like the queries'); ``pins``: extra Reshapes of x's
    sequence axis to these constant lengths (a second, clashing fact)."""
    rng = np.random.default_rng(22)
    inits = {"g": 1 + 0.2 * rng.standard_normal(C), "beta": 0.1 * rng.standard_normal(C),
             "w": 0.3 * rng.standard_normal((C, 3 * C)), "b": 0.1 * rng.standard_normal(3 * C),
             "wo": 0.3 * rng.standard_normal((C, C)), "bo": 0.1 * rng.standard_normal(C)}
    tensors = [helper.make_tensor(k, TensorProto.FLOAT, v.shape, v.astype(np.float32).ravel())
               for k, v in inits.items()]
    tensors.append(helper.make_tensor("sq", TensorProto.FLOAT, [], [D ** -0.25]))   # sqrt(scale) on q and k
    for k, v in {"i0": 0, "i1": 1, "hh": H}.items():
        tensors.append(helper.make_tensor(k, TensorProto.INT64, [], [v]))
    for k, v in {"parts": [C, C, C], "ax0": [0], "hd": [D], "h1": [H], "cc": [C], "traced": [traced or 0]}.items():
        tensors.append(helper.make_tensor(k, TensorProto.INT64, [len(v)], v))
    n = helper.make_node
    nodes = [n("LayerNormalization", ["x", "g", "beta"], ["ln"], axis=-1, epsilon=1e-5),
             n("Transpose", ["ln"], ["xt"], perm=[1, 0, 2]), n("Shape", ["xt"], ["sh"]),
             n("Gather", ["sh", "i0"], ["s"], axis=0), n("Gather", ["sh", "i1"], ["bt"], axis=0),
             n("Mul", ["bt", "hh"], ["bh"]), n("Unsqueeze", ["s", "ax0"], ["s1"]),
             n("Unsqueeze", ["bt", "ax0"], ["b1"]), n("Unsqueeze", ["bh", "ax0"], ["bh1"]),
             n("MatMul", ["xt", "w"], ["qkv0"]), n("Add", ["qkv0", "b"], ["qkv"]),
             n("Split", ["qkv", "parts"], ["q", "k", "v"], axis=2),
             n("Concat", ["s1", "bh1", "hd"], ["tq"], axis=0),
             n("Concat", ["traced" if traced else "s1", "bh1", "hd"], ["tk"], axis=0)]
    for t, tgt in (("q", "tq"), ("k", "tk"), ("v", "tk")):
        nodes += [n("Reshape", [t, tgt], [f"{t}r"]), n("Transpose", [f"{t}r"], [f"{t}3"], perm=[1, 0, 2])]
    nodes += [n("Shape", ["k3"], ["shk"]), n("Gather", ["shk", "i1"], ["sk"], axis=0),
              n("Unsqueeze", ["sk", "ax0"], ["sk1"]),
              n("Concat", ["b1", "h1", "s1", "hd"], ["t4q"], axis=0),
              n("Concat", ["b1", "h1", "sk1", "hd"], ["t4k"], axis=0)]
    for t, tgt in (("q", "t4q"), ("k", "t4k"), ("v", "t4k")):
        nodes.append(n("Reshape", [f"{t}3", tgt], [f"{t}4"]))
    nodes += [n("Mul", ["q4", "sq"], ["qs"]), n("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2]),
              n("Mul", ["kt", "sq"], ["ks"]), n("MatMul", ["qs", "ks"], ["sc"]),
              n("Softmax", ["sc"], ["p"], axis=-1), n("MatMul", ["p", "v4"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[2, 0, 1, 3]), n("Mul", ["bt", "s"], ["sb"]),
              n("Unsqueeze", ["sb", "ax0"], ["sb1"]), n("Concat", ["sb1", "cc"], ["t2"], axis=0),
              n("Reshape", ["ot", "t2"], ["o2"]), n("Gemm", ["o2", "wo", "bo"], ["y2"], transB=1),
              n("Concat", ["s1", "b1", "cc"], ["t3"], axis=0), n("Reshape", ["y2", "t3"], ["y3"]),
              n("Transpose", ["y3"], ["y"], perm=[1, 0, 2])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", C])]
    for i, length in enumerate(pins):   # x viewed [length, B, C]: pins seq to length
        tensors.append(helper.make_tensor(f"pin{i}", TensorProto.INT64, [3], [length, 0, C]))
        nodes += [n("Transpose", ["x"], [f"xs{i}"], perm=[1, 0, 2]), n("Reshape", [f"xs{i}", f"pin{i}"], [f"xv{i}"]),
                  n("ReduceSum", [f"xv{i}"], [f"r{i}"], keepdims=0)]
        outputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT, []))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", C])
    graph = helper.make_graph(nodes, "ts_mha", [x], outputs, tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def _fused(model, target, level, **kw):
    r = onnx_fuse.optimize(model, level=level, target=target, verify=True, shapes={"seq": (TRACED,)}, **kw)
    assert r.report.verify["passed"], r.report.verify["outputs"]
    return r, r.report.ops_after


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_traced_key_length_views_fold_like_the_queries(target, level):
    r, ops = _fused(_ts_mha(), target, level)
    attn = [k for k in ops if k.endswith(ATTN[target])]
    assert attn and ops[attn[0]] == 1, ops
    # the static export's histogram: no head views, no layout Transposes around the attention
    assert ops.get("Transpose", 0) == 0 and ops.get("Reshape", 0) == 0, ops
    assert any(p.name == "traced-lengths" and p.stats.get("seq=6") for p in r.report.passes)
    assert any("runs only at seq = 6" in w for w in r.report.warnings), r.report.warnings


def test_without_the_pass_the_views_stay():
    """The leftover this fixes: the pass disabled, the key / value head views stay (4 Transposes at ort-O3)."""
    _, ops = _fused(_ts_mha(), "ort", 3, disable=["traced-lengths"])
    assert ops.get("Transpose", 0) >= 2, ops


def test_key_length_read_from_the_shape_pins_nothing():
    """The same model with the key length read like the queries' (a correct dynamic export): nothing
    pinned, no warning, the same fused histogram."""
    r, ops = _fused(_ts_mha(traced=None), "ort", 3)
    assert not any(p.name == "traced-lengths" and p.stats for p in r.report.passes)
    assert not any("runs only at" in w for w in r.report.warnings)
    assert ops.get("Transpose", 0) == 0, ops


def test_two_reshapes_pinning_two_lengths_pin_nothing():
    """Two facts that disagree (the model runs at no length at all) pin nothing."""
    model = _ts_mha(pins=(5,))
    r = onnx_fuse.optimize(model, level=3, target="ort")
    assert not any(p.name == "traced-lengths" and p.stats for p in r.report.passes)


@pytest.mark.parametrize("ins,outs,want", [
    (["seq", "batch", 32], [6, "4*batch", 8], ("seq", 6)),
    (["seq", "batch", 32], ["seq", "4*batch", 8], None),       # the same symbol on both sides
    (["seq", "seq", 32], [36, 32], None),                       # seq squared: not one value of one power
    (["seq", "batch", 32], [6, 8], None),                       # two symbols left
    (["seq", 32], [7, 8], None),                                # 32*seq = 56: no integer seq
    ([6, 32], ["n", 32], None),                                 # a symbol of the target's own
    (["s", 10], [5, 4], ("s", 2)),
])
def test_pinned_symbol(ins, outs, want):
    assert pinned_symbol([to_dim(d) for d in ins], [to_dim(d) for d in outs]) == want


@pytest.mark.parametrize("target,level", [("ort", 3), ("trt", 4)])
def test_verify_feeds_the_pinned_length(target, level):
    """--verify with no --shape: the original runs only at seq = 6, so verify feeds 6 (a default of
    8 failed: "ONNX Runtime fails to run the original model on these inputs") and says so."""
    r = onnx_fuse.optimize(_ts_mha(), level=level, target=target, verify=True)
    v = r.report.verify
    assert v["passed"], v["outputs"]
    assert v["inputs"]["x"][1] == TRACED
    assert any(n.startswith(f"traced lengths: fed seq = {TRACED}") for n in v["notes"]), v["notes"]


def test_verify_takes_the_users_length_first():
    """A --shape for the symbol is the user's: fed as asked (here a length the model refuses, so the
    one-line error; the batch dim from --shape is kept beside the pin)."""
    from onnx_fuse.errors import UserError

    with pytest.raises(UserError, match="fails to run the original"):
        onnx_fuse.optimize(_ts_mha(), level=3, target="ort", verify=True, shapes={"seq": (8,)})
    r = onnx_fuse.optimize(_ts_mha(), level=3, target="ort", verify=True, shapes={"batch": (3,)})
    assert r.report.verify["passed"] and r.report.verify["inputs"]["x"] == [3, TRACED, C]


def test_verify_of_a_model_with_nothing_pinned_has_no_note():
    r = onnx_fuse.optimize(_ts_mha(traced=None), level=3, target="ort", verify=True)
    assert r.report.verify["passed"] and r.report.verify["inputs"]["x"][1] == 8
    assert not any(n.startswith("traced lengths") for n in r.report.verify["notes"])


def test_pinned_lengths_reads_the_pass_records():
    from onnx_fuse.passes.traced_lengths import pinned_lengths
    from onnx_fuse.passes._infra import PassRecord

    def rec(name, **stats):
        return PassRecord(name=name, modified=True, seconds=0.0, nodes_before=0, nodes_after=0,
                          stats={k.replace("_eq_", "="): v for k, v in stats.items()})

    records = [rec("traced-lengths", seq_eq_6=1), rec("rewrite", **{"a_eq_3": 1}),
               rec("traced-lengths", seq_eq_6=1, n_eq_4=1), rec("traced-lengths", n_eq_5=1)]
    assert pinned_lengths(records) == {"seq": 6}   # n: 4 and 5 from two runs, left out
