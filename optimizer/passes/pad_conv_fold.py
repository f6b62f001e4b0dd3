"""A constant zero Pad of the spatial axes whose output a Conv reads as X becomes that Conv's pads.

TorchScript writes ``F.pad(x, ...)`` before a Conv with padding 0 (MobileNetV2's TF-style "same" padding, its
pads built from ConstantOfShape / Concat / Slice that folding makes constant); the Conv already pads its
input with zeros, so Conv(Pad(x, p, 0), pads=q) is Conv(x, pads=q + p), exactly (the same zeros at the
same places), and the Pad copy of the activation goes.

Folded only when: the Pad is default-domain, mode "constant", its value 0 (absent, or a constant scalar
equal to 0), its pads constant and non-negative (a negative pad crops, which Conv pads cannot), zero on
the batch and channel axes (axes 0 and 1: opset 18's ``axes`` input is mapped to them), and the Conv reads
the Pad's output as its input X with auto_pad NOTSET or VALID (SAME_* pads are computed from the input's
size, which the Pad changes). Each Conv reader folds on its own; the Pad stays while another node (or the
graph output) still reads it. ConvInteger / QLinearConv pad with their zero point, not 0, so they are
not taken; nor is AveragePool (it may exclude pads from the count).

A MaxPool reader folds too where the Pad's input is provably >= 0 (a Relu's, a Sigmoid's, a HardSigmoid's or a
Clip's with a constant min >= 0: HGNetV2's stem, ``F.pad`` then MaxPool(ceil_mode) after a Conv + ReLU): MaxPool's
own pads take no part in the max, and a zero cell changes no max of values >= 0 as long as every window keeps
one real cell, which holds when each axis's total pads stay below the kernel and, in ceil mode, its end pad is at
most kernel - stride (the last window then starts inside the input in both forms, so the output size is the
same too). Dilations 1 only, no Indices output (they would count the padded tensor's cells). NaN inputs aside
(a window of NaNs alone gives 0 with the zero cells, float32's lowest without): exact.

Runs at level >= 2 for every target with fold-batch-norm (before it).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import const_ints
from onnx_fuse.passes._infra import FusePass, is_default_op
from onnx_fuse.passes.constant_folding import constant_tensor


def _is_zero(node: ir.Node) -> bool:
    """The Pad's fill value is 0 (input 2 from opset 11, attribute ``value`` before)."""
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        t = constant_tensor(node.inputs[2])
        return t is not None and t.size == 1 and not np.asarray(t.numpy()).any()
    return node.attributes.get_float("value", 0.0) == 0.0


def spatial_pads(node: ir.Node) -> list[int] | None:
    """The Pad's [begin..., end...] over all axes of its input when they are constant, non-negative and
    zero on axes 0 and 1, with the fill value 0 in mode constant; else None."""
    if node.attributes.get_string("mode", "constant") != "constant" or not _is_zero(node):
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        pads = const_ints(node.inputs[1], 64)
    else:
        attr = node.attributes.get("pads")
        pads = None if attr is None else list(attr.value)
    if pads is None or len(pads) % 2 or any(p < 0 for p in pads):
        return None
    half = len(pads) // 2
    if len(node.inputs) > 3 and node.inputs[3] is not None:  # opset 18: pads of the listed axes only
        axes, shape = const_ints(node.inputs[3], 64), node.inputs[0].shape
        if axes is None or shape is None or len(axes) != half:
            return None
        rank = len(shape)
        axes = [a % rank for a in axes]
        if len(set(axes)) != half:
            return None
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            full[a], full[a + rank] = pads[i], pads[i + half]
        pads, half = full, rank
    if half < 3 or pads[0] or pads[1] or pads[half] or pads[half + 1]:
        return None
    return pads


