"""A ScatterND / ScatterElements that writes a tensor's own values back where they are: the tensor.

Interleaved M-RoPE (transformers 5's Qwen3-VL, Cosmos 3, Cohere Compass) rebuilds its cos / sin tables
by slice writes: ``freqs[0][..., 1:k:3] = freqs[1][..., 1:k:3]`` and ``freqs[0] = ...`` (torch's
slice_scatter / select_scatter, exported as Transpose -> ScatterND -> Transpose and ScatterElements
along axis 0). For text-only positions the [3, B, S] positions are Expand'ed from [1, 1, S], so every
``freqs[i]`` is the same tensor and each write puts back the values already there. This pass proves that
from the values, not the exporter's spelling:

- an element of a value is traced to an element of a root value through index moves (Transpose, Slice
  with constant starts / steps, Gather of one constant index, Unsqueeze, Squeeze, Identity, and writes this
  pass already dropped): each root coordinate is a constant or ``offset + step * u[k]`` of the value's
  coordinate vector u;
- the root's uniform axes, along which its values do not change, are read from how it was computed:
  an Expand of a size-1 axis, a static size-1 axis, kept through elementwise ops, Cast, Unsqueeze,
  Transpose, constant Gathers and a Concat on another axis; on a uniform axis any two coordinates name equal values;
- ScatterND with constant indices (reduction none): for every index tuple, the updates' element map
  equals the data's at that index (per root axis: the same constant or the same affine term, or the
  axis is uniform), so every written value is the one already there;
- ScatterElements (reduction none) whose indices hold one value c (a constant, an Expand /
  ConstantOfShape of one): the data's map with ``u[axis] = c`` equals the updates' map.

Such a write's output is rerouted to its data input (the node goes with dead-code elimination); the
tables become the plain Gather(cos, 0) the RoPE rules read. A write whose output is a graph output while
the data cannot take its name (a graph input or output, an initializer, a value of an outer graph read
in a subgraph) becomes Identity(data). Runs in the cleanup passes (every level).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import raw_axes
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._shape_values import read_dims
from onnx_fuse.passes.constant_folding import constant_tensor

_DEPTH = 24
_MAX_TUPLES = 4096
# ops whose output element is a function of the inputs' elements at the same (broadcast) position
_ELEMENTWISE = frozenset((
    "Abs", "Add", "And", "Atan", "Ceil", "Cos", "Div", "Equal", "Erf", "Exp", "Floor", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "Log", "Max", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Pow",
    "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sqrt", "Sub", "Tanh", "Where", "Xor", "Cast",
    "Identity"))

# A root coordinate: ("c", value) or ("a", k, step, offset) = offset + step * u[k].
Term = tuple


def _ints(value: ir.Value | None) -> list[int] | None:
    t = constant_tensor(value)
    if t is None or not t.dtype.is_integer() or t.size > 64:
        return None
    return [int(v) for v in t.numpy().reshape(-1)]


def _compose(terms: list[Term], inner: list[Term]) -> list[Term]:
    """Root terms over an op's input coordinates, with the input coordinates given (``inner``) over its
    output's: the root terms over the output's coordinates."""
    out = []
    for t in terms:
        if t[0] == "c":
            out.append(t)
            continue
        _, k, s, o = t
        i = inner[k]
        out.append(("c", o + s * i[1]) if i[0] == "c" else ("a", i[1], s * i[2], o + s * i[3]))
    return out


def _input_coords(node: ir.Node, x: ir.Value, y: ir.Value) -> list[Term] | None:
    """The input coordinates of a moving op as terms of its output's; None where not provable."""
    xd, yd = read_dims(x, names="none"), read_dims(y, names="none")
    if xd is None or yd is None:
        return None
    r, ident = len(xd), lambda k: ("a", k, 1, 0)
    op = node.op_type
    if op == "Identity":
        return [ident(k) for k in range(r)]
    if op == "Transpose":
        perm = attr_value(node, "perm", None)
        perm = list(range(r))[::-1] if perm is None else list(perm)
        if sorted(perm) != list(range(r)) or len(yd) != r:
            return None
        inner: list = [None] * r
        for i, p in enumerate(perm):
            inner[p] = ident(i)
        return inner
    if op == "Slice":
        starts = _ints(node.inputs[1]) if len(node.inputs) > 1 else None
        axes = _ints(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None \
            else None if starts is None else list(range(len(starts)))
        steps = _ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None \
            else None if starts is None else [1] * len(starts)
        if starts is None or axes is None or steps is None or not len(starts) == len(axes) == len(steps):
            return None
        inner = [ident(k) for k in range(r)]
        for b, a, s in zip(starts, axes, steps):
            if not -r <= a < r or s == 0:
                return None
            a, d = a % r, xd[a % r]
            if s > 0 and b >= 0:
                pass  # past the end: the slice is empty and maps nothing
            elif d is None:
                return None
            elif s > 0:
                b = min(max(b + d, 0), d)
            else:
                b = min(max(b + d if b < 0 else b, 0), d - 1)   # the spec clamps a negative step's start to [0, d - 1]
            inner[a] = ("a", a, s, b)
        return inner
    if op == "Gather":
        idx = constant_tensor(node.inputs[1])
        a = attr_value(node, "axis", 0)
        if idx is None or not idx.dtype.is_integer() or idx.size != 1 or len(idx.shape) > 1 or not -r <= a < r:
            return None
        a, i = a % r, int(idx.numpy().reshape(-1)[0])
        if i < 0:
            if xd[a] is None:
                return None
            i += xd[a]
        if len(idx.shape) == 1:   # one index as a vector: the axis stays, of size 1
            return [("c", i) if k == a else ident(k) for k in range(r)]
        return [("c", i) if k == a else ident(k if k < a else k - 1) for k in range(r)]
    if op == "Unsqueeze":
        axes = raw_axes(node)
        if axes is None or len(yd) != r + len(axes):
            return None
        new = {a % len(yd) for a in axes}
        return [ident(k) for k in range(len(yd)) if k not in new]
    if op == "Squeeze":
        axes = raw_axes(node)
        if axes is None:
            return None
        gone = {a % r for a in axes}
        if any(xd[a] != 1 for a in gone) or len(yd) != r - len(gone):
            return None
        kept = [k for k in range(r) if k not in gone]
        return [("c", 0) if k in gone else ident(kept.index(k)) for k in range(r)]
    return None


def element_map(value: ir.Value, depth: int = 0) -> tuple[ir.Value, list[Term]] | None:
    """(root, terms): element u of ``value`` is element terms(u) of ``root`` (module docstring)."""
    node = value.producer()
    if depth < _DEPTH and node is not None and node.domain in ("", "ai.onnx") and node.inputs \
            and node.inputs[0] is not None and len(node.outputs) == 1:
        inner = _input_coords(node, node.inputs[0], value)
        if inner is not None:
            below = element_map(node.inputs[0], depth + 1)
            if below is not None:
                return below[0], _compose(below[1], inner)
    dims = read_dims(value, names="none")
    return None if dims is None else (value, [("a", k, 1, 0) for k in range(len(dims))])


def uniform_axes(value: ir.Value, depth: int = 0) -> set[int]:
    """Axes along which ``value`` provably holds equal values (module docstring)."""
    dims = read_dims(value, names="none")
    if dims is None:
        return set()
    r = len(dims)
    out = {k for k, d in enumerate(dims) if d == 1}
    node = value.producer()
    if depth >= _DEPTH or node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return out
    op, ins = node.op_type, list(node.inputs)
    if op == "Expand" and ins and ins[0] is not None:
        xd = read_dims(ins[0], names="none")
        if xd is not None and len(xd) <= r:
            below, lead = uniform_axes(ins[0], depth + 1), r - len(xd)
            out |= set(range(lead)) | {lead + k for k, d in enumerate(xd) if d == 1 or k in below}
    elif op in _ELEMENTWISE and ins and all(x is not None for x in ins):
        per = []
        for x in ins:
            xd = read_dims(x, names="none")
            if xd is None or len(xd) > r:
                return out
            below, lead = uniform_axes(x, depth + 1), r - len(xd)
            per.append(set(range(lead)) | {lead + k for k, d in enumerate(xd) if d == 1 or k in below})
        out |= set.intersection(*per)
    elif op == "Concat" and ins and all(x is not None for x in ins):
        # uniform off the joined axis when every input is (XD-RoPE's cat(f, f) of Expand'ed streams)
        a = attr_value(node, "axis", 0)
        if -r <= a < r and all((d := read_dims(x, names="none")) is not None and len(d) == r for x in ins):
            out |= set.intersection(*(uniform_axes(x, depth + 1) for x in ins)) - {a % r}
    elif op in ("Unsqueeze", "Squeeze", "Transpose", "Gather", "Slice", "Identity") and ins and ins[0] is not None:
        inner = _input_coords(node, ins[0], value)
        if inner is not None:
            below = uniform_axes(ins[0], depth + 1)
            # an output axis is uniform when every input axis reading it is
            reads: dict[int, list[int]] = {}
            for i, t in enumerate(inner):
                if t[0] == "a":
                    reads.setdefault(t[1], []).append(i)
            out |= {k for k in range(r) if all(i in below for i in reads.get(k, []))}
    return out


def _one_value(value: ir.Value | None, depth: int = 0) -> int | None:
    """The one int every element of ``value`` holds, where provable."""
    if value is None or depth > _DEPTH:
        return None
    t = constant_tensor(value)
    if t is not None:
        if not t.dtype.is_integer() or t.size == 0 or t.size > 1 << 16:
            return None
        a = t.numpy().reshape(-1)
        return int(a[0]) if bool(np.all(a == a[0])) else None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Expand", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose", "Cast") \
            and node.inputs and (node.op_type != "Cast" or (value.dtype is not None and value.dtype.is_integer())):
        return _one_value(node.inputs[0], depth + 1)
    if node.op_type == "ConstantOfShape":
        a = node.attributes.get("value")
        if a is None:
            return 0
        if a.is_ref() or not a.value.dtype.is_integer():
            return None
        return int(a.value.numpy().reshape(-1)[0])
    return None


