"""Shape facts of block-local attention's bookkeeping (LongT5's local / transient-global attention,
passes/_dim_source.py), each a general step: a pad to a multiple of a block (``(-n) % m``, read as an
entry of its own: n becomes ``m*(n+m-1)//m``, its blocks view ``(n+m-1)//m``), constant pads added to a
length, cuts of floor lengths (``[i : N + i]`` of N + 2 blocks), Tile (a repeat count read from
sizes), OneHot (its depth) and Split (the dims off its axis). Every name is checked against the shapes
ONNX Runtime computes over many lengths, evaluated as the rule checks evaluate names
(rewrite/_local_check.py ``_eval_dim``: a product with a floor atom is not Python's left-to-right)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from pass_testing import inferred_dims, parse, runtime_shapes

from onnx_fuse.passes._dim_lengths import minus, padded_length
from onnx_fuse.passes._dim_products import mod_neg, parse_mod_neg, shape_vector
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from onnx_fuse.rewrite._local_check import _eval_dim

_HEAD = '<ir_version: 9, opset_import: ["" : 18]>\n'

_PAD = """
            sh = Shape (x)
            s1 = Gather <axis = 0> (sh, i1)
            ng = Neg (s1)
            md = Mod (ng, three)
            u = Unsqueeze (md, z1)
            c = Concat <axis = 0> (z1, z1, z1, z1, z1, u, z1, z1)
            r = Reshape (c, pairs)
            rev = Slice (r, m1, lo, z1, m1)
            t = Transpose <perm = [1, 0]> (rev)
            pads = Reshape (t, m1)
            xp = Pad (x, pads)
            psh = Shape (xp)
            p1 = Gather <axis = 0> (psh, i1)
            nb = Div (p1, three)
            nbu = Unsqueeze (nb, z1)
            b0 = Slice (sh, z1, o1)
            bt = Concat <axis = 0> (b0, nbu, blk)
            xb = Reshape (xp, bt)"""
_CONSTS = """
            i1 = Constant <value = int64 {1}> ()
            three = Constant <value = int64 {3}> ()
            z1 = Constant <value = int64[1] {0}> ()
            o1 = Constant <value = int64[1] {1}> ()
            m1 = Constant <value = int64[1] {-1}> ()
            lo = Constant <value = int64[1] {-9223372036854775807}> ()
            pairs = Constant <value = int64[2] {-1, 2}> ()
            blk = Constant <value = int64[3] {3, 2, 16}> ()"""

#: the graph's one output, a scalar (a declared output shape would name the dims itself)
_SUM = """
            y = ReduceSum <keepdims = 0> ({})"""


def _check(proto, names: dict[str, list], feeds_for, lengths=range(1, 14)) -> None:
    """Every named dim equals the runtime size at each S (batch 2)."""
    for s in lengths:
        got = runtime_shapes(proto, list(names), feeds_for(s))
        for v, dims in names.items():
            for d, size in zip(dims, got[v]):
                assert d is not None and not str(d).startswith("unk__"), (v, dims)
                want = d if isinstance(d, int) else _eval_dim(d, {"B": 2, "S": s})
                assert want == size, (v, d, s, got[v])


def _x(s):
    return {"x": np.random.default_rng(s).standard_normal((2, s, 2, 16)).astype(np.float32)}


def test_pad_to_a_multiple_names_the_padded_length_and_its_blocks():
    """F.pad(x, (0, 0, 0, 0, 0, (-S) % 3)) then a view in blocks of 3 whose count is read back from the
    padded shape (LongT5's _pad_to_multiple / _split_into_blocks): 3*(S+2)//3 and (S+2)//3 (unknown
    before: the pad entry was no fact)."""
    proto = parse(_HEAD + "g (float[B, S, 2, 16] x) => (float y) {" + _CONSTS + _PAD + _SUM.format("xb") + "\n}")
    names = inferred_dims(proto, "xp", "xb")
    assert names == {"xp": ["B", "3*(S+2)//3", 2, 16], "xb": ["B", "(S+2)//3", 3, 2, 16]}
    _check(proto, names, _x)


def test_mod_neg_entries():
    assert mod_neg((1, ("S",)), 3) == (1, ("(-S)%3",)) and parse_mod_neg((1, ("(-S)%3",))) == ((1, ("S",)), 3)
    assert mod_neg((7, ()), 3) == (2, ()) and mod_neg((1, ("S",)), 1) == (0, ())
    assert mod_neg((1, ("p + s",)), 3) is None                    # a sum: no atom
    assert parse_mod_neg((1, ("(S)%3",))) is None and parse_mod_neg((2, ("(-S)%3",))) is None
    n = (1, ("S",))
    assert padded_length(n, (0, ()), (1, ("(-S)%4",))) == (4, ("(S+3)//4",))
    assert padded_length(n, (1, ("(-S)%4",)), (2, ())) == (1, ("4*(S+3)//4 + 2",))   # pad in front, 2 more after
    assert padded_length(n, (0, ()), (1, ("(-T)%4",))) == (1, ("(-T)%4 + S",))      # another axis's: a plain sum
    assert padded_length(n, (-1, ()), (0, ())) is None                                 # a crop
    assert padded_length((1, ("(S+2)//3",)), (1, ()), (1, ())) == (1, ("(S+8)//3",))


@pytest.mark.parametrize("fmod,neg", [(1, True), (0, False)])
def test_other_mods_are_not_read(fmod, neg):
    """fmod = 1 (C's remainder: -S % 3 is negative) and Mod of a plain size are not the pad amount."""
    src = "ng = Neg (s1)" if neg else "ng = Identity (s1)"
    proto = parse(_HEAD + f"""g (float[B, S, 2, 16] x) => (int64 md) {{{_CONSTS}
            sh = Shape (x)
            s1 = Gather <axis = 0> (sh, i1)
            {src}
            md = Mod <fmod = {fmod}> (ng, three)
        }}""")
    model = ir.from_proto(proto)
    md = next(n.outputs[0] for n in model.graph if n.op_type == "Mod")
    assert shape_vector(md, {}) is None


def _blocks3(extra: str = "") -> str:
    """xb's blocks padded by one each side and cut three ways, [i : N + i] with N read back (LongT5's
    _concatenate_3_blocks), joined on the block-length axis."""
    cuts = "".join(f"""
            c{i} = Constant <value = int64 {{{i}}}> ()
            st{i} = Constant <value = int64[1] {{{i}}}> ()
            e{i} = Add (nbk, c{i})
            e{i}u = Unsqueeze (e{i}, z1)
            w{i} = Slice (xbp, st{i}, e{i}u, o1, o1)""" for i in range(3))
    return """
            bp = Constant <value = int64[10] {0, 1, 0, 0, 0, 0, 1, 0, 0, 0}> ()
            xbp = Pad (xb, bp)
            bsh = Shape (xb)
            nbk = Gather <axis = 0> (bsh, i1)""" + cuts + """
            k9 = Concat <axis = 2> (w0, w1, w2)""" + extra


def test_constant_pads_and_cuts_of_block_counts():
    """Pad of (1, 1) on the block axis adds 2 ((S+8)//3); the cuts [0 : N], [1 : N + 1], [2 : N + 2]
    each keep N = (S+2)//3 (a floor length minus another of the same divisor, or an int), so the
    three-block keys are [B, N, 9, 2, 16] (unknown before)."""
    proto = parse(_HEAD + "g (float[B, S, 2, 16] x) => (float y) {" + _CONSTS + _PAD + _blocks3()
                  + _SUM.format("k9") + "\n}")
    names = inferred_dims(proto, "xbp", "w0", "w1", "w2", "k9")
    assert names["xbp"][1] == "(S+8)//3" and names["k9"] == ["B", "(S+2)//3", 9, 2, 16]
    assert all(names[w][1] == "(S+2)//3" for w in ("w0", "w1", "w2"))
    _check(proto, names, _x)


def test_floor_lengths_minus():
    f = lambda c: (1, (f"(S+{c})//3" if c else "(S)//3",))  # noqa: E731
    assert minus(f(8), f(2)) == (2, ()) and minus(f(5), (1, ())) == f(2) and minus(f(3), (1, ())) == f(0)
    assert minus(f(7), f(2)) is None          # 5 / 3 is no int: the difference depends on S
    assert minus(f(2), f(5)) is None and minus(f(2), (1, ())) is None   # (S+2)//3 - 1 < 0 at S = 0
    assert minus((1, ("(S+8)//2",)), f(2)) is None                       # other divisors


def _globals(tail: str) -> str:
    """LongT5's global tokens: G = S // 4 block ids one-hot (depth G + 1, the last column dropped)
    aggregate the hidden states [B, S, 32] to [B, G, 32], viewed [B, G, 2, 16]."""
    return """
            four = Constant <value = int64 {4}> ()
            g = Div (s1, four)
            dp = Add (g, i1)
            ohv = Constant <value = int64[2] {0, 1}> ()
            oh = OneHot <axis = -1> (ids, dp, ohv)
            two = Constant <value = int64[1] {2}> ()
            ohs = Slice (oh, z1, m1, two)
            ohf = Cast <to = 1> (ohs)
            oht = Transpose <perm = [0, 2, 1]> (ohf)
            gh = MatMul (oht, hs)
            gv = Constant <value = int64[4] {0, -1, 2, 16}> ()
            gk = Reshape (gh, gv)""" + tail


def _ids(s):
    rng = np.random.default_rng(s)
    return {"x": rng.standard_normal((2, s, 2, 16)).astype(np.float32),
            "hs": rng.standard_normal((2, s, 32)).astype(np.float32),
            "ids": np.minimum(np.arange(s) // 4, max(s // 4 - 1, 0))[None].repeat(2, 0).astype(np.int64)}


def test_one_hot_depth_and_tiled_globals():
    """OneHot's axis has its depth's size (G + 1, a sum: (S+4)//4; cut [:-1] to (S)//4); a Tile of the
    global keys [B, 1, G, 2, 16] by [1, N, 1, 1, 1] (N read from the blocks' shape) is [B, N, G, 2, 16];
    joined to the three-block keys the key length is 9 + G, one floor atom (S+36)//4 (unknown before)."""
    tail = """
            gu = Unsqueeze (gk, o1)
            ksh = Shape (k9)
            nk = Gather <axis = 0> (ksh, i1)
            nku = Unsqueeze (nk, z1)
            ones3 = Constant <value = int64[3] {1, 1, 1}> ()
            reps = Concat <axis = 0> (o1, nku, ones3)
            gt = Tile (gu, reps)
            kall = Concat <axis = 2> (k9, gt)"""
    proto = parse(_HEAD + "g (float[B, S, 2, 16] x, float[B, S, 32] hs, int64[B, S] ids) => "
                  "(float y) {" + _CONSTS + _PAD + _blocks3() + _globals(tail) + _SUM.format("kall") + "\n}")
    names = inferred_dims(proto, "oh", "ohs", "gk", "gt", "kall")
    assert names["oh"] == ["B", "S", "(S+4)//4"] and names["ohs"] == ["B", "S", "(S)//4"]
    assert names["gt"] == ["B", "(S+2)//3", "(S)//4", 2, 16]
    assert names["kall"] == ["B", "(S+2)//3", "(S+36)//4", 2, 16]
    _check(proto, names, _ids, lengths=range(4, 14))


def test_split_keeps_the_dims_off_its_axis():
    """A packed projection split on its last axis: each part keeps the rows' dims (here the global
    tokens' (S)//4, unknown before)."""
    tail = """
            sp = Constant <value = int64[2] {16, 16}> ()
            ga, gb = Split <axis = -1> (gh, sp)"""
    proto = parse(_HEAD + "g (float[B, S, 2, 16] x, float[B, S, 32] hs, int64[B, S] ids) => (float y) {"
                  + _CONSTS + """
            sh = Shape (x)
            s1 = Gather <axis = 0> (sh, i1)""" + _globals(tail) + _SUM.format("gb") + "\n}")
    names = inferred_dims(proto, "ga", "gb")
    assert names == {"ga": ["B", "(S)//4", 16], "gb": ["B", "(S)//4", 16]}
    _check(proto, names, _ids, lengths=range(4, 14))


def test_names_evaluate_as_the_shape_facts_read_them():
    env = {"S": 7, "a": 5, "b": 7, "p": 3}
    assert _eval_dim("3*(S+2)//3", env) == 9 and _eval_dim("(a)//2*(b)//2", env) == 6
    assert _eval_dim("p + 1", env) == 4 and _eval_dim("((S)//2+3)//4", env) == 1 and _eval_dim("2*S", env) == 14


#: Swin's window padding (transformers' maybe_pad): ``(w - n % w) % w`` of the patch grid's height and
#: width (4 here), padded at the end of each by F.pad, then the windows view read back from the padded
#: shape; the grid comes out of a patch Conv (floor atoms: ``(H)//2``)
_WINDOWS = """
            wt = Constant <value = float[8, 3, 2, 2] {""" + ", ".join(["0.01"] * 96) + """}> ()
            y = Conv <kernel_shape = [2, 2], strides = [2, 2]> (x, wt)
            t = Transpose <perm = [0, 2, 3, 1]> (y)
            sh = Shape (t)
            i0 = Constant <value = int64 {0}> ()
            i2 = Constant <value = int64 {2}> ()
            b = Gather <axis = 0> (sh, i0)
            h = Gather <axis = 0> (sh, i1)
            w = Gather <axis = 0> (sh, i2)
            four = Constant <value = int64 {4}> ()
            win = Constant <value = int64 {C}> ()
            hm = Mod (h, four)
            hs = Sub (win, hm)
            ph = Mod (hs, four)
            wm = Mod (w, four)
            ws = Sub (win, wm)
            pw = Mod (ws, four)
            phu = Unsqueeze (ph, z1)
            pwu = Unsqueeze (pw, z1)
            pads = Concat <axis = 0> (z1, z1, z1, z1, z1, phu, pwu, z1)
            tp = Pad (t, pads)
            psh = Shape (tp)
            hp = Gather <axis = 0> (psh, i1)
            wp = Gather <axis = 0> (psh, i2)
            nh = Div (hp, four)
            nw = Div (wp, four)
            bu = Unsqueeze (b, z1)
            nhu = Unsqueeze (nh, z1)
            nwu = Unsqueeze (nw, z1)
            f1 = Constant <value = int64[1] {4}> ()
            c8 = Constant <value = int64[1] {8}> ()
            vt = Concat <axis = 0> (bu, nhu, f1, nwu, f1, c8)
            v = Reshape (tp, vt)
            vp = Transpose <perm = [0, 1, 3, 2, 4, 5]> (v)
            wtg = Constant <value = int64[4] {-1, 4, 4, 8}> ()
            wins = Reshape (vp, wtg)
            ttg = Constant <value = int64[3] {-1, 16, 8}> ()
            toks = Reshape (wins, ttg)"""


def _swin(c: int = 4, mod: str = "") -> onnx.ModelProto:
    body = _WINDOWS.replace("{C}", f"{{{c}}}")
    if mod:
        body = body.replace("ph = Mod (hs, four)", f"ph = Mod {mod} (hs, four)")
    return parse(_HEAD + "g (float[B, 3, H, W] x) => (float s) {" + _CONSTS + body
                 + "\n            s = ReduceSum <keepdims = 0> (toks)\n}")


def test_window_padding_names_the_padded_grid_and_its_windows():
    """Swin's ``(4 - n % 4) % 4`` is ``(-n) % 4`` for every n, so the padded grid is 4*((H)//2+3)//4 and
    the windows' -1 is solved (the Pad's dims and the windows were unknown before: only Neg's form was
    read). Every name equals ONNX Runtime's size at each image size."""
    proto = _swin()
    names = inferred_dims(proto, "tp", "wins", "toks")
    hp, wp = "4*((H)//2+3)//4", "4*((W)//2+3)//4"
    assert names["tp"] == ["B", hp, wp, 8]
    assert names["wins"][1:] == [4, 4, 8] and names["toks"][1:] == [16, 8]
    for h in range(2, 21, 3):
        for w in (2, 7, 8, 13):
            x = np.random.default_rng(h * w).standard_normal((2, 3, h, w)).astype(np.float32)
            got = runtime_shapes(proto, ["tp", "wins", "toks"], {"x": x})
            for v, dims in names.items():
                want = [d if isinstance(d, int) else _eval_dim(d, {"B": 2, "H": h, "W": w}) for d in dims]
                assert want == list(got[v]), (v, dims, h, w, got[v])


@pytest.mark.parametrize("c,mod", [(5, ""), (4, "<fmod = 1>")])
def test_window_padding_near_misses_are_not_read(c, mod):
    """(5 - n % 4) % 4 is (1 - n) % 4, not the pad to a multiple; an fmod = 1 outer Mod is C's
    remainder: neither reads as ``(-n) % 4``, so the padded height stays unnamed."""
    model = ir.from_proto(_swin(c, mod))
    ShapeInferencePass()(model)
    found = {o.name: o for n in model.graph for o in n.outputs}
    assert shape_vector(found["ph"], {}) is None
    dim = found["tp"].shape.dims[1]
    assert not isinstance(dim, int) and "4*" not in str(getattr(dim, "value", ""))


def _merge_graph(shift: str = "2", second_end: str = "2", odd_start: str = "1", join: str = "eve, odo") -> onnx.ModelProto:
    """Swin's shifted windows and patch merging on x [B, H, W, 8]: torch.roll(x, -2, 1) as
    Concat(x[:, 2:], x[:, :2]), then x[:, 0::2, 0::2] and x[:, 1::2, 1::2] joined on channels and the
    merged grid's sizes read back as (H + 1) // 2 (transformers' height_downsampled) for the next
    stage's view [B, H2, W2, 16] (``join``: what the channels Concat joins)."""
    return parse(_HEAD + f"""g (float[B, H, W, 8] x) => (float s) {{{_CONSTS}
            big = Constant <value = int64[1] {{9223372036854775807}}> ()
            sft = Constant <value = int64[1] {{{shift}}}> ()
            e2 = Constant <value = int64[1] {{{second_end}}}> ()
            a1 = Slice (x, sft, big, o1)
            a2 = Slice (x, z1, e2, o1)
            r = Concat <axis = 1> (a1, a2)
            two = Constant <value = int64[1] {{2}}> ()
            st1 = Constant <value = int64[1] {{{odd_start}}}> ()
            ev = Slice (r, z1, big, o1, two)
            eve = Slice (ev, z1, big, two, two)
            od = Slice (r, st1, big, o1, two)
            odo = Slice (od, st1, big, two, two)
            m = Concat <axis = -1> ({join})
            sh = Shape (x)
            i0 = Constant <value = int64 {{0}}> ()
            i2 = Constant <value = int64 {{2}}> ()
            one = Constant <value = int64 {{1}}> ()
            twos = Constant <value = int64 {{2}}> ()
            b = Gather <axis = 0> (sh, i0)
            h = Gather <axis = 0> (sh, i1)
            w = Gather <axis = 0> (sh, i2)
            h1 = Add (h, one)
            h2 = Div (h1, twos)
            w1 = Add (one, w)
            w2 = Div (w1, twos)
            bu = Unsqueeze (b, z1)
            h2u = Unsqueeze (h2, z1)
            w2u = Unsqueeze (w2, z1)
            c16 = Constant <value = int64[1] {{16}}> ()
            tg = Concat <axis = 0> (bu, h2u, w2u, c16)
            mv = Reshape (m, tg)
            s = ReduceSum <keepdims = 0> (mv)
        }}""")


def test_roll_and_patch_merging_keep_the_grid():
    """The roll's two cuts split the axis at one point, so together they are H whatever the shift;
    x[0::2] holds (H+1)//2 entries and x[1::2] (H)//2; (H + 1) // 2 read from shapes is the same
    (H+1)//2, so the merged view is named (all unknown before: no roll, no strided Slice, no (n + c) // s).
    Every name equals ONNX Runtime's size at each H, W (odd ones too, with the halves' Concat joining
    the even half twice: the model's own fails there at run time)."""
    proto, odd = _merge_graph(), _merge_graph(join="eve, eve")
    names = inferred_dims(proto, "r", "eve", "odo", "m", "mv")
    assert names == inferred_dims(odd, "r", "eve", "odo", "m", "mv")
    assert names["r"] == ["B", "H", "W", 8]
    assert names["eve"] == ["B", "(H+1)//2", "(W+1)//2", 8] and names["odo"] == ["B", "(H)//2", "(W)//2", 8]
    assert names["m"] == ["B", "(H+1)//2", "(W+1)//2", 16] and names["mv"] == names["m"]
    for h in (1, 2, 3, 5, 8):
        for w in (1, 4, 7):
            x = np.random.default_rng(h + w).standard_normal((2, h, w, 8)).astype(np.float32)
            values = ["r", "eve", "odo", "m", "mv"]
            got = runtime_shapes(proto if h % 2 == 0 == w % 2 else odd, values, {"x": x})
            for v in values:
                want = [d if isinstance(d, int) else _eval_dim(d, {"B": 2, "H": h, "W": w}) for d in names[v]]
                assert want == list(got[v]), (v, names[v], h, w, got[v])


@pytest.mark.parametrize("shift", ["-2", "0", "11"])
def test_any_roll_shift_keeps_the_axis(shift):
    """A negative shift, none, or one past the end: the two cuts still make up the axis."""
    assert inferred_dims(_merge_graph(shift, shift), "r")["r"] == ["B", "H", "W", 8]


def test_near_misses_are_not_rolls_or_strides():
    """x[:, 2:] with x[:, :3] overlaps (H + 1 entries where H >= 3); x[2::2] starts past its step
    (ceil((H - 2) / 2) would be negative at H = 0 as a floor): neither is read."""
    names = inferred_dims(_merge_graph("2", "3", "2", join="eve, eve"), "r", "od")
    assert names["r"][1] is None or str(names["r"][1]).startswith("unk")
    assert names["od"][1] is None or str(names["od"][1]).startswith("unk")


def test_int_arithmetic_of_sizes_reads_only_plain_ints():
    """TorchScript's F.pad fills its pads up to 2 * rank with ConstantOfShape(8 - len(pads)) zeros: 8 - 6
    reads as 2 (so the zeros are read, and the batch axis's pads are 0); S + 1 stays unread without
    ``sums`` (one spelling only), and (S + 1) // 2 is the floor atom."""
    proto = parse(_HEAD + """g (float[B, S] x) => (int64[2] y) {
            six = Constant <value = int64[6] {0, 0, 0, 0, 0, 0}> ()
            n6 = Shape (six)
            i0 = Constant <value = int64 {0}> ()
            n = Gather <axis = 0> (n6, i0)
            eight = Constant <value = int64 {8}> ()
            k = Sub (eight, n)
            z1 = Constant <value = int64[1] {0}> ()
            ku = Unsqueeze (k, z1)
            zs = ConstantOfShape <value = int64[1] {0}> (ku)
            sh = Shape (x)
            i1 = Constant <value = int64 {1}> ()
            s = Gather <axis = 0> (sh, i1)
            one = Constant <value = int64 {1}> ()
            s1 = Add (s, one)
            two = Constant <value = int64 {2}> ()
            half = Div (s1, two)
            y = Identity (zs)
        }""")
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    found = {o.name: o for n in model.graph for o in n.outputs}
    assert shape_vector(found["k"], {}) == ([(2, ())], True)
    assert shape_vector(found["zs"], {}) == ([(0, ()), (0, ())], False)
    assert shape_vector(found["s1"], {}) == ([None], True)
    assert shape_vector(found["half"], {}) == ([(1, ("(S+1)//2",))], True)
