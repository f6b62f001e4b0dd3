"""IdentityEliminationPass: a Cast back from a lossless widening (float16 -> float32 -> float16,
TorchScript's softmax(dtype=float32).to(float16) of a float16 softmax) is a no-op; a narrowing
round trip (float32 -> float16 -> float32) rounds and stays."""

from __future__ import annotations

from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(IdentityEliminationPass, proto, shape_inference=True)
    return proto, model, modified, p


def test_widening_round_trip_is_removed():
    proto, model, modified, p = run('''
    g (float16[N, 4] x, float[N, 4] w) => (float16[N, 4] y, float[N, 4] z)
    {
        s = Softmax<axis = -1>(x)
        u = Cast<to = 1>(s)
        d = Cast<to = 10>(u)
        y = Neg(d)
        wd = Cast<to = 11>(w)
        z = Cast<to = 1>(wd)
    }''')
    assert modified and p.stats["Cast"] == 2
    assert ops(model)["Neg"] == 1 and ops(model)["Softmax"] == 1
    assert [n for n in model.graph if n.op_type == "Neg"][0].inputs[0].producer().op_type == "Softmax"
    check_same(proto, model)


def test_narrowing_round_trip_is_kept():
    proto, model, modified, _ = run('''
    g (float[N, 4] x) => (float[N, 4] y)
    {
        h = Cast<to = 10>(x)
        y = Cast<to = 1>(h)
    }''')
    assert not modified and ops(model) == {"Cast": 2}
