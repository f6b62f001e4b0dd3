"""rotary-rotate-half-tables, rotate-half RoPE y = x*cos + concat(-x2, x1)*sin with its tables read as values
(half_columns: the first D/2 columns equal the last D/2; rotation_pair; table_layout): the spellings no
older rule took (each read one table making in one layout), built here and fused, each compared with the
unfused graph in ONNX Runtime:
- seq-first x [S, B, H, D] with computed tables Cos / Sin(concat(f, f)) moved to [S, 1, D] by a Transpose
  and unsqueezed at the heads (seq-first code applying HF's tables), and with buffer rows gathered by
  position ids the same way;
- x [B, S, H, D] with a buffer's rows cut at run time ([p, p + S), p a past length), both tables scaled;
- the tables' halves made by Tile(f, [1, 1, 2]) instead of Concat(f, f);
- partial rotary (the first half of the head dim rotated): gathered rows with x [B, S, H, D] (rotary-partial
  on top), scaled computed tables with x [S, B, H, D];
- a float16 x with float32 tables cast down.
Refused: halves that differ (cos(concat(f, g)), GPT-J's interleave-repeated tables), Sin of other angles,
rotate-half with no sign (not a rotation); with the sign on the other half (a rotation by -angle) this rule
does not match."""

from __future__ import annotations

import numpy as np
import pytest

RULE = "rotary-rotate-half-tables"
INT64_MAX = np.iinfo(np.int64).max
TARGETS = ["ort", "onnx", "trt"]


def _angles(rows, half, batch=None):
    a = np.arange(rows)[:, None] * (1.0 / 100 ** (np.arange(half) / half))[None, :] + 0.05
    if batch is not None:
        a = np.stack([a + 0.7 * b for b in range(batch)])
    return a.astype(np.float32)


