"""Lengths only computed, named by formula (passes/_dim_source.py): strided Conv / pool windows with
ceil_mode, ConvTranspose (output_padding, SAME, an explicit output_shape), and Slice cuts whose length
follows from sizes ([1:] after a class token, [-m:e] with e the axis's own length read back, [s:e],
[-m:-k]). Each name is checked against the lengths ONNX Runtime computes, over many input lengths;
and the floor_div atom parser (passes/_dim_products.py parse_floor) on its edge cases."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_fuse.passes._dim_products import _top_level_factors, floor_plus, parse_floor, to_dim
from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes.shape_inference import ShapeInferencePass


@pytest.mark.parametrize("atom,want", [
    ("(L)//2", ("L", 0, 2)),
    ("(L+3)//1", ("L", 3, 1)),
    (" (L-1)//2 ", ("L", -1, 2)),                      # spaces around the atom
    ("((L-5)//5-1)//2", ("(L-5)//5", -1, 2)),          # nested: the inner atom is the base
    ("(2*L+1)//3", ("2*L", 1, 3)),
    ("((a)//2*(b)//2+4)//8", ("(a)//2*(b)//2", 4, 8)),
    ("(a)//2*(b)//2", None),                           # a product: the first group closes early
    ("(L)//2+1", None),                                # a sum after the division
    ("(L)//2//3", None),
    ("(L)//-2", None),
    ("(L)//x", None),
    ("(L)", None),
    ("()//2", None),
    ("(L//2", None),                                   # unbalanced
    ("L)//2", None),
    ("(L))//2", None),
    ("L", None),
    ("", None),
])
def test_parse_floor(atom, want):
    assert parse_floor(atom) == want


def test_floor_atoms_split_and_fold_through_the_parser():
    assert _top_level_factors("2*((a*b)//3)//2*c") == ["2", "((a*b)//3)//2", "c"]
    assert _top_level_factors("a*(b") == ["a*(b"]                 # unbalanced: one part
    assert to_dim("a*(b") == (1, ("a*(b",))                       # an opaque atom, as before
    assert to_dim("(2*L)//3*batch") == (1, ("(2*L)//3", "batch"))
    assert floor_plus("((a)//2*(b)//2+4)//8", -1) == "((a)//2*(b)//2-4)//8"
    assert floor_plus("(a + b)//2", 1) is None                    # a sum inside: no floor atom
    assert floor_plus("(L)//2*(M)//2", 1) is None


def _length(name, env: dict) -> int:
    """A dim name's value: the names are Python expressions of the input symbols (// floors)."""
    return name if isinstance(name, int) else eval(name, {"__builtins__": {}}, env)  # noqa: S307


def _inferred(proto: onnx.ModelProto, value: str):
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    v = next(o for n in model.graph for o in n.outputs if o.name == value)
    return [d if isinstance(d, int) else None if d.value is None else str(d.value) for d in v.shape.dims]