def _subst(terms: list[Term], fixed: dict[int, int], moved: dict[int, int]) -> list[Term]:
    """Coordinates in ``fixed`` set to constants, the others renumbered by ``moved``."""
    out = []
    for t in terms:
        if t[0] == "a" and t[1] in fixed:
            out.append(("c", t[3] + t[2] * fixed[t[1]]))
        elif t[0] == "a":
            out.append(("a", moved[t[1]], t[2], t[3]))
        else:
            out.append(t)
    return out


def _normalized(terms: list[Term], dims: list) -> list[Term]:
    """A term over a coordinate of static size 1 is its offset."""
    return [("c", t[3]) if t[0] == "a" and dims[t[1]] == 1 else t for t in terms]


def _same(a: list[Term], b: list[Term], uniform: set[int]) -> bool:
    return len(a) == len(b) and all(j in uniform or x == y for j, (x, y) in enumerate(zip(a, b)))


def _renamable(data: ir.Value, graph: ir.Graph) -> bool:
    """Whether a graph output's name can move onto ``data``: a node's output in this very graph."""
    producer = data.producer()
    return (producer is not None and producer.graph is graph and not data.is_graph_output()
            and not data.is_graph_input() and data.const_value is None)


class SelfWriteEliminationPass(FusePass):
    """ScatterND / ScatterElements writing a tensor's own values back: the data (module docstring)."""

    name = "self-write-elimination"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is graph and is_default_op(node, "ScatterND", "ScatterElements") \
                        and self._no_op(node):
                    out, data = node.outputs[0], node.inputs[0]
                    if out.is_graph_output() and not _renamable(data, graph):
                        ident = ir.node("Identity", [data])
                        graph.insert_before(node, ident)
                        ident.outputs[0].type, ident.outputs[0].shape = out.type, out.shape
                        data = ident.outputs[0]
                    reroute(out, data)
                    graph.remove(node, safe=True)
                    self.stats[node.op_type] += 1
                    modified = True
        return ir.passes.PassResult(model, modified=modified)

    def _no_op(self, node: ir.Node) -> bool:
        if len(node.inputs) != 3 or any(v is None for v in node.inputs) or len(node.outputs) != 1:
            return False
        if attr_value(node, "reduction", "none") not in ("none", b"none"):
            return False
        data, indices, updates = node.inputs
        dd, ud = read_dims(data, names="none"), read_dims(updates, names="none")
        dm, um = element_map(data), element_map(updates)
        if dd is None or ud is None or dm is None or um is None or dm[0] is not um[0]:
            return False
        uniform = uniform_axes(dm[0])
        if node.op_type == "ScatterElements":
            c = _one_value(indices)
            r = len(dd)
            a = attr_value(node, "axis", 0)
            if c is None or len(ud) != r or not -r <= a < r:
                return False
            a = a % r
            if c < 0:
                if dd[a] is None:
                    return False
                c += dd[a]
            want = _subst(dm[1], {a: c}, {k: k for k in range(r)})
            return _same(_normalized(um[1], ud), want, uniform)
        idx = constant_tensor(indices)
        if idx is None or not idx.dtype.is_integer() or len(idx.shape) < 1:
            return False
        idx = idx.numpy()
        q, m = idx.shape[-1], idx.ndim - 1
        if q > len(dd) or len(ud) != m + len(dd) - q or idx.size // max(q, 1) > _MAX_TUPLES:
            return False
        upd_terms = _normalized(um[1], ud)
        for p in np.ndindex(*idx.shape[:-1]):
            at = [int(v) for v in idx[p]]
            for j, v in enumerate(at):
                if v < 0:
                    if dd[j] is None:
                        return False
                    at[j] = v + dd[j]
            u = _subst(upd_terms, dict(enumerate(p)), {m + t: t for t in range(len(dd) - q)})
            d = _subst(dm[1], dict(enumerate(at)), {q + t: t for t in range(len(dd) - q)})
            if not _same(u, d, uniform):
                return False
        return True