def _model(h, x_shape, nodes_pre, inputs_extra=(), inits=None, *, rd=None, sign="left", x_elem=None):
    """x's first rd columns (all when rd is None) rotated by rotate-half over values named 'c' / 's'."""
    n = h.node
    d = x_shape[-1]
    rd = rd or d
    ini = {"z": np.array([0], np.int64), "hf": np.array([rd // 2], np.int64), "rd": np.array([rd], np.int64),
           "big": np.array([INT64_MAX], np.int64), "m1": np.array([-1], np.int64)}
    ini.update(inits or {})
    nodes = list(nodes_pre)
    xr = "x"
    if rd < d:
        nodes += [n("Slice", ["x", "z", "rd", "m1"], ["xr"]), n("Slice", ["x", "rd", "big", "m1"], ["xp"])]
        xr = "xr"
    nodes += [n("Slice", [xr, "z", "hf", "m1"], ["x1"]), n("Slice", [xr, "hf", "big", "m1"], ["x2"])]
    if sign == "left":
        nodes += [n("Neg", ["x2"], ["nx"]), n("Concat", ["nx", "x1"], ["r"], axis=-1)]
    elif sign == "right":
        nodes += [n("Neg", ["x1"], ["nx"]), n("Concat", ["x2", "nx"], ["r"], axis=-1)]
    else:
        nodes += [n("Concat", ["x2", "x1"], ["r"], axis=-1)]
    nodes += [n("Mul", [xr, "c"], ["a"]), n("Mul", ["s", "r"], ["b_"]), n("Add", ["a", "b_"], ["yr"])]
    if rd < d:
        nodes += [n("Concat", ["yr", "xp"], ["y"], axis=-1)]
    else:
        nodes += [n("Identity", ["yr"], ["y"])]
    x = h.vi("x", x_shape) if x_elem is None else h.vi("x", x_shape, x_elem)
    return h.make_model(nodes, [x, *inputs_extra], [h.vi("y", None) if x_elem is None else h.vi("y", None, x_elem)],
                        ini)


def _cos_sin(h, ca, sa, *, scale=None, cast=None):
    """Cos(ca) / Sin(sa) as 'c0' / 's0', optionally both times one number, optionally cast."""
    n = h.node
    nodes, inits = [n("Cos", [ca], ["co"]), n("Sin", [sa], ["si"])], {}
    co, si = "co", "si"
    if scale is not None:
        inits["k"] = np.array(scale, np.float32)
        nodes += [n("Mul", [co, "k"], ["cok"]), n("Mul", ["k", si], ["sik"])]
        co, si = "cok", "sik"
    if cast is not None:
        nodes += [n("Cast", [co], ["coc"], to=cast), n("Cast", [si], ["sic"], to=cast)]
        co, si = "coc", "sic"
    nodes += [n("Identity", [co], ["c0"]), n("Identity", [si], ["s0"])]
    return nodes, inits


def _seq_first(h):
    """[1|B, S, D] tables 'c0' / 's0' moved to [S, 1|B, 1, D] (Transpose, Unsqueeze at the heads) as 'c' / 's'."""
    n = h.node
    return [n("Transpose", ["c0"], ["ct"], perm=[1, 0, 2]), n("Transpose", ["s0"], ["st"], perm=[1, 0, 2]),
            n("Unsqueeze", ["ct", "two"], ["c"]), n("Unsqueeze", ["st", "two"], ["s"])], {"two": np.array([2], np.int64)}


def _fused(h, model, target, feeds, *, atol=1e-5, rtol=1e-4, partial=False):
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1, ops
    assert "Neg" not in ops, ops
    # the caches this rule writes may all be rewritten again (half_slice_sink.yaml moves their half Slice
    # down) and its op rewritten over gathered rows' tables (rotary-caches-gathered-rows), so that none of its
    # nodes is left to name it
    assert RULE in h.fired(out) or any(k.startswith("half-slice-below") or k == "rotary-caches-gathered-rows"
                                       for k in h.fired(out)), h.fired(out)
    if partial:
        assert "rotary-partial" in h.fired(out), h.fired(out)
    h.assert_close(model, out, feeds, atol=atol, rtol=rtol)


@pytest.mark.parametrize("target", TARGETS)
def test_seq_first_computed_tables(h, target):
    S, B, H, D = 5, 2, 3, 8
    n = h.node
    nodes, inits = _cos_sin(h, "cat", "cat")
    lay, li = _seq_first(h)
    model = _model(h, ["s", B, H, D], [n("Concat", ["f", "f"], ["cat"], axis=-1), *nodes, *lay],
                   [h.vi("f", [1, "s", D // 2])], {**inits, **li})
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32), "f": _angles(S, D // 2)[None]}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_seq_first_gathered_rows(h, target):
    """Buffer rows cos / sin(concat(a, a)) [rows, D] gathered by position_ids [1, S], moved to [S, 1, 1, D]."""
    S, B, H, D, rows = 4, 2, 2, 16, 9
    n = h.node
    a = _angles(rows, D // 2)
    full = np.concatenate([a, a], axis=-1)
    lay, li = _seq_first(h)
    model = _model(h, ["s", B, H, D],
                   [n("Gather", ["cb", "pos"], ["c0"], axis=0), n("Gather", ["sb", "pos"], ["s0"], axis=0), *lay],
                   [h.vi("pos", [1, "s"], 7)], {"cb": np.cos(full), "sb": np.sin(full), **li})
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32),
             "pos": (np.arange(S) + 3)[None].astype(np.int64)}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_heads_last_rows_cut_at_run_time_scaled(h, target):
    """x [B, S, H, D]; buffer rows [p, p + S) cut at run time (p a past length), unsqueezed to [1, S, 1, D],
    both tables times 1.25."""
    B, S, H, D, rows = 2, 4, 2, 8, 11
    n = h.node
    a = _angles(rows, D // 2)
    full = np.concatenate([a, a], axis=-1)
    nodes = [n("Shape", ["x"], ["sx"], start=1, end=2), n("Add", ["past", "sx"], ["end"]),
             n("Slice", ["cb", "past", "end", "z"], ["cc"]), n("Slice", ["sb", "past", "end", "z"], ["sc"]),
             n("Mul", ["cc", "k"], ["cck"]), n("Mul", ["sc", "k"], ["sck"]),
             n("Unsqueeze", ["cck", "ax02"], ["c"]), n("Unsqueeze", ["sck", "ax02"], ["s"])]
    model = _model(h, [B, "s", H, D], nodes, [h.vi("past", [1], 7)],
                   {"cb": np.cos(full), "sb": np.sin(full), "k": np.array(1.25, np.float32),
                    "ax02": np.array([0, 2], np.int64)})
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32), "past": np.array([5], np.int64)}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_halves_made_by_tile(h, target):
    """Cos / Sin(Tile(f, [1, 1, 2])) [B, S, D] unsqueezed at axis 2 of x [B, S, H, D]: the halves repeated
    by a Tile, not a Concat."""
    B, S, H, D = 2, 5, 2, 16
    n = h.node
    nodes, inits = _cos_sin(h, "tl", "tl")
    model = _model(h, ["b", "s", H, D],
                   [n("Tile", ["f", "reps"], ["tl"]), *nodes,
                    n("Unsqueeze", ["c0", "two"], ["c"]), n("Unsqueeze", ["s0", "two"], ["s"])],
                   [h.vi("f", ["b", "s", D // 2])],
                   {**inits, "reps": np.array([1, 1, 2], np.int64), "two": np.array([2], np.int64)})
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32), "f": _angles(S, D // 2, batch=B)}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_partial_rotary_gathered_rows(h, target):
    """x [B, S, H, 16], its first 8 columns rotated by buffer rows [rows, 8] gathered by position_ids [B, S]
    and unsqueezed at the heads (axis 2): rotary-partial then folds the pass-through columns in."""
    B, S, H, D, rd, rows = 2, 4, 2, 16, 8, 10
    n = h.node
    a = _angles(rows, rd // 2)
    full = np.concatenate([a, a], axis=-1)
    model = _model(h, ["b", "s", H, D],
                   [n("Gather", ["cb", "pos"], ["cg"], axis=0), n("Gather", ["sb", "pos"], ["sg"], axis=0),
                    n("Unsqueeze", ["cg", "two"], ["c"]), n("Unsqueeze", ["sg", "two"], ["s"])],
                   [h.vi("pos", ["b", "s"], 7)],
                   {"cb": np.cos(full), "sb": np.sin(full), "two": np.array([2], np.int64)}, rd=rd)
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32),
             "pos": np.stack([np.arange(S) + 2, np.arange(S)]).astype(np.int64)}
    _fused(h, model, target, feeds, partial=True)


@pytest.mark.parametrize("target", TARGETS)
def test_partial_rotary_seq_first_scaled_computed_tables(h, target):
    """x [S, B, H, 16], its first 8 columns rotated by 1.25 * Cos / Sin(concat(f, f)) moved to [S, 1, 1, 8]:
    the rotation fuses (rotary-partial takes no seq-first form: the pass-through Concat stays)."""
    S, B, H, D, rd = 3, 2, 2, 16, 8
    n = h.node
    nodes, inits = _cos_sin(h, "cat", "cat", scale=1.25)
    lay, li = _seq_first(h)
    model = _model(h, ["s", B, H, D], [n("Concat", ["f", "f"], ["cat"], axis=-1), *nodes, *lay],
                   [h.vi("f", [1, "s", rd // 2])], {**inits, **li}, rd=rd)
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32), "f": _angles(S, rd // 2)[None]}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_float16_seq_first_computed_tables(h, target):
    """x float16 [S, B, H, D]; per-batch float32 angles, Cos / Sin of concat(f, f) cast to float16."""
    S, B, H, D = 6, 2, 2, 8
    n = h.node
    nodes, inits = _cos_sin(h, "cat", "cat", cast=10)
    lay, li = _seq_first(h)
    model = _model(h, ["s", "b", H, D], [n("Concat", ["f", "f"], ["cat"], axis=-1), *nodes, *lay],
                   [h.vi("f", ["b", "s", D // 2])], {**inits, **li}, x_elem=10)
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float16), "f": _angles(S, D // 2, batch=B)}
    _fused(h, model, target, feeds, atol=2e-3, rtol=2e-3)


def _refused(h, model, feeds, why, *, rotary_ok=False):
    rs = h.reasons(model, "ort", RULE)
    assert rs and not any(r.startswith("matched") for r in rs), rs
    assert any(why in r for r in rs), rs
    for target in TARGETS:
        out = h.fuse(model, target, 3)
        assert RULE not in h.fired(out), h.fired(out)
        if not rotary_ok:
            assert not any(k.endswith("RotaryEmbedding") for k in h.ops(out)), h.ops(out)
        h.assert_close(model, out, feeds)


def _bshd_computed(h, first, second, inputs, feeds_extra, *, sign="left", sin_of=None):
    B, S, H, D = 2, 4, 2, 8
    n = h.node
    nodes, inits = _cos_sin(h, "cat", sin_of or "cat")
    pre = [n("Concat", [first, second], ["cat"], axis=-1)]
    if sin_of:
        pre.append(n("Concat", ["g", "g"], [sin_of], axis=-1))
    model = _model(h, ["b", "s", H, D],
                   [*pre, *nodes, n("Unsqueeze", ["c0", "two"], ["c"]), n("Unsqueeze", ["s0", "two"], ["s"])],
                   inputs, {**inits, "two": np.array([2], np.int64)}, sign=sign)
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32), **feeds_extra}
    return model, feeds


def test_computed_tables_with_unequal_halves_are_refused(h):
    """Cos / Sin(concat(f, g)): each half its own angles, not rotate-half's tables."""
    f = _angles(4, 4)[None]
    model, feeds = _bshd_computed(h, "f", "g", [h.vi("f", [1, "s", 4]), h.vi("g", [1, "s", 4])],
                                  {"f": f, "g": f * 1.7 + 0.3})
    _refused(h, model, feeds, "halves are not provably equal")


def test_interleave_repeated_constant_tables_are_refused(h):
    """GPT-J's repeat_interleave'd tables [1, S, 1, D] (equal column pairs, unequal halves) under rotate-half."""
    B, S, H, D = 2, 4, 2, 8
    a = np.repeat(_angles(S, D // 2), 2, axis=-1)[None, :, None, :]
    model = _model(h, [B, S, H, D], [], [], {"c": np.cos(a), "s": np.sin(a)})
    _refused(h, model, {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32)}, "halves are not provably equal")


def test_sin_of_other_angles_is_refused(h):
    f = _angles(4, 4)[None]
    model, feeds = _bshd_computed(h, "f", "f", [h.vi("f", [1, "s", 4]), h.vi("g", [1, "s", 4])],
                                  {"f": f, "g": f * 0.5}, sin_of="catg")
    _refused(h, model, feeds, "not a (scaled) rotation")


def test_rotate_half_without_a_sign_is_refused(h):
    """concat(x2, x1) * sin: [[c, s], [s, c]], no rotation: nothing fuses."""
    f = _angles(4, 4)[None]
    model, feeds = _bshd_computed(h, "f", "f", [h.vi("f", [1, "s", 4])], {"f": f}, sign="none")
    _refused(h, model, feeds, "")


def test_sign_on_the_other_half_is_not_this_rule(h):
    """concat(x2, -x1) * sin is the rotation by -angle: this rule's pattern (Neg on x2) does not match; the
    optimized graph (rotary-rotate-half-flipped may take it) keeps the original's values."""
    f = _angles(4, 4)[None]
    model, feeds = _bshd_computed(h, "f", "f", [h.vi("f", [1, "s", 4])], {"f": f}, sign="right")
    rs = h.reasons(model, "ort", RULE)
    assert rs and not any(r.startswith("matched") for r in rs), rs
    for target in TARGETS:
        out = h.fuse(model, target, 3)
        fired = h.fired(out)
        # the rotate-half that rotary-rotate-half-flipped writes (d * rotate_half(d * x)) is this rule's to fuse
        # (rotary-rotate-half-bshd's until session 37)
        assert RULE not in fired or fired["rotary-flipped-signs-fold"] or fired["rotary-rotate-half-flipped"], fired
        h.assert_close(model, out, feeds)