def _runtime_dims(proto: onnx.ModelProto, value: str, feeds: dict) -> tuple[int, ...]:
    """``value``'s shape in ONNX Runtime (made a graph output of a copy)."""
    p = onnx.ModelProto()
    p.CopyFrom(proto)
    if value not in [o.name for o in p.graph.output]:
        p.graph.output.append(helper.make_empty_tensor_value_info(value))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(p.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run([value], feeds)[0].shape


def _window_model(op: str, attrs: dict, weight=None) -> onnx.ModelProto:
    inits, ins = [], ["x"]
    if weight is not None:
        inits.append(onnx.numpy_helper.from_array(np.ones(weight, np.float32), "w"))
        ins.append("w")
    node = helper.make_node(op, ins, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 2, "L"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


W = (2, 2, 3)   # Conv: [out, in, k]; ConvTranspose: [in, out, k]
WINDOWS = [
    ("Conv", dict(kernel_shape=[3], strides=[2], dilations=[2], pads=[1, 2]), W, "(L)//2"),
    ("Conv", dict(kernel_shape=[3], strides=[3], auto_pad="SAME_UPPER"), W, "(L+2)//3"),
    # ceil_mode, the last window starting inside the input (pad_end + s <= span): the plain ceil
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1), None, "(L+2)//2"),
    ("AveragePool", dict(kernel_shape=[2], strides=[2], ceil_mode=1), None, "(L+1)//2"),
    # ... and where it would start in the right padding, dropped (the spec, ONNX Runtime)
    ("MaxPool", dict(kernel_shape=[2], strides=[2], pads=[0, 1], ceil_mode=1), None, "(L+1)//2"),
    ("AveragePool", dict(kernel_shape=[1], strides=[2], ceil_mode=1), None, "(L+1)//2"),
    ("MaxPool", dict(kernel_shape=[3], strides=[3], pads=[1, 2], dilations=[2], ceil_mode=1), None, "(L+3)//3"),
    ("MaxPool", dict(kernel_shape=[4], strides=[3], pads=[1, 2], ceil_mode=1), None, "(L+3)//3"),
    ("ConvTranspose", dict(kernel_shape=[3], strides=[2]), W, "(2*L+1)//1"),
    ("ConvTranspose", dict(kernel_shape=[3], strides=[2], pads=[1, 1], output_padding=[1]), W, "2*L"),
    ("ConvTranspose", dict(kernel_shape=[3], strides=[3], pads=[2, 2], dilations=[2]), W, "(3*L-2)//1"),
    ("ConvTranspose", dict(kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER"), W, "2*L"),
    # SAME with a window shorter than the stride: ONNX Runtime clamps the pads at 0, s * (L - 1) + span
    ("ConvTranspose", dict(kernel_shape=[1], strides=[3], auto_pad="SAME_LOWER"), (2, 2, 1), "(3*L-2)//1"),
]


@pytest.mark.parametrize("op,attrs,weight,want", WINDOWS)
def test_window_lengths_are_named_as_onnx_runtime_computes_them(op, attrs, weight, want):
    proto = _window_model(op, attrs, weight)
    dims = _inferred(proto, "y")
    assert dims[0] == "B" and dims[2] == want
    for length in range(3, 20):
        x = np.ones((1, 2, length), np.float32)
        assert _runtime_dims(proto, "y", {"x": x})[2] == _length(want, {"L": length}), length


def test_transposed_conv_with_an_output_shape_has_it():
    proto = _window_model("ConvTranspose", dict(kernel_shape=[3], strides=[2], output_shape=[11]), W)
    assert _inferred(proto, "y") == ["B", 2, 11]
    for length in (5, 6):
        assert _runtime_dims(proto, "y", {"x": np.ones((1, 2, length), np.float32)})[2] == 11


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2], strides=[2], auto_pad="SAME_UPPER", ceil_mode=1),
    # ONNX Runtime pads a dilated SAME pool for the undilated kernel: not ceil(L / s) (L = 1: 0)
    dict(kernel_shape=[3], strides=[4], auto_pad="SAME_UPPER", dilations=[3]),
])
def test_pools_onnx_runtime_sizes_its_own_way_are_left_unknown(attrs):
    proto = _window_model("MaxPool", attrs)
    assert invented_name(_inferred(proto, "y")[2])


def _slice_model(body: str, inputs: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'''<ir_version: 9, opset_import: ["" : 18]>
    g ({inputs}) => (float[B, ?, 4] y) {{
        a1 = Constant<value = int64[1] {{1}}>()
        i1 = Constant<value = int64 {{1}}>()
        ax = Constant<value = int64[1] {{0}}>()
        sx = Shape(x)
        s = Gather<axis = 0>(sx, i1)
        s1 = Unsqueeze(s, ax)
        {body}
    }}''')


