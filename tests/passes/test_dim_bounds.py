"""Lower bounds of sizes from a Conv's refusal of short inputs (passes/_dim_bounds.py), used where a
cut's length is ``max(n - k, 0)``: Swin's shifted-window mask ``img_mask[:, h, w, :] = cnt`` over the
cuts ``[0:-4]``, ``[-4:-2]``, ``[-2:]`` of the padded window grid. Every name is checked against the
shapes ONNX Runtime computes, at every image size the Conv accepts."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from pass_testing import inferred_dims, parse, runtime_shapes

from onnx_fuse.passes._dim_bounds import bounds_in, lower, raise_bound
from onnx_fuse.passes._dim_lengths import at_least, cut_length, minus
from onnx_fuse.rewrite._local_check import _eval_dim

_HEAD = '<ir_version: 9, opset_import: ["" : 18]>\n'
_W = ", ".join(["0.01"] * 96)


def _mask_graph(stem: str) -> onnx.ModelProto:
    """x [B, 3, H, W] through ``stem`` (y [B, 8, h, w]), the grid padded to a multiple of 4 (Swin's
    ``(4 - n % 4) % 4``), and the mask's cuts of a [1, Hp, Wp, 1] buffer sized from the padded shape."""
    return parse(_HEAD + """g (float[B, 3, H, W] x) => (float s) {
            wt = Constant <value = float[8, 3, 2, 2] {""" + _W + """}> ()
            w1 = Constant <value = float[8, 3, 1, 1] {""" + ", ".join(["0.1"] * 24) + """}> ()
            """ + stem + """
            z1 = Constant <value = int64[1] {0}> ()
            o1 = Constant <value = int64[1] {1}> ()
            two1 = Constant <value = int64[1] {2}> ()
            i1 = Constant <value = int64 {1}> ()
            i2 = Constant <value = int64 {2}> ()
            four = Constant <value = int64 {4}> ()
            t = Transpose <perm = [0, 2, 3, 1]> (y)
            sh = Shape (t)
            h = Gather <axis = 0> (sh, i1)
            w = Gather <axis = 0> (sh, i2)
            hm = Mod (h, four)
            hs = Sub (four, hm)
            ph = Mod (hs, four)
            wm = Mod (w, four)
            ws = Sub (four, wm)
            pw = Mod (ws, four)
            phu = Unsqueeze (ph, z1)
            pwu = Unsqueeze (pw, z1)
            pads = Concat <axis = 0> (z1, z1, z1, z1, z1, phu, pwu, z1)
            tp = Pad (t, pads)
            psh = Shape (tp)
            three1 = Constant <value = int64[1] {3}> ()
            hw = Slice (psh, o1, three1)
            msh = Concat <axis = 0> (o1, hw, o1)
            img = ConstantOfShape <value = float[1] {0}> (msh)
            ax = Constant <value = int64[2] {1, 2}> ()
            zz = Constant <value = int64[2] {0, 0}> ()
            mm4 = Constant <value = int64[2] {-4, -4}> ()
            mm2 = Constant <value = int64[2] {-2, -2}> ()
            bb = Constant <value = int64[2] {9223372036854775807, 9223372036854775807}> ()
            lo = Slice (img, zz, mm4, ax)
            mid = Slice (img, mm4, mm2, ax)
            hi = Slice (img, mm2, bb, ax)
            slo = ReduceSum <keepdims = 0> (lo)
            smid = ReduceSum <keepdims = 0> (mid)
            shi = ReduceSum <keepdims = 0> (hi)
            s2 = Add (slo, smid)
            s = Add (s2, shi)
        }""")


_CONV = "y = Conv <kernel_shape = [2, 2], strides = [2, 2]> (x, wt)"


def test_a_patch_conv_bounds_the_window_grid_so_the_mask_cuts_are_named():
    """The patch Conv (kernel 2) runs only for H, W >= 2, so the padded grid 4*((H)//2+3)//4 is at least
    4: ``[0:-4]`` keeps n - 4 = 4*((H)//2-1)//4 entries, ``[-4:-2]`` and ``[-2:]`` two each (all three
    unknown before: max(n - 4, 0)). Each name equals ONNX Runtime's size at every H, W the Conv accepts."""
    proto = _mask_graph(_CONV)
    names = inferred_dims(proto, "tp", "lo", "mid", "hi")
    assert names["tp"] == ["B", "4*((H)//2+3)//4", "4*((W)//2+3)//4", 8]
    assert names["lo"] == [1, "4*((H)//2-1)//4", "4*((W)//2-1)//4", 1]
    assert names["mid"] == [1, 2, 2, 1] and names["hi"] == [1, 2, 2, 1]
    for hgt in range(2, 23, 3):
        for wid in (2, 3, 8, 9, 17):
            x = np.random.default_rng(hgt * wid).standard_normal((2, 3, hgt, wid)).astype(np.float32)
            got = runtime_shapes(proto, list(names), {"x": x})
            for v, dims in names.items():
                want = [d if isinstance(d, int) else _eval_dim(d, {"B": 2, "H": hgt, "W": wid}) for d in dims]
                assert want == list(got[v]), (v, dims, hgt, wid, got[v])


