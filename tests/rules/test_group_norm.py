"""group-norm / group-norm-plain (rules/norm/group_norm.yaml): torch.nn.GroupNorm as both torch exporters
write it (Reshape to [B, G, -1], InstanceNormalization with unit scale and zero bias, Reshape back,
per-channel Mul / Add) -> GroupNormalization-21 at onnx / trt; ort keeps its InstanceNormalization
path. Eighth sweep part C: UNet / VAE GroupNorms (21 and 14 per file) were left as 5 ops each."""

from __future__ import annotations

import numpy as np
import pytest

B, C, G, HW = 2, 8, 4, (4, 4)


def _i64(*v):
    return np.array(v, np.int64)


def _group_norm(h, *, spatial=HW, view=None, back="const", affine=True, gamma_shape=None, scale=1.0,
                extra_reader=False, eps=1e-6, opset=17):
    """x [B, C, *spatial] -> GroupNorm(G) (the exporters' form); back: 'const' ([B, C, ...] constant)
    or 'shape' (TorchScript's Shape(x))."""
    n = h.node
    xshape = [B, C, *spatial]
    nodes = [n("Reshape", ["x", "view"], ["r"]), n("InstanceNormalization", ["r", "one", "zero"], ["i"], epsilon=eps)]
    inits = {"view": _i64(*(view or (0, G, -1))), "one": np.full(G, scale, np.float32),
             "zero": np.zeros(G, np.float32)}
    if back == "shape":
        nodes += [n("Shape", ["x"], ["xs"]), n("Reshape", ["i", "xs"], ["b"])]
    else:
        nodes += [n("Reshape", ["i", "back"], ["b"])]
        inits["back"] = _i64(*xshape)
    out = "b"
    if affine:
        gshape = gamma_shape or [C] + [1] * len(spatial)
        inits["g"] = (1 + 0.1 * h.rng.standard_normal(gshape)).astype(np.float32)
        inits["be"] = (0.1 * h.rng.standard_normal(gshape)).astype(np.float32)
        nodes += [n("Mul", ["b", "g"], ["m"]), n("Add", ["m", "be"], ["y"])]
        out = "y"
    outputs = [h.vi(out, xshape)]
    if extra_reader:
        outputs.append(h.vi("i", None))
    return h.make_model(nodes, [h.vi("x", xshape)], outputs, inits, opset=opset), xshape


def _feeds(h, xshape):
    return {"x": (3 + 2 * h.rng.standard_normal(xshape)).astype(np.float32)}


@pytest.mark.parametrize("target", ["onnx", "trt"])
@pytest.mark.parametrize("back", ["const", "shape"])
@pytest.mark.parametrize("spatial", [HW, (10,)], ids=["2d", "1d"])
def test_group_norm_becomes_group_normalization(h, target, back, spatial):
    model, xshape = _group_norm(h, back=back, spatial=spatial)
    out = h.fuse(model, target, 2)
    ops = h.ops(out)
    assert ops["GroupNormalization"] == 1 and ops["InstanceNormalization"] == 0 and ops["Mul"] == 0, ops
    assert h.fired(out)["group-norm"] == 1
    h.assert_close(model, out, _feeds(h, xshape))


def test_group_norm_without_affine(h):
    model, xshape = _group_norm(h, affine=False)
    out = h.fuse(model, "onnx", 2)
    assert h.ops(out)["GroupNormalization"] == 1 and h.fired(out)["group-norm-plain"] == 1, h.ops(out)
    h.assert_close(model, out, _feeds(h, xshape))


def test_ort_keeps_instance_normalization(h):
    """ORT's CPU runs GroupNormalization-21 as its function (slower): the ort target leaves the form."""
    model, _ = _group_norm(h)
    out = h.fuse(model, "ort", 2)
    assert h.ops(out)["InstanceNormalization"] == 1 and h.ops(out)["GroupNormalization"] == 0


@pytest.mark.parametrize("kw,reason", [
    ({"view": (2, 16, 8)}, "G dividing the channels"),             # 16 'groups' of an 8-channel x
    ({"view": (4, 4, 16)}, "keep the batch"),                       # the batch merged into the groups
    ({"scale": 2.0}, "unit scale"),                                 # instance norm with its own scale
    ({"gamma_shape": [4]}, "one number per channel"),               # gamma on the last axis (W == 4)
], ids=["groups", "batch", "scale", "gamma"])
def test_near_misses_are_refused(h, kw, reason):
    model, _ = _group_norm(h, **kw, opset=23)  # explain skips a rule outside its opsets
    reasons = h.reasons(model, "onnx", "group-norm")
    assert any(reason in r for r in reasons), reasons
    if "gamma_shape" not in kw:  # (the plain rule takes the norm and leaves that Mul / Add)
        assert h.ops(h.fuse(model, "onnx", 2))["GroupNormalization"] == 0


def test_an_escaping_instance_norm_output_is_not_fused(h):
    model, _ = _group_norm(h, extra_reader=True)
    out = h.fuse(model, "onnx", 2)
    assert h.ops(out)["GroupNormalization"] == 0 and h.ops(out)["InstanceNormalization"] == 1