CLS = "c = Concat<axis = 1>(cls, x)\n"
SLICES = [
    # x[:, 1:] of [cls; x] (S + 1 entries): the S patches (ViT, DeiT after their class token)
    (CLS + "big = Constant<value = int64[1] {9223372036854775807}>()\ny = Slice(c, a1, big, a1)",
     "float[B, 1, 4] cls, float[B, S, 4] x", "S"),
    # [1 : S + 1] of the same: a nonzero start with a computed end
    (CLS + "e = Add(s1, a1)\ny = Slice(c, a1, e, a1)", "float[B, 1, 4] cls, float[B, S, 4] x", "S"),
    # [-(S + 1) : len] of [past; x; two frames], the end read back as the axis's own length (not INT64_MAX)
    ("c = Concat<axis = 1>(p, x, t)\nsc = Shape(c)\nn = Gather<axis = 0>(sc, a1)\n"
     "sp = Add(s1, a1)\nneg = Neg(sp)\ny = Slice(c, neg, n, a1)", "float[B, P, 4] p, float[B, S, 4] x, float[B, 2, 4] t",
     "S + 1"),
    # [-S:] of [past; x]: at S = 0 the bound -0 is the axis's start and the cut keeps all P entries
    ("c = Concat<axis = 1>(p, x)\nbig = Constant<value = int64[1] {9223372036854775807}>()\n"
     "neg = Neg(s1)\ny = Slice(c, neg, big, a1)", "float[B, P, 4] p, float[B, S, 4] x", None),
    # [-(S + 1) : -1] of [x; two frames]: S + 2 >= S + 1 >= 1, so S entries
    ("c = Concat<axis = 1>(x, t)\nm1 = Constant<value = int64[1] {-1}>()\nsp = Add(s1, a1)\nneg = Neg(sp)\n"
     "y = Slice(c, neg, m1, a1)", "float[B, S, 4] x, float[B, 2, 4] t", "S"),
    # [1:] of S entries: S >= 1 is not provable (S = 0 keeps 0), the length stays unknown
    ("big = Constant<value = int64[1] {9223372036854775807}>()\ny = Slice(x, a1, big, a1)",
     "float[B, S, 4] x", None),
    # [1 : S + 1] of x itself: the end may pass the axis (min(S + 1, S) - 1)
    ("e = Add(s1, a1)\ny = Slice(x, a1, e, a1)", "float[B, S, 4] x", None),
]


@pytest.mark.parametrize("body,inputs,want", SLICES)
def test_slice_cut_lengths_follow_from_sizes(body, inputs, want):
    proto = _slice_model(body, inputs)
    got = _inferred(proto, "y")[1]
    if want is None:
        assert got is None or invented_name(got)
        return
    assert got == want
    rng = np.random.default_rng(0)
    for length in (0, 1, 2, 5):
        feeds = {"x": rng.standard_normal((1, length, 4)).astype(np.float32)}
        if "cls" in inputs:
            feeds["cls"] = rng.standard_normal((1, 1, 4)).astype(np.float32)
        for name, n in (("float[B, P, 4] p", 3), ("float[B, 2, 4] t", 2)):
            if name in inputs:
                feeds[name[-1]] = rng.standard_normal((1, n, 4)).astype(np.float32)
        assert _runtime_dims(proto, "y", feeds)[1] == _length(want, {"S": length})


def _random_window(rng):
    op = rng.choice(["Conv", "MaxPool", "AveragePool", "ConvTranspose", "LpPool"])
    k, s, d = rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 3)
    attrs = dict(kernel_shape=[k], strides=[s])
    auto = rng.choice(["NOTSET"] * 4 + ["SAME_UPPER", "SAME_LOWER", "VALID"])
    if auto == "NOTSET":
        attrs["pads"] = [rng.randint(0, k - 1), rng.randint(0, k - 1)]
    else:
        attrs["auto_pad"] = auto
    if op in ("Conv", "MaxPool", "ConvTranspose"):
        attrs["dilations"] = [d]
    else:
        d = 1
    if op in ("MaxPool", "AveragePool", "LpPool") and rng.random() < 0.6:
        attrs["ceil_mode"] = 1
    if op == "ConvTranspose" and s > 1 and rng.random() < 0.4:
        attrs["output_padding"] = [rng.randint(0, s - 1)]
    return op, attrs, (2, 2, k) if op in ("Conv", "ConvTranspose") else None, d * (k - 1) + 1


