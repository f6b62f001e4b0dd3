"""Parallel Conv branches of one input summed by Adds, with an optional identity BatchNormalization branch, as
one Conv (RepVGG-style re-parameterization).

PP-LCNetV3 (PP-OCRv5's recogniser) writes each block as sum_i Conv_kxk_i(x) + Conv_1x1(x) + BN(x): after
fold-batch-norm every branch but the identity BN is a Conv with a bias. Convolution is linear in its weight,
so Conv_W1(x) + Conv_W2(x) = Conv_{W1 + W2}(x) when both read x's taps at the same places: with stride s,
dilation 1 and "centered" padding (k odd, pads (k - 1) / 2 at both ends of every spatial axis) output o of a
k-kernel reads x[o * s - (k - 1) / 2 + j], so a smaller kernel is the larger one with zeros around it, its
centre tap at the same x. BN(x) = s * x + t is the Conv whose kernel holds s at the centre tap of output
channel m's own input channel (stride 1, as many output as input channels, so m's group holds input channel
m at in-group index m mod C/g) plus bias t. The sum is exact up to float rounding (computed in float64).

Merged only when: every leaf of the Add tree (Adds read once each, but the root) is a Conv of the same x with
constant weights of one float dtype, the same group and strides, dilations 1, no auto_pad, centered pads and
a constant (or no) bias, or an inference BN of x with constant parameters (BatchNormalization via
fold-batch-norm's checks); each leaf's output is read by the tree only; at least one Conv. A tree with any
other leaf (a residual, a Conv of another input) is left alone.

Runs at level >= 2 for every target, right after fold-batch-norm (which first folds each branch's own BN).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, is_default_op
from onnx_fuse.passes._new_values import array_initializer, fresh_name, graph_names
from onnx_fuse.passes.batch_norm_fold import _NUMPY_FLOATS, _bn_affine, _optional_bias
from onnx_fuse.passes.constant_folding import constant_tensor


def _read_once(v: ir.Value, node: ir.Node) -> bool:
    return not v.is_graph_output() and [u.node for u in v.uses()] == [node]


def _leaves(add: ir.Node, tree: list[ir.Node] | None = None) -> list[tuple[ir.Value, ir.Node]] | None:
    """(value, the Add reading it) for each leaf of the Add tree rooted at ``add``; the tree's Adds, readers
    first, are appended to ``tree`` when given."""
    if tree is not None:
        tree.append(add)
    out = []
    for v in add.inputs:
        if v is None:
            return None
        p = v.producer()
        if is_default_op(p, "Add") and _read_once(v, add):
            sub = _leaves(p, tree)
            if sub is None:
                return None
            out += sub
        else:
            out.append((v, add))
    return out


def _centered(conv: ir.Node, k: list[int]) -> bool:
    a = conv.attributes
    if a.get_string("auto_pad", "NOTSET") != "NOTSET" or any(d != 1 for d in (a.get_ints("dilations", None) or [])):
        return False
    pads = list(a.get_ints("pads", None) or [0] * (2 * len(k)))
    half = [(d - 1) // 2 for d in k]
    return all(d % 2 for d in k) and pads == half + half


class MergeConvBranchesPass(FusePass):
    """Summed Conv branches (and an identity BN) of one input as one Conv (module docstring)."""

    name = "merge-conv-branches"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph
        for node in list(graph):
            if node.graph is graph and is_default_op(node, "Add"):
                y = node.outputs[0]
                readers = [u.node for u in y.uses()]
                if len(readers) == 1 and is_default_op(readers[0], "Add") and not y.is_graph_output():
                    continue  # not a root: its root takes the whole tree
                modified |= self._merge(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _merge(self, graph: ir.Graph, root: ir.Node) -> bool:
        tree: list[ir.Node] = []
        leaves = _leaves(root, tree)
        if leaves is None or len(leaves) < 2:
            return False
        convs, bns, x = [], [], None
        for v, reader in leaves:
            p = v.producer()
            if p is None or not _read_once(v, reader) or p.inputs[0] is None:
                return False
            if x is None:
                x = p.inputs[0]
            if p.inputs[0] is not x:
                return False
            if is_default_op(p, "Conv"):
                convs.append(p)
            elif is_default_op(p, "BatchNormalization"):
                bns.append(p)
            else:
                return False
        if not convs:
            return False
        parts = self._conv_parts(convs)
        if parts is None:
            return False
        weights, biases, group, strides, dtype = parts
        m_out = weights[0].shape[0]
        big = [max(w.shape[2 + i] for w in weights) for i in range(len(weights[0].shape) - 2)]
        merged = np.zeros((m_out, weights[0].shape[1], *big))
        for w in weights:
            off = [(b - d) // 2 for b, d in zip(big, w.shape[2:])]
            merged[(slice(None), slice(None), *(slice(o, o + d) for o, d in zip(off, w.shape[2:])))] += w
        bias = np.sum(biases, axis=0)
        centre = tuple(d // 2 for d in big)
        for bn in bns:
            affine = _bn_affine(bn)
            # identity: output channel m reads input channel m (stride 1, as many channels out as in)
            if affine is None or affine[0].size != m_out or any(s != 1 for s in strides):
                return False
            if m_out != merged.shape[1] * group:
                return False
            s, t = affine
            m = np.arange(m_out)
            merged[(m, m % merged.shape[1], *centre)] += s
            bias = bias + t
        first = convs[0]
        np_dt = dtype.numpy()
        w_val = array_initializer(graph, f"{first.name or 'conv'}_branches_w", merged.astype(np_dt), dtype)
        b_val = array_initializer(graph, f"{first.name or 'conv'}_branches_b", bias.astype(np_dt), dtype)
        y = root.outputs[0]
        out = ir.Value(name=fresh_name(f"{y.name or 'conv'}_merged", graph_names(graph)), type=y.type, shape=y.shape)
        attrs = [ir.AttrInt64("group", group), ir.AttrInt64s("strides", strides),
                 ir.AttrInt64s("pads", [d // 2 for d in big] * 2), ir.AttrInt64s("kernel_shape", big)]
        conv = ir.Node("", "Conv", [x, w_val, b_val], attributes=attrs, outputs=[out],
                       name=f"{first.name or 'conv'}_branches")
        graph.insert_before(root, conv)
        name, was_output = y.name, y.is_graph_output()
        y.replace_all_uses_with(out, replace_graph_outputs=True)
        if was_output:  # the model's output keeps its name
            y.name, out.name = None, name
        # the Add tree (readers first), then the branches it summed
        graph.remove(tree + [v.producer() for v, _ in leaves], safe=True)
        self.stats["Conv branches"] += 1
        self.stats["identity BatchNormalization"] += len(bns)
        return True

    def _conv_parts(self, convs):
        """Each Conv's weight and bias in float64, and the group / strides / dtype they share; None when
        they do not align (module docstring)."""
        weights, biases, group, strides, dtype = [], [], None, None, None
        for conv in convs:
            if len(conv.inputs) < 2:
                return None
            w = constant_tensor(conv.inputs[1])
            if w is None or w.dtype not in _NUMPY_FLOATS or len(w.shape) < 3:
                return None
            dims = list(w.shape)
            if not all(isinstance(d, int) for d in dims) or not _centered(conv, dims[2:]):
                return None
            ok, b = _optional_bias(conv, w.dtype)
            g = conv.attributes.get_int("group", 1)
            st = list(conv.attributes.get_ints("strides", None) or [1] * (len(dims) - 2))
            if not ok or (dtype is not None and (w.dtype != dtype or g != group or st != strides)):
                return None
            if weights and (dims[0], dims[1]) != weights[0].shape[:2]:
                return None
            dtype, group, strides = w.dtype, g, st
            weights.append(np.asarray(w.numpy(), np.float64))
            biases.append(np.zeros(dims[0]) if b is None else np.asarray(b.numpy(), np.float64).reshape(-1))
        return weights, biases, group, strides, dtype
