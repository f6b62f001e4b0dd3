"""transpose-sunk through a region fed by Transposes of two perms (passes/_transpose_region.py's mixed
entries, _transpose_sink.py).

DeepSeek V3's keys are Concat(k_nope, k_pe) on the last axis, which dynamo writes as two slice writes on the
buffer transposed [3, 1, 2, 0] (covering-writes makes them one Concat on axis 0 between Transposes). At trt
the attention lowering's [0, 2, 1, 3] to the 3-D keys composes with the Transposes around the Concat, and
k_nope's with the head split's, so the Concat read Transpose(k_nope [B, S, H, 16], [3, 2, 1, 0]) and
Transpose(k_pe [B, H, S, 8], [3, 1, 2, 0]): one layout [D, H, S, B] from two perms. The sink took entries of
one perm only, so the three Transposes stayed (deepseek_v3 dyn_mask / kv trt-O4: 10 Transposes, 6 at ort-O3 /
onnx-O3). A Transpose of the region's rank by another perm p' now joins the region as it is, its perm
rewritten to p'[p1's inverse] (the region runs on the first entries' inputs), where the region's layout inputs
are its only readers; the count takes it on both sides."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_fuse
from pass_testing import check_same, fold_layout, normal_feeds
from pass_testing import ops_but_constants as ops

KEYS = """
    g (float[B, S, 2, 6] nope, float[B, 2, S, 4] pe) => (float[B, S, 2, 10] k{extra_out}) {{
        nt = Transpose <perm = [3, 2, 1, 0]> (nope)
        pt = Transpose <perm = [3, 1, 2, 0]> (pe)
        c = Concat <axis = 0> (nt, pt)
        k = Transpose <perm = [3, 2, 1, 0]> (c){extra}
    }}"""


def _keys(extra: str = "", extra_out: str = "") -> str:
    return KEYS.format(extra=extra, extra_out=extra_out)


def test_concat_of_two_perms_with_one_layout():
    proto, model, modified, p = fold_layout(_keys())
    assert modified and p.stats["transpose-sunk"] == 1
    # k = Concat(nope, Transpose(pe, [0, 2, 1, 3]), axis=-1): the nope part read as it is
    assert ops(model) == {"Transpose": 1, "Concat": 1}, ops(model)
    t = next(n for n in model.graph if n.op_type == "Transpose")
    assert t.inputs[0].name == "pe" and list(t.attributes["perm"].value) == [0, 2, 1, 3]
    cat = next(n for n in model.graph if n.op_type == "Concat")
    assert cat.inputs[0].name == "nope" and cat.attributes["axis"].value == 3
    for b, s, seed in ((2, 5, 0), (1, 3, 1)):
        check_same(proto, model, normal_feeds(seed, nope=(b, s, 2, 6), pe=(b, 2, s, 4)))


def test_elementwise_op_of_two_perms():
    # Add(Transpose(a, p1), Transpose(b, p2)) of one layout, then back: one Transpose (b's) left
    proto, model, modified, _ = fold_layout("""
        g (float[B, S, 2, 4] a, float[B, 2, S, 4] b) => (float[B, S, 2, 4] y) {
            ta = Transpose <perm = [3, 2, 1, 0]> (a)
            tb = Transpose <perm = [3, 1, 2, 0]> (b)
            m = Add (ta, tb)
            r = Relu (m)
            y = Transpose <perm = [3, 2, 1, 0]> (r)
        }""")
    assert modified and ops(model)["Transpose"] == 1, ops(model)
    check_same(proto, model, normal_feeds(2, a=(2, 3, 2, 4), b=(2, 2, 3, 4)))


def test_mixed_transpose_read_elsewhere_is_refused():
    # pt is also a graph output: its perm cannot change, so the region is left as it is
    proto, model, modified, _ = fold_layout(_keys(extra_out=", float[4, 2, S, B] pt"))
    assert not modified and ops(model)["Transpose"] == 3, ops(model)


def test_nothing_saved_is_refused():
    # nope's Transpose is kept for a MatMul and the exit does not compose to the identity: 3 before, 3 after
    proto, model, modified, _ = fold_layout("""
        g (float[B, S, 2, 6] nope, float[B, 2, S, 4] pe, float[B, 6] w) => (float[S, B, 2, 10] k, float[6, 2, S, 6] u) {
            nt = Transpose <perm = [3, 2, 1, 0]> (nope)
            pt = Transpose <perm = [3, 1, 2, 0]> (pe)
            c = Concat <axis = 0> (nt, pt)
            k = Transpose <perm = [2, 3, 1, 0]> (c)
            u = MatMul (nt, w)
        }""")
    assert not modified and ops(model)["Transpose"] == 3, ops(model)


# DeepSeek V3's MLA attention as dynamo writes it (hidden 32, 2 heads, q / k heads of 16 + 8, v heads of 16):
# k_nope and v one [B, S, H, 32] view split after the head Transpose, k_pe one head expanded over the heads,
# keys built by two slice writes on the buffer transposed [3, 1, 2, 0]
MLA = """<ir_version: 9, opset_import: ["" : 18]>
    g (float[B, S, 32] x) => (float[B, S, 32] y)
    <int64[4] vq = {0, 0, 2, 24}, int64[4] vkv = {0, 0, 2, 32}, int64[4] vpe = {0, 0, 1, 8}, int64[3] vo = {0, 0, 32},
     int64[16, 1] i1 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
     int64[8, 1] i2 = {16, 17, 18, 19, 20, 21, 22, 23}, int64[2] split = {16, 16}, int64[1] d24 = {24},
     int64[1] d8 = {8}, float scale = {0.2041241452}>
    {
        qp = MatMul(x, wq)
        q4 = Reshape(qp, vq)
        q = Transpose<perm = [0, 2, 1, 3]>(q4)
        kvp = MatMul(x, wkv)
        kv4 = Reshape(kvp, vkv)
        kvt = Transpose<perm = [0, 2, 1, 3]>(kv4)
        k_nope, v = Split<axis = 3>(kvt, split)
        pep = MatMul(x, wpe)
        pe4 = Reshape(pep, vpe)
        pe = Transpose<perm = [0, 2, 1, 3]>(pe4)
        z0 = Constant<value_ints = [0]>()
        z3 = Constant<value_ints = [3]>()
        sn = Shape(k_nope)
        lead = Slice(sn, z0, z3)
        full = Concat<axis = 0>(lead, d24)
        sh8 = Concat<axis = 0>(lead, d8)
        buf = ConstantOfShape<value = float[1] {0.0}>(full)
        pe_e = Expand(pe, sh8)
        bt = Transpose<perm = [3, 1, 2, 0]>(buf)
        nt = Transpose<perm = [3, 1, 2, 0]>(k_nope)
        w1 = ScatterND(bt, i1, nt)
        pt = Transpose<perm = [3, 1, 2, 0]>(pe_e)
        w2 = ScatterND(w1, i2, pt)
        k = Transpose<perm = [3, 1, 2, 0]>(w2)
        kT = Transpose<perm = [0, 1, 3, 2]>(k)
        s = MatMul(q, kT)
        ss = Mul(s, scale)
        p = Softmax<axis = -1>(ss)
        o = MatMul(p, v)
        ot = Transpose<perm = [0, 2, 1, 3]>(o)
        o3 = Reshape(ot, vo)
        y = MatMul(o3, wo)
    }"""


def _mla() -> onnx.ModelProto:
    proto = onnx.parser.parse_model(MLA)
    rng = np.random.default_rng(0)
    for name, shape in (("wq", (32, 48)), ("wkv", (32, 64)), ("wpe", (32, 8)), ("wo", (32, 32))):
        proto.graph.initializer.append(
            onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name))
    onnx.checker.check_model(proto, full_check=True)
    return proto


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_mla_keys_keep_one_transpose(target, level):
    # before: 3 Transposes (the Concat's two entries and the one to the 3-D keys); after: k_pe's to heads-last
    proto = _mla()
    result = onnx_fuse.optimize(proto, level=level, target=target, verify=True, float32_plugins=target == "trt",
                                shapes={"x": (2, 5, 32)})
    assert result.report.passed
    counts = ops(result.model)
    assert counts["Attention"] == 1 and "Softmax" not in counts and "ScatterND" not in counts, counts
    assert counts["Transpose"] == 1, counts
    for b, s, seed in ((2, 5, 3), (1, 7, 4), (3, 1, 5)):
        check_same(proto, result.model, normal_feeds(seed, x=(b, s, 32)))