class FoldPadIntoConvPass(FusePass):
    """Constant zero Pad of the spatial axes into the pads of the Conv reading it (module docstring)."""

    name = "fold-pad-into-conv"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph
        for node in list(graph):
            if is_default_op(node, "Pad"):
                modified |= self._fold(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _fold(self, graph: ir.Graph, pad: ir.Node) -> bool:
        pads = spatial_pads(pad)
        if pads is None:
            return False
        x, y = pad.inputs[0], pad.outputs[0]
        done = False
        for use in list(y.uses()):
            conv = use.node
            if use.idx == 0 and is_default_op(conv, "MaxPool"):
                done |= self._fold_max_pool(pads, x, conv)
                continue
            if not is_default_op(conv, "Conv") or use.idx != 0:
                continue
            new = _merged_pads(conv, pads)
            if new is None:
                continue
            _take_pads(conv, new, x)
            self.stats["Pad->Conv"] += 1
            done = True
        if done and not list(y.uses()) and not y.is_graph_output():
            graph.remove(pad, safe=True)
        return done

    def _fold_max_pool(self, pads: list[int], x: ir.Value, pool: ir.Node) -> bool:
        """The zero Pad into a MaxPool's pads when x >= 0 and every window keeps a real cell (module docstring)."""
        spatial = len(pads) // 2 - 2
        if not _non_negative(x) or (len(pool.outputs) > 1 and pool.outputs[1] is not None):
            return False
        kernel = list(pool.attributes.get_ints("kernel_shape", []) or [])
        strides = list(pool.attributes.get_ints("strides", []) or [1] * spatial)
        dilations = list(pool.attributes.get_ints("dilations", []) or [1] * spatial)
        new = _merged_pads(pool, pads)
        if new is None or len(kernel) != spatial or len(strides) != spatial or any(d != 1 for d in dilations):
            return False
        ceil = pool.attributes.get_int("ceil_mode", 0)
        for i, (k, st) in enumerate(zip(kernel, strides)):
            begin, end = new[i], new[spatial + i]
            if begin > k - 1 or end > (k - st if ceil else k - 1):
                return False
        _take_pads(pool, new, x)
        self.stats["Pad->MaxPool"] += 1
        return True


def _merged_pads(node: ir.Node, pads: list[int]) -> list[int] | None:
    """A Conv's or MaxPool's pads ([begin of each spatial axis..., end of each...]) plus the Pad's spatial
    ``pads``; None under SAME_* auto_pad (computed from the input's size, which the Pad changes) or pads
    of another rank."""
    half = len(pads) // 2
    spatial = half - 2
    auto_pad = node.attributes.get_string("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID"):
        return None
    old = node.attributes.get_ints("pads", None) if auto_pad == "NOTSET" else None
    old = list(old) if old else [0] * (2 * spatial)
    if len(old) != 2 * spatial:
        return None
    return [old[i] + pads[2 + i] for i in range(spatial)] + [old[spatial + i] + pads[half + 2 + i]
                                                             for i in range(spatial)]


def _take_pads(node: ir.Node, new: list[int], x: ir.Value) -> None:
    """``node`` reads the Pad's input ``x`` with ``new`` as its own pads."""
    node.attributes["pads"] = ir.AttrInt64s("pads", new)
    if node.attributes.get_string("auto_pad", "NOTSET") == "VALID":
        node.attributes["auto_pad"] = ir.AttrString("auto_pad", "NOTSET")
    node.replace_input_with(0, x)


def _non_negative(v: ir.Value) -> bool:
    """v >= 0 for every non-NaN element, read from the op that computes it."""
    node = v.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in ("Relu", "Sigmoid", "HardSigmoid"):
        return True
    if node.op_type != "Clip":
        return False
    if len(node.inputs) > 1:  # opset 11+: min as input 1
        low = constant_tensor(node.inputs[1]) if node.inputs[1] is not None else None
        return low is not None and low.size == 1 and float(np.asarray(low.numpy())) >= 0
    return node.attributes.get_float("min", float("-inf")) >= 0