def test_random_windows_agree_with_onnx_runtime():
    """60 random configurations: every length named is ORT's, wherever the padded input holds one
    window (shorter inputs: _dim_lengths.window_length's docstring)."""
    import random

    rng, named = random.Random(7), 0
    for _ in range(60):
        op, attrs, weight, span = _random_window(rng)
        proto = _window_model(op, attrs, weight)
        name = _inferred(proto, "y")[2]
        if name is None or invented_name(name):
            continue
        named += 1
        pads = sum(attrs.get("pads", [0, 0])) if attrs.get("auto_pad", "NOTSET") == "NOTSET" else 0
        for length in range(1, 20):
            if op != "ConvTranspose" and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") \
                    and length + pads < span:
                continue
            try:
                got = _runtime_dims(proto, "y", {"x": np.ones((1, 2, length), np.float32)})[2]
            except ort.capi.onnxruntime_pybind11_state.InvalidArgument:
                continue   # the original does not run (ORT refuses a dilated SAME Conv)
            assert got == _length(name, {"L": length}), (op, attrs, name, length)
    assert named >= 40


def test_random_cuts_agree_with_onnx_runtime():
    """80 random Slices of [x; c static frames] with bounds from ints, S, S + c, -S, -(S + c),
    INT64_MAX and the axis's length read back: every length named is ORT's, S = 0..6."""
    import random

    rng, named = random.Random(11), 0

    def bound(name):
        kind, c = rng.choice(["int", "S", "S+c", "-S", "-(S+c)", "big", "n"]), rng.randint(-3, 4)
        return {"int": f"{name} = Constant<value = int64[1] {{{c}}}>()",
                "big": f"{name} = Constant<value = int64[1] {{9223372036854775807}}>()",
                "n": f"{name}_s = Shape(c)\n{name} = Gather<axis = 0>({name}_s, a1)",
                "S": f"{name} = Identity(s1)", "-S": f"{name} = Neg(s1)",
                "S+c": f"{name}_c = Constant<value = int64[1] {{{abs(c)}}}>()\n{name} = Add(s1, {name}_c)",
                "-(S+c)": f"{name}_c = Constant<value = int64[1] {{{abs(c)}}}>()\n{name}_p = Add(s1, {name}_c)\n"
                          f"{name} = Neg({name}_p)"}[kind]

    for _ in range(80):
        pad = rng.randint(0, 3)
        frames = ", ".join(["1."] * 4 * pad)
        cat = (f"t = Constant<value = float[1, {pad}, 4] {{{frames}}}>()\nc = Concat<axis = 1>(x, t)"
               if pad else "c = Identity(x)")
        proto = _slice_model(f"{cat}\n{bound('st')}\n{bound('en')}\ny = Slice(c, st, en, a1)", "float[1, S, 4] x")
        name = _inferred(proto, "y")[1]
        if name is None or invented_name(name):
            continue
        named += 1
        for length in range(7):
            got = _runtime_dims(proto, "y", {"x": np.ones((1, length, 4), np.float32)})[1]
            assert got == _length(name, {"S": length}), (proto.graph.node, name, length)
    assert named >= 10


@pytest.mark.parametrize("k,want", [
    (1, "(L)//2"),    # floor((L + 2) / 2) - 1 = floor(L / 2): never negative
    (2, None),        # floor((L - 2) / 2) is -1 at L = 1, where the Slice keeps 0 of the pool's 1
])
def test_cut_off_the_end_of_a_computed_length_needs_it_long_enough(k, want):
    proto = _window_model("AveragePool", dict(kernel_shape=[2], strides=[2], pads=[1, 1]))
    cut = onnx.parser.parse_node("y2 = Slice(y, z, e, ax)")
    proto.graph.node.append(cut)
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.array([v], np.int64), n)
                                    for n, v in (("z", 0), ("e", -k), ("ax", 2))])
    proto.graph.output[0].name = "y2"
    assert _inferred(proto, "y")[2] == "(L+2)//2"
    got = _inferred(proto, "y2")[2]
    if want is None:
        assert got is None or invented_name(got)
        return
    assert got == want
    for length in range(1, 12):
        assert _runtime_dims(proto, "y2", {"x": np.ones((1, 2, length), np.float32)})[2] == _length(want, {"L": length})
