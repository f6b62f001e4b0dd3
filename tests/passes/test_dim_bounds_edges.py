"""The Conv lower bounds (passes/_dim_bounds.py) at their edges (session-29 review): a Conv that
need not run (in an If branch), one that accepts any length (SAME padding, pads as large as the
kernel, ConvTranspose), and ones whose input axis is not the graph input's (a Transpose, a
strided Slice), 1-D and 3-D. Each model cuts ``[:-k]`` (and ``[:-1]`` of that) from a buffer as
long as an input axis; every dim the naming sweep gives any value must equal ONNX Runtime's size at
every input length the original model accepts, and the cuts a bound proves are named."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper
from pass_testing import parse

from onnx_fuse.passes.shape_inference import ShapeInferencePass
from onnx_fuse.rewrite._local_check import _eval_dim

_HEAD = '<ir_version: 9, opset_import: ["" : 18]>\n'
_K4 = "wt = Constant <value = float[1, 1, 4, 1] {1.0, 1.0, 1.0, 1.0}> ()"


def _cut(src: str, axis: int, k: int, tag: str) -> str:
    """``ones(len(src's axis))[:-k][:-1]`` as values lo<tag>, lo2<tag>."""
    return f"""
            sh{tag} = Shape <start = {axis}, end = {axis + 1}> ({src})
            cs{tag} = ConstantOfShape <value = float[1] {{1}}> (sh{tag})
            st{tag} = Constant <value = int64[1] {{0}}> ()
            en{tag} = Constant <value = int64[1] {{-{k}}}> ()
            lo{tag} = Slice (cs{tag}, st{tag}, en{tag})
            one{tag} = Constant <value = int64[1] {{-1}}> ()
            lo2{tag} = Slice (lo{tag}, st{tag}, one{tag})"""


def _model(body: str, extra_in: str = "", rank: int = 4) -> onnx.ModelProto:
    dims = "1, 1, H, W" if rank == 4 else "1, 1, H" if rank == 3 else "1, 1, H, W, 1"
    proto = parse(_HEAD + f"g (float[{dims}] x{extra_in}) => (float s) {{\n{body}\n"
                  "            s = ReduceSum <keepdims = 0> (lo2a)\n        }")
    return proto


def _named_dims(proto: onnx.ModelProto) -> dict[str, list]:
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    return {o.name: [d if isinstance(d, int) else getattr(d, "value", None) for d in o.shape.dims]
            for n in model.graph for o in n.outputs if o.shape is not None}


def _check_against_runtime(proto: onnx.ModelProto, extra_feeds: dict, rank: int) -> dict[str, list]:
    names = _named_dims(proto)
    p = onnx.ModelProto()
    p.CopyFrom(proto)
    for v in names:
        p.graph.output.append(helper.make_empty_tensor_value_info(v))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    sess = ort.InferenceSession(p.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    accepted = 0
    for hgt in range(0, 10):
        for wid in (1, 4, 7):
            shape = {4: (1, 1, hgt, wid), 3: (1, 1, hgt), 5: (1, 1, hgt, wid, 1)}[rank]
            try:
                got = sess.run(list(names), {"x": np.ones(shape, np.float32), **extra_feeds})
            except Exception:  # noqa: BLE001 - a length the original refuses: no name need hold there
                continue
            accepted += 1
            for (v, dims), arr in zip(names.items(), got):
                for i, d in enumerate(dims):
                    want = _eval_dim(d, {"H": hgt, "W": wid}) if isinstance(d, str) else d
                    assert want is None or want == arr.shape[i], (v, i, d, hgt, wid, arr.shape)
    assert accepted >= 6
    return names


def _unnamed(d) -> bool:
    return isinstance(d, str) and d.startswith("unk__")


def test_a_conv_in_a_branch_bounds_nothing_outside_it():
    """The Conv runs only when c is true: with c false H = 2 runs, so ``[:-4]`` stays unnamed."""
    proto = _model("""
            y = If (c) <then_branch = t () => (float[1, 1, P, Q] yy) {
                """ + _K4 + """
                yy = Conv (x, wt) }, else_branch = e () => (float[1, 1, P, Q] zz) { zz = Identity (x) }>
            """ + _cut("x", 2, 4, "a"), ", bool c")
    names = _check_against_runtime(proto, {"c": np.array(False)}, 4)
    assert _unnamed(names["loa"][0])


@pytest.mark.parametrize("attrs, op", [('auto_pad = "SAME_UPPER", strides = [2, 1], ', "Conv"),
                                       ('auto_pad = "SAME_LOWER", ', "Conv"),
                                       ("pads = [3, 0, 3, 0], ", "Conv"), ("", "ConvTranspose")])
def test_a_conv_that_accepts_any_length_bounds_nothing(attrs, op):
    proto = _model(f"""
            {_K4}
            y = {op} <{attrs}kernel_shape = [4, 1]> (x, wt)
            """ + _cut("x", 2, 1, "a"))
    names = _check_against_runtime(proto, {}, 4)
    assert _unnamed(names["loa"][0])


def test_the_bound_goes_to_the_axis_the_conv_reads_through_a_transpose():
    """Kernel [4, 1] over Transpose(x)'s axis 2, which is x's W: W >= 4 names ``[:-4]`` of W, not of H."""
    proto = _model(f"""
            {_K4}
            t = Transpose <perm = [0, 1, 3, 2]> (x)
            y = Conv (t, wt)
            """ + _cut("x", 3, 4, "a") + _cut("x", 2, 4, "b"))
    names = _check_against_runtime(proto, {}, 4)
    assert names["loa"] == ["(W-4)//1"] and _unnamed(names["lob"][0])


def test_a_bound_on_a_strided_slice_length():
    """Conv kernel 4 over x[::2] ((H+1)//2 >= 4): ``[:-4]`` of that is (H-7)//2, exact from H = 7."""
    proto = _model(f"""
            {_K4}
            s0 = Constant <value = int64[1] {{0}}> ()
            s1 = Constant <value = int64[1] {{9223372036854775807}}> ()
            ax = Constant <value = int64[1] {{2}}> ()
            sp = Constant <value = int64[1] {{2}}> ()
            t = Slice (x, s0, s1, ax, sp)
            y = Conv (t, wt)
            """ + _cut("t", 2, 4, "a"))
    names = _check_against_runtime(proto, {}, 4)
    assert names["loa"] == ["(H-7)//2"]


@pytest.mark.parametrize("rank, conv, least", [
    (3, "wt = Constant <value = float[1, 1, 3] {1.0, 1.0, 1.0}> ()\n y = Conv <dilations = [2], pads = [1, 0]> (x, wt)", 4),
    (5, "wt = Constant <value = float[1, 1, 2, 3, 1] {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}> ()\n y = Conv (x, wt)", 2)])
def test_one_and_three_spatial_axes(rank, conv, least):
    """A dilated 1-D Conv (span 5, one pad: H >= 4) and a 3-D one (kernel 2 on H)."""
    proto = _model(conv + _cut("x", 2, least, "a"), rank=rank)
    names = _check_against_runtime(proto, {}, rank)
    assert names["loa"] == [f"(H-{least})//1"]