@pytest.mark.parametrize("stem", [
    "y8 = Conv <kernel_shape = [1, 1]> (x, w1)\n y = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (y8)",
    # a pool accepts H = 1, a 1x1 Conv H = 1 (the grid (H)//2 may be 0)
    "y = Relu (x)",   # no Conv: H = 0 runs
])
def test_no_bound_without_a_conv_that_refuses_short_inputs(stem):
    """Where nothing refuses an empty grid the padded grid may be 0 and ``[0:-4]`` keeps max(n - 4, 0):
    not named (the pool accepts H = 1, where its grid is 0; without a Conv nothing bounds H)."""
    names = inferred_dims(_mask_graph(stem), "lo", "mid")
    assert str(names["lo"][1]).startswith("unk__") and str(names["mid"][1]).startswith("unk__")


@pytest.mark.parametrize("attrs,least", [("", 4), ("pads = [1, 0, 2, 0], ", 1), ('auto_pad = "VALID", ', 4),
                                         ("dilations = [2, 1], ", 7)])
def test_onnx_runtime_refuses_a_conv_input_below_the_bound(attrs, least):
    """The fact the bound rests on: ONNX Runtime runs a Conv (kernel 4) only where the padded input
    holds the dilated kernel, ``least`` = span - pads."""
    from onnx_fuse.passes._dim_lengths import conv_least_input

    proto = parse(_HEAD + f"""g (float[1, 1, H, 8] x) => (float[1, 1, Y, Z] y) {{
            wt = Constant <value = float[1, 1, 4, 4] {{{", ".join(["1.0"] * 16)}}}> ()
            y = Conv <{attrs}kernel_shape = [4, 4], strides = [1, 4]> (x, wt)
        }}""")
    node = next(n for n in ir.from_proto(proto).graph if n.op_type == "Conv")
    assert conv_least_input(node, 2, 0) == least
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((1, 1, least, 8), np.float32)})[0].shape[2] >= 1
    if least > 0:
        with pytest.raises(Exception, match="Invalid input shape"):
            sess.run(None, {"x": np.ones((1, 1, least - 1, 8), np.float32)})


def test_a_conv_output_cut_before_its_end():
    """``y[:, :, :-1]`` of a stride-4 Conv's (H)//4 (H >= 4, so at least one row) is (H-4)//4 (before:
    the negative offset was refused, the cut left max(n - 1, 0))."""
    proto = parse(_HEAD + """g (float[B, 3, H, W] x) => (float s) {
            wt = Constant <value = float[2, 3, 4, 4] {""" + ", ".join(["0.01"] * 96) + """}> ()
            y = Conv <kernel_shape = [4, 4], strides = [4, 4]> (x, wt)
            st = Constant <value = int64[1] {0}> ()
            en = Constant <value = int64[1] {-1}> ()
            ax = Constant <value = int64[1] {2}> ()
            c = Slice (y, st, en, ax)
            s = ReduceSum <keepdims = 0> (c)
        }""")
    names = inferred_dims(proto, "c")
    assert names["c"] == ["B", 2, "(H-4)//4", "(W)//4"]
    for hgt in range(4, 20):
        x = np.zeros((2, 3, hgt, 5), np.float32)
        assert runtime_shapes(proto, ["c"], {"x": x})["c"][2] == _eval_dim("(H-4)//4", {"H": hgt})


def test_lower_and_the_reads_it_proves():
    grid = (4, ("((H)//2+3)//4",))
    assert lower(grid) == 0 and minus(grid, (4, ())) is None and not at_least(grid, (2, ()))
    bounds: dict[str, int] = {}
    raise_bound(bounds, (1, ("H",)), 2)
    raise_bound(bounds, (2, ("S",)), 5)          # 2*S >= 5: S >= 3
    raise_bound(bounds, (1, ("a + b",)), 0)      # nothing to record
    assert bounds == {"H": 2, "S": 3}
    with bounds_in(bounds):
        assert lower(grid) == 4 and lower((1, ("S + H + 1",))) == 6 and lower((1, ("(-H)%4",))) == 0
        assert minus(grid, (4, ())) == (4, ("((H)//2-1)//4",))
        assert minus(grid, (2, ())) is None and at_least(grid, (2, ()))   # 4*X - 2: no spelling, but >= 2
        assert minus(grid, (8, ())) is None and not at_least(grid, (5, ()))
        assert minus((1, ("S",)), (3, ())) == (1, ("(S-3)//1",))
        assert cut_length((-4, ()), (-2, ()), grid) == (2, ())
        assert cut_length((0, ()), (-4, ()), grid) == (4, ("((H)//2-1)//4",))
    assert lower(grid) == 0   # the bounds hold only inside the block
