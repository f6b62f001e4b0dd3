"""Applying rules: plan a replacement off-graph, validate it, then commit; RewritePass drives it.

For one match, ``plan`` evaluates the rewrite statements (computed values, new initializers, new
ops with their attributes) without touching the graph, and validates every new default-domain
node: ``onnx.checker.check_node`` against its schema at the model's opset, then output types by
``onnx.shape_inference.infer_node_outputs``; an inferred dtype or rank that disagrees with the
value it replaces rejects the plan. ``commit`` then inserts the nodes before the anchor (every
matched node is an ancestor of the anchor, so all inputs are defined there), redirects uses of
the pattern outputs (graph outputs keep their names), removes the matched nodes nothing uses any
more, and keeps the op index current. A rejected plan leaves the graph untouched.

``RewritePass`` applies rules by priority to a fixed point over the main graph and subgraphs.
"""

from __future__ import annotations

import dataclasses
import gc
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.rewrite import _expr, _graph_io
from onnx_fuse.rewrite._matcher import GraphFacts, Match, Matcher, _ExprContext, attr_value, norm_domain
from onnx_fuse.rewrite._shape_reads import move_reads
from onnx_fuse.errors import InternalError
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN
from onnx_fuse.rewrite._rule import CANONICAL_DOMAIN, STAGES, Rule, RuleSet
from onnx_fuse.rewrite._operand_twins import merge_operand_twins

RULE_TAG = "onnx_fuse.rule"
#: ops whose ONNX shape inference (onnx 1.23) writes dim_value 0 for a dim it cannot compute
#: (Attention-23's output hidden size when v's last dim is symbolic): read 0 as unknown there
_ZERO_MEANS_UNKNOWN = frozenset({"Attention"})


def _concat_length(nn: Any, shape: ir.Shape, in_shapes: list) -> ir.Shape:
    """A new Concat's length along its axis named as its parts' sum (``past_sequence + sequence``,
    passes/_dim_sums.py's spelling) where ONNX inference leaves it unknown: a join written by a
    rule (cache-heads-folded) then has the length shape inference would give it, which views of
    it need to be proven."""
    from onnx_fuse.passes._dim_products import dim_text, to_dim
    from onnx_fuse.passes._dim_sums import dim_sum

    rank, axis = len(shape), nn.attrs.get("axis")
    if not isinstance(axis, (int, np.integer)) or not -rank <= axis < rank:
        return shape
    axis = int(axis) % rank
    d = shape.dims[axis]
    if isinstance(d, int) or getattr(d, "value", None) or any(x is None or len(x) != rank for x in in_shapes):
        return shape
    parts = [x.dims[axis] for x in in_shapes]
    total = dim_sum([to_dim(p if isinstance(p, int) else getattr(p, "value", None)) for p in parts])
    if total is None:
        return shape
    dims = list(shape.dims)
    dims[axis] = total[0] if not total[1] else ir.SymbolicDim(dim_text(total))
    return ir.Shape(dims)


def _target_entries(v: Any, data: np.ndarray | None, made: dict, type_of) -> list | None:
    """A new Reshape's target as Dims: a constant's ints, or read through the new Shape / Slice /
    Concat nodes that computed it (a rule's ``Concat(Shape(q)[0:2], [H, -1, D])``) and through
    existing values as the shape facts read them; None where not read."""
    from onnx_fuse.passes._dim_products import shape_vector, to_dim

    if data is not None:
        return [(int(x), ()) for x in np.asarray(data).reshape(-1)] if np.asarray(data).ndim == 1 else None
    if isinstance(v, ir.Value):
        got = shape_vector(v, {})
        return list(got[0]) if got is not None and not got[1] else None
    nn = made.get(v)
    if nn is None or nn.domain != "":
        return None
    if nn.op_type == "Shape" and nn.inputs and nn.inputs[0] is not None:
        shp = type_of(nn.inputs[0])[1]
        if shp is None:
            return None
        dims = [to_dim(d if isinstance(d, int) else getattr(d, "value", None)) for d in shp.dims]
        return dims[slice(nn.attrs.get("start"), nn.attrs.get("end"))]
    if nn.op_type == "Concat" and nn.attrs.get("axis") in (0, -1):
        out: list = []
        for x in nn.inputs:
            part = _target_entries(x, _small_int_constant(x), made, type_of) if x is not None else None
            if part is None:
                return None
            out += part
        return out
    if nn.op_type == "Slice" and len(nn.inputs) == 3:   # one axis, step 1: a Shape read cut
        inner = _target_entries(nn.inputs[0], _small_int_constant(nn.inputs[0]), made, type_of)
        lo, hi = (_small_int_constant(x) for x in nn.inputs[1:3])
        if inner is None or lo is None or hi is None or lo.size != 1 or hi.size != 1:
            return None
        return inner[int(lo.reshape(-1)[0]):int(hi.reshape(-1)[0])] if int(lo.reshape(-1)[0]) >= 0 else None
    return None


def _view_dims(nn: Any, shape: ir.Shape, in_shape: ir.Shape | None, target: list | None) -> ir.Shape:
    """A new Flatten's or Reshape's dims ONNX inference leaves unknown, named from the input's dims
    (passes/_dim_products.py's products): Flatten's two products, a Reshape's ``0`` copies, its
    sizes read from the target (``_target_entries``) and its ``-1`` solved from the element count.
    The views a rule writes over symbolic dims (attention-blocks-5d-batch: [B, N, H, K, L] ->
    [B*N, H*K*L] -> [B*N, H, K, L] and back) then have the sizes the lowering's checks compare (a
    bias already [., ., S, T] is not broadcast again)."""
    from onnx_fuse.passes._dim_lengths import clean
    from onnx_fuse.passes._dim_products import div, mul, to_dim
    from onnx_fuse.passes._dim_source import _render

    if in_shape is None:
        return shape
    ins = [to_dim(d if isinstance(d, int) else getattr(d, "value", None)) for d in in_shape.dims]
    if not ins or not all(clean(d) and d[0] >= 0 for d in ins):
        return shape
    total = (1, ())
    for d in ins:
        total = mul(total, d)
    if nn.op_type == "Flatten":
        axis = nn.attrs.get("axis", 1)
        if not isinstance(axis, (int, np.integer)) or not -len(ins) <= axis <= len(ins) or len(shape) != 2:
            return shape
        head = (1, ())
        for d in ins[:int(axis) % (len(ins) + 1) if axis >= 0 else len(ins) + int(axis)]:
            head = mul(head, d)
        outs = [head, div(total, head) if head[0] else None]
    else:
        if target is None or len(target) != len(shape):
            return shape
        zero_copies = not nn.attrs.get("allowzero", 0)
        outs = []
        for i, e in enumerate(target):
            if e is None or (e[1] and not clean(e)):
                return shape   # an entry not read: nothing is solved
            if e == (0, ()) and zero_copies:
                outs.append(ins[i] if i < len(ins) else None)
            else:
                outs.append(e if e[0] >= 0 else None if e == (-1, ()) else False)
        if False in outs or outs.count(None) > 1 or (None in outs and (0, ()) in outs):
            return shape   # a second unknown, a negative size, or -1 beside a 0 (allowzero)
        if None in outs:
            rest = (1, ())
            for d in outs:
                if d is not None:
                    rest = mul(rest, d)
            outs[outs.index(None)] = div(total, rest) if rest[0] else None
    dims = list(shape.dims)
    for i, (d, o) in enumerate(zip(dims, outs)):
        known = isinstance(d, int) or (getattr(d, "value", None) and not _invented(d.value))
        name = _render(o) if o is not None and clean(o) else None
        if not known and name is not None:
            dims[i] = name if isinstance(name, int) else ir.SymbolicDim(name)
    return ir.Shape(dims)


def _expanded_dims(shape: ir.Shape, in_shape: ir.Shape | None, target: list | None) -> ir.Shape:
    """A new Expand's dims ONNX inference leaves unknown (its shape computed: a bias broadcast to
    ``Shape(q)[0:2] + [1, 1, 1]``): numpy broadcasting of the input's dims and the target's entries,
    where each pair is decided (a 1 on either side, or the same size)."""
    from onnx_fuse.passes._dim_lengths import clean
    from onnx_fuse.passes._dim_products import to_dim
    from onnx_fuse.passes._dim_source import _render

    if in_shape is None or target is None or len(shape) != max(len(in_shape), len(target)):
        return shape
    ins = [to_dim(d if isinstance(d, int) else getattr(d, "value", None)) for d in in_shape.dims]
    r = len(shape)
    ins = [(1, ())] * (r - len(ins)) + ins
    target = [(1, ())] * (r - len(target)) + list(target)
    dims = list(shape.dims)
    for i, (a, b) in enumerate(zip(ins, target)):
        d = dims[i]
        if isinstance(d, int) or (getattr(d, "value", None) and not _invented(d.value)):
            continue
        out = b if a == (1, ()) else a if b == (1, ()) or a == b else None
        name = _render(out) if out is not None and clean(out) and out[0] >= 0 else None
        if name is not None:
            dims[i] = name if isinstance(name, int) else ir.SymbolicDim(name)
    return ir.Shape(dims)


def _sliced_dims(shape: ir.Shape, in_shape: ir.Shape | None, axes: np.ndarray | None, n_starts: list | None) -> ir.Shape:
    """A new Slice's dims on the axes it does not cut: its input's. ONNX inference leaves every dim
    unknown when starts / ends are not constants (a RoPE table's rows cut to x's length), though only
    the cut axes change. ``axes``: the constant axes input (None: absent, the leading len(starts))."""
    if in_shape is None or len(in_shape) != len(shape):
        return shape
    r = len(shape)
    if axes is not None:
        cut = {int(a) % r for a in axes.reshape(-1) if -r <= int(a) < r}
        if len(cut) != axes.size:
            return shape
    elif n_starts and isinstance(n_starts[0], int):
        cut = set(range(n_starts[0]))
    else:
        return shape
    dims = list(shape.dims)
    for i, d in enumerate(in_shape.dims):
        if i not in cut and not isinstance(dims[i], int) and not getattr(dims[i], "value", None):
            dims[i] = d
    return ir.Shape(dims)


def _invented(name: str) -> bool:
    from onnx_fuse.passes._shape_values import invented_name

    return invented_name(str(name))


class RewriteRejected(Exception):
    """The replacement for a match is invalid; the match is left alone."""


class Float32Plugin(RewriteRejected):
    """The replacement would feed float32 to a plugin op whose TensorRT kernels take fp16 / bf16
    only, and no precision conversion follows: the match is left to the target's own ops."""

    def __init__(self, op_type: str):
        super().__init__(f"{op_type} would take float32 inputs; its TensorRT kernels take fp16 / bf16 "
                         "(--precision fp16 or bf16 lowers the graph first)")
        self.op_type = op_type


class NoProgress(Exception):
    """The replacement is the matched subgraph itself (e.g. an optional part was absent);
    applying it would loop forever, so the match is skipped."""


class NameAuthority:
    """Unique, deterministic node and value names across the model."""

    def __init__(self, model: ir.Model):
        self.used: set[str] = set()
        self._next: dict[str, int] = {}
        for g in model.graphs():
            for v in (*g.inputs, *g.initializers.values()):
                if v.name:
                    self.used.add(v.name)
            for n in g:
                if n.name:
                    self.used.add(n.name)
                for o in n.outputs:
                    if o.name:
                        self.used.add(o.name)

    def propose(self, base: str, taken: set[str]) -> str:
        base = re.sub(r"\s+", "_", base) or "n"
        if base not in self.used and base not in taken:
            return base
        k = self._next.get(base, 1)
        while f"{base}_{k}" in self.used or f"{base}_{k}" in taken:
            k += 1
        return f"{base}_{k}"

    def commit(self, names: Iterable[str]) -> None:
        for n in names:
            self.used.add(n)
            m = re.match(r"^(.*)_(\d+)$", n)
            if m and m.group(1) in self._next:
                self._next[m.group(1)] = max(self._next[m.group(1)], int(m.group(2)) + 1)


@dataclasses.dataclass
class _NewNode:
    domain: str
    op_type: str
    inputs: list[Any]                 # ir.Value | _NewValue | None
    attrs: dict[str, Any]
    name: str
    outputs: list[_NewValue | None]
    type_hint: tuple[str, list] | None = None   # ("like" | "dtype", [ir.Value | _NewValue] one or per output)
    ir_attrs: list[ir.Attr] | None = None       # converted at plan time, so commit cannot fail halfway


@dataclasses.dataclass(eq=False)
class _NewValue:
    name: str
    var: str | None = None
    dtype: ir.DataType | None = None
    shape: ir.Shape | None = None
    initializer: np.ndarray | None = None
    ir_value: ir.Value | None = None


@dataclasses.dataclass
class _Unbound:
    """The value of a rewrite statement that could not be built (an input was unbound)."""

    why: str


@dataclasses.dataclass
class Plan:
    match: Match
    nodes: list[_NewNode]
    initializers: list[_NewValue]
    outputs: dict[str, Any]           # pattern output -> ir.Value | _NewValue
    names: list[str]
    io_inputs: list[_NewValue] = dataclasses.field(default_factory=list)  # graph_io inputs read
    io_replaced: frozenset[str] = frozenset()   # pattern outputs whose graph-output slot a new output takes
    io_crops: dict[str, ir.Node] = dataclasses.field(default_factory=dict)  # ... through this cropping Slice


def _py(v: Any) -> Any:
    """Expression result -> attribute-friendly Python value."""
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (list, tuple)):
        items = [_py(x) for x in v]
        if items and all(isinstance(x, int) for x in items):
            return items
        if items and all(isinstance(x, (int, float)) for x in items):
            return [float(x) for x in items]
        return items
    return v


# canonical ops whose ``scale`` every lowering passes on as the target op's scale attribute
_SCALED_OPS = frozenset(("Attention", "AttentionKV"))


def _check_scale(v: Any) -> bool:
    """A canonical attention's scale must be a finite number other than 0: ONNX Attention-23 refuses scale <= 0 at
    load time and com.microsoft::MultiHeadAttention reads 0 as its default 1/sqrt(D), so softmax(c q k^T) with
    c = 0 (or a scale that overflowed) stays as it is, whichever recognizer read it. True for a negative scale,
    which the caller carries exactly as -c on Neg(q): c (q k^T) = (-c) ((-q) k^T) bit for bit (negation is
    exact, and a sum of negated terms rounds to the negated sum)."""
    if v is not None and not (isinstance(v, (int, float)) and np.isfinite(v) and v != 0):
        raise RewriteRejected(f"attention scale {v!r}: must be a finite number other than 0")
    return v is not None and v < 0


def _ir_attr(name: str, v: Any) -> ir.Attr:
    if isinstance(v, np.ndarray):
        return ir.AttrTensor(name, ir.tensor(v))
    if v is None:
        raise RewriteRejected(f"attribute {name} evaluated to None")
    if isinstance(v, float) and np.isfinite(v) and v != 0:
        # rules compute in Python floats, an attribute holds a float32: a scale of 1e-46 (two operand
        # scales multiplied) would be stored as 0, which MultiHeadAttention reads as 1/sqrt(D)
        with np.errstate(over="ignore"):
            f32 = float(np.float32(v))
        if not 0 < abs(f32) < np.inf:
            raise RewriteRejected(f"attribute {name}={v!r} is {f32} as a float32")
    try:
        return ir.convenience.convert_attribute(name, v)
    except (TypeError, ValueError) as exc:
        raise RewriteRejected(f"attribute {name}={v!r}: {exc}") from None


def _type_proto(dtype: ir.DataType | None, shape: ir.Shape | None) -> onnx.TypeProto | None:
    if dtype is None:
        return None
    dims = None
    if shape is not None:
        dims = [d if isinstance(d, int) else (getattr(d, "value", None)) for d in shape.dims]
    return onnx.helper.make_tensor_type_proto(int(dtype), dims)


class Rewriter:
    """Plans and commits replacements in one model."""

    def __init__(self, model: ir.Model, *, validate: bool = True, float32_plugins: bool = True):
        self.model = model
        self.names = NameAuthority(model)
        self.validate = validate
        self.float32_plugins = float32_plugins
        self.opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
        self.needs_sort: set[ir.Graph] = set()
        self._checked: dict[tuple, list | str] = {}

    # --- plan -------------------------------------------------------------------------------

    def plan(self, match: Match, facts: GraphFacts) -> Plan:
        rule = match.rule
        matched = set(match.nodes.values())
        ctx = _ExprContext(facts, match.values, match.attrs, matched)
        env: dict[str, Any] = {**match.values, **match.attrs}
        taken: set[str] = set()
        base = match.anchor.name or rule.name
        nodes: list[_NewNode] = []
        inits: list[_NewValue] = []
        ctx.planned, ctx.graph = nodes, match.anchor.graph

        def new_name(stem: str) -> str:
            n = self.names.propose(stem, taken)
            taken.add(n)
            return n

        io = rule.graph_io
        if io is not None:  # new graph inputs are rewrite names (made or shared at commit)
            graph_inputs = {v.name for v in match.anchor.graph.inputs} if match.anchor.graph else set()

            def io_input(name: str, var: str, dtype: ir.DataType, shape: ir.Shape) -> _NewValue:
                if name in self.names.used and name not in graph_inputs:
                    raise RewriteRejected(f"graph_io input {name!r}: the model already has a value of that name")
                return _NewValue(name, var, dtype, shape)

            _graph_io.plan_inputs(io, env, ctx, io_input, RewriteRejected)
        for st in rule.rewrite:
            try:
                if st.kind == "expr":
                    env[st.outputs[0]] = st.expr.evaluate(env, ctx)  # type: ignore[union-attr]
                elif st.kind == "alias":
                    if st.alias not in env and st.alias in match.rule.leaves:
                        env[st.outputs[0]] = _Unbound(f"rewrite line {st.line}: {st.alias!r} is unbound")
                        continue
                    if st.alias not in env:
                        raise RewriteRejected(f"rewrite line {st.line}: {st.alias!r} is unbound")
                    env[st.outputs[0]] = env[st.alias]  # type: ignore[index]
                elif st.kind == "initializer":
                    raw = st.expr.evaluate(env, ctx)  # type: ignore[union-attr]
                    arr = np.asarray(raw)
                    if arr.dtype == np.float64 and not isinstance(raw, np.ndarray):
                        arr = arr.astype(np.float32)  # a Python number/list: float32, as ONNX models use
                    if not _expr.is_numeric_dtype(arr.dtype):
                        raise RewriteRejected(f"initializer {st.outputs[0]} is not numeric")
                    nv = _NewValue(new_name(f"{base}_{st.outputs[0]}"), st.outputs[0],
                                   ir.DataType.from_numpy(arr.dtype), ir.Shape(arr.shape), arr)
                    inits.append(nv)
                    env[st.outputs[0]] = nv
                else:
                    op = st.op
                    assert op is not None
                    missing = [i for i in op.inputs if i is not None and
                               (i not in env or isinstance(env[i], _Unbound))]
                    if missing:
                        # built only if a pattern output needs it (a choice like
                        # `kk = k4 if bound(k4) else kt` leaves the other side unused)
                        why = (env[missing[0]].why if isinstance(env.get(missing[0]), _Unbound) else
                               f"rewrite line {st.line}: {missing[0]!r} is unbound (it belongs to "
                               "an optional part that is absent)")
                        for name in st.outputs:
                            if name is not None:
                                env[name] = _Unbound(why)
                        continue
                    inputs = [None if i is None else env[i] for i in op.inputs]
                    for i, v in zip(op.inputs, inputs):
                        # a computed None omits an optional input (`m = mask if bound(mask) else None`)
                        if i is not None and v is not None and not isinstance(v, (ir.Value, _NewValue)):
                            raise RewriteRejected(f"input {i!r} is not a tensor")
                    while inputs and inputs[-1] is None:
                        inputs.pop()
                    attrs = {k: _py(e.evaluate(env, ctx)) for k, e in op.attrs.items()}
                    if norm_domain(op.domain) == CANONICAL_DOMAIN and op.op_type in _SCALED_OPS \
                            and _check_scale(attrs.get("scale")):
                        # q is the only input the scale meets (q k^T, then softcap / mask / sinks)
                        nq = _NewValue(new_name(f"{base}_neg_q"), None)
                        nodes.append(_NewNode("", "Neg", [inputs[0]], {}, new_name(f"{base}/{rule.name}/neg_q"), [nq]))
                        inputs[0], attrs["scale"] = nq, -attrs["scale"]
                    # hints resolve before this statement binds its outputs: `like(present)` names
                    # the matched value being replaced (its type is the one to keep)
                    hint = None
                    if op.type_hint is not None:
                        refs = []
                        for hn in op.type_hint[1]:
                            if hn not in env or not isinstance(env[hn], (ir.Value, _NewValue)):
                                raise RewriteRejected(f"rewrite line {st.line}: type hint {hn!r} is unbound")
                            refs.append(env[hn])
                        hint = (op.type_hint[0], refs)
                    outs: list[_NewValue | None] = []
                    for name, cond in zip(st.outputs, st.conditional):
                        # `s?` of an output this match left unbound (an alternative not taken): none
                        if name is None or (cond and (name not in match.values
                                                      or not ctx.consumed(match.values[name]))):
                            outs.append(None)
                            continue
                        old = match.values.get(name)
                        if name in rule.outputs and old is not None and old.is_graph_output():
                            vname = old.name  # graph outputs keep their names
                        else:
                            vname = new_name(f"{base}_{name}")
                        nv = _NewValue(vname, name)
                        outs.append(nv)
                        env[name] = nv
                    nodes.append(_NewNode(op.domain, op.op_type, inputs, attrs,
                                          new_name(f"{base}/{rule.name}"), outs, hint))
            except _expr.EvalFailure as exc:
                if st.kind in ("expr", "initializer") and any(
                        n not in env or isinstance(env[n], _Unbound) for n in st.expr.names):  # type: ignore[union-attr]
                    # reads a leaf of an absent part: unbuilt unless a pattern output needs it
                    env[st.outputs[0]] = _Unbound(f"rewrite line {st.line} ({st.source}): {exc}")
                    continue
                raise RewriteRejected(f"rewrite line {st.line} ({st.source}): {exc}") from None
        replaced = io.replaced if io is not None else set()
        outputs = {o: env[o] for o in rule.outputs if o not in replaced}
        crops: dict[str, ir.Node] = {}
        if io is not None:
            _graph_io.plan_outputs(io, match, env, ctx, outputs, RewriteRejected, crops)
            for o in replaced:
                if outputs[o].name in self.names.used or outputs[o].name in taken:
                    raise RewriteRejected(f"graph_io output {outputs[o].name!r}: the model already has a "
                                          "value of that name")
                taken.add(outputs[o].name)
        for o, v in outputs.items():
            if isinstance(v, _Unbound):
                raise RewriteRejected(v.why)
            if not isinstance(v, (ir.Value, _NewValue)):
                raise RewriteRejected(f"pattern output {o!r} must be a tensor, the rewrite made it {v!r}")
            old = match.values.get(o)
            # a graph output keeps its name also when a computed choice picks its new value
            # (`o = oc if bound(tv) else oa`): the chosen value was named for its statement
            if isinstance(v, _NewValue) and old is not None and old.is_graph_output() and o not in replaced:
                v.name = old.name
        nodes, inits = self._live(nodes, inits, outputs)
        plan = Plan(match, nodes, inits, outputs, sorted(taken))
        if io is not None:
            plan.io_inputs = [env[i.var] for i in io.inputs]
            plan.io_replaced = frozenset(replaced)
            plan.io_crops = crops
        if self._is_noop(plan):
            raise NoProgress(rule.name)
        self._validate(plan)
        # everything that can refuse the rewrite happens here, before commit mutates the graph
        for nn in plan.nodes:
            nn.ir_attrs = [_ir_attr(k, v) for k, v in nn.attrs.items()]
        for nv in plan.io_inputs:
            _graph_io.check_input(match.anchor.graph, nv.name, nv.dtype, nv.shape, RewriteRejected)
        if len(rule.outputs) > 1:
            self._refuse_cycles(plan)
        return plan

    @staticmethod
    def _refuse_cycles(plan: Plan) -> None:
        """With several outputs, a new node may read a value computed from one of the outputs it
        replaces (Optimum's Falcon sizes its mask from Shape(present)): committing would close a
        cycle. Walk back from the new nodes' inputs; reaching a replaced output refuses the plan."""
        match = plan.match
        replaced = {match.values[o] for o in match.rule.outputs[1:]}
        matched = set(match.nodes.values())
        stack = [v for nn in plan.nodes for v in nn.inputs if isinstance(v, ir.Value)]
        seen: set[ir.Value] = set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in replaced:
                raise RewriteRejected(f"the replacement would read {v.name!r}, which it replaces "
                                      "(the graph would get a cycle)")
            node = v.producer()
            if node is not None and node not in matched:
                stack.extend(x for x in node.inputs if x is not None)

    @staticmethod
    def _live(nodes: list[_NewNode], inits: list[_NewValue],
              outputs: dict[str, Any]) -> tuple[list[_NewNode], list[_NewValue]]:
        """Only the new nodes and initializers the pattern outputs depend on: a computed choice
        (``mb = mx if dim(mask, 2) == 1 else mask``) leaves the branch not taken unbuilt."""
        producer = {id(o): n for n in nodes for o in n.outputs if o is not None}
        live_nodes: set[int] = set()
        live_values: set[int] = set()
        stack = [v for v in outputs.values() if isinstance(v, _NewValue)]
        while stack:
            v = stack.pop()
            if id(v) in live_values:
                continue
            live_values.add(id(v))
            n = producer.get(id(v))
            if n is None or id(n) in live_nodes:
                continue
            live_nodes.add(id(n))
            stack.extend(i for i in n.inputs if isinstance(i, _NewValue))
            if n.type_hint is not None:
                stack.extend(r for r in n.type_hint[1] if isinstance(r, _NewValue))
        return ([n for n in nodes if id(n) in live_nodes],
                [v for v in inits if id(v) in live_values])

    @staticmethod
    def _is_noop(plan: Plan) -> bool:
        """True when the new nodes equal the matched ones (same ops, attributes, outside inputs)."""
        match = plan.match
        if all(plan.outputs[o] is match.values[o] for o in match.rule.outputs):
            return True
        # an alias of a graph output becomes an Identity at commit: count it as a new node
        implicit = [_NewNode("", "Identity", [plan.outputs[o]], {}, "", [])
                    for o in match.rule.outputs
                    if not isinstance(plan.outputs[o], _NewValue) and match.values[o].is_graph_output()
                    and plan.outputs[o] is not match.values[o]]
        new_nodes = plan.nodes + implicit
        if plan.initializers or len(new_nodes) != len(match.nodes):
            return False
        matched = set(match.nodes.values())

        def sig_old(n: ir.Node):
            ins = tuple("<inner>" if v is not None and v.producer() in matched else (id(v) if v is not None else None)
                        for v in n.inputs)
            attrs = tuple(sorted((k, repr(_py(attr_value(a)))) for k, a in n.attributes.items()))
            return (norm_domain(n.domain), n.op_type, ins, attrs)

        def sig_new(n: _NewNode):
            ins = tuple("<inner>" if isinstance(v, _NewValue) else (id(v) if v is not None else None)
                        for v in n.inputs)
            attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
            return (n.domain, n.op_type, ins, attrs)

        return sorted(map(repr, map(sig_old, matched))) == sorted(map(repr, map(sig_new, new_nodes)))

    def _validate(self, plan: Plan) -> None:
        known: dict[Any, tuple[ir.DataType | None, ir.Shape | None]] = {}
        for nv in plan.initializers:
            known[nv] = (nv.dtype, nv.shape)
        for nv in plan.io_inputs:
            known[nv] = (nv.dtype, nv.shape)

        def type_of(v: Any) -> tuple[ir.DataType | None, ir.Shape | None]:
            if isinstance(v, _NewValue):
                return known.get(v, (None, None))
            return (v.dtype, v.shape)

        uncertain: set[_NewValue] = set()   # types guessed (dtype of the first input), not inferred
        made = {o: nn for nn in plan.nodes for o in nn.outputs if o is not None}   # new value -> its node
        for nn in plan.nodes:
            if nn.domain == PLUGIN_DOMAIN and not self.float32_plugins and nn.inputs and \
                    nn.inputs[0] is not None and type_of(nn.inputs[0])[0] == ir.DataType.FLOAT:
                raise Float32Plugin(nn.op_type)   # the query's type is the kernels' T
            if nn.domain != "" or not self.validate:
                # no schema here: outputs follow the type hint, else the first input's dtype
                if nn.type_hint is not None:
                    how, refs = nn.type_hint
                    guesses = []
                    for ref in (refs if len(refs) > 1 else refs * len(nn.outputs)):
                        dtype, shape = type_of(ref)
                        guesses.append((dtype, shape if how == "like" else None))
                else:
                    first = next((v for v in nn.inputs if v is not None), None)
                    guesses = [(type_of(first)[0] if first is not None else None, None)] * len(nn.outputs)
                    uncertain.update(o for o in nn.outputs if o is not None)
                for out, guess in zip(nn.outputs, guesses):
                    if out is not None:
                        shape = None if guess[1] is None else ir.Shape(list(guess[1].dims))
                        known[out] = (guess[0], shape)
                        out.dtype, out.shape = guess[0], shape
                continue
            if any(v in uncertain for v in nn.inputs if isinstance(v, _NewValue)):
                uncertain.update(o for o in nn.outputs if o is not None)
            if nn.domain == "" and self.validate:
                in_types = [None if v is None else type_of(v) for v in nn.inputs]
                in_data = [_small_int_constant(v) for v in nn.inputs]
                key = self._cache_key(nn, in_types)
                if key is not None:
                    key = (*key, tuple(None if d is None else d.tobytes() for d in in_data))
                cached = self._checked.get(key) if key is not None else None
                if cached is None:
                    try:
                        cached = self._check_node(nn, in_types, in_data)
                    except RewriteRejected as exc:
                        cached = str(exc)
                    if key is not None:
                        self._checked[key] = cached
                if isinstance(cached, str):
                    raise RewriteRejected(cached)
                hints: list = [None] * len(nn.outputs)
                if nn.type_hint is not None:   # where ONNX inference says nothing (Attention's present)
                    how, refs = nn.type_hint
                    hints = [(type_of(r)[0], type_of(r)[1] if how == "like" else None)
                             for r in (refs if len(refs) > 1 else refs * len(nn.outputs))]
                for out, inferred, hint in zip(nn.outputs, cached, hints):
                    if out is None:
                        continue
                    if inferred is None or (inferred[1] is None and hint is not None and hint[1] is not None):
                        inferred = hint if hint is not None else inferred
                    if inferred is None:
                        continue
                    dtype, shape = inferred
                    shape = None if shape is None else ir.Shape(list(shape.dims))  # cached: copy
                    if nn.op_type == "Concat" and shape is not None:
                        shape = _concat_length(nn, shape, [type_of(v)[1] for v in nn.inputs])
                    elif nn.op_type in ("Flatten", "Reshape") and shape is not None and in_types[0] is not None:
                        target = None if nn.op_type == "Flatten" else _target_entries(nn.inputs[1], in_data[1], made, type_of)
                        shape = _view_dims(nn, shape, in_types[0][1], target)
                    elif nn.op_type == "Slice" and shape is not None and in_types[0] is not None:
                        has_axes = len(nn.inputs) > 3 and nn.inputs[3] is not None
                        if not has_axes or in_data[3] is not None:
                            starts = type_of(nn.inputs[1])[1] if len(nn.inputs) > 1 and nn.inputs[1] is not None else None
                            shape = _sliced_dims(shape, in_types[0][1], in_data[3] if has_axes else None,
                                                 None if starts is None else list(starts.dims))
                    elif nn.op_type == "Expand" and shape is not None and in_types[0] is not None:
                        target = _target_entries(nn.inputs[1], in_data[1], made, type_of)
                        shape = _expanded_dims(shape, in_types[0][1], target)
                    known[out] = (dtype, shape)
                    out.dtype, out.shape = dtype, shape
        # replaced values keep their type; a disagreeing inferred type is a wrong rewrite
        for var, new in plan.outputs.items():
            old = plan.match.values[var]
            ndtype, nshape = type_of(new)
            if var in plan.io_replaced:  # a new interface value, not a replacement: its type must be known
                if ndtype is None or new in uncertain:
                    raise RewriteRejected(f"graph_io output for {var}: dtype not proven (give the op a "
                                          "`: like(...)` type hint)")
                continue
            if self.validate and old.is_graph_output() and (
                    new in uncertain or (old.dtype is not None and ndtype is None)
                    or (old.shape is not None and nshape is None)):
                # a graph output's dtype and shape are the model's contract: they must be proven
                # kept (schema inference or a `: like(...)` hint), not assumed
                raise RewriteRejected(f"output {var} is a graph output and the replacement's dtype "
                                      "and rank are not proven to match it (no schema; give the op "
                                      "a `: like(...)` type hint)")
            if new in uncertain:
                continue  # a guessed type proves nothing either way; the original's type is kept
            if old.dtype is not None and ndtype is not None and ndtype != old.dtype:
                raise RewriteRejected(f"output {var}: replacement has dtype {ndtype.name}, original "
                                      f"{old.dtype.name}")
            if old.shape is not None and nshape is not None and len(old.shape) != len(nshape):
                raise RewriteRejected(f"output {var}: replacement has rank {len(nshape)}, original "
                                      f"{len(old.shape)}")
            if old.shape is not None and nshape is not None:
                for i, (a, b) in enumerate(zip(old.shape.dims, nshape.dims)):
                    if isinstance(a, int) and isinstance(b, int) and a != b:
                        raise RewriteRejected(f"output {var}: replacement dim {i} is {b}, original {a}")

    @staticmethod
    def _detach(nodes: list[ir.Node]) -> list[ir.Node]:
        """Drop the nodes' input references (cheaper than remove(safe=True)); return the producers
        of those inputs, which may have become dead."""
        inputs = [v for n in nodes for v in n.inputs if v is not None]
        for n in nodes:
            for i, v in enumerate(n.inputs):
                if v is not None:
                    n.replace_input_with(i, None)
        return _producers_of(inputs)

    @staticmethod
    def _cache_key(nn: _NewNode, in_types: list) -> tuple | None:
        """Identical new nodes (same op, attributes, input types) validate identically."""
        try:
            attrs = tuple(sorted((k, (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else
                                  repr(v)) for k, v in nn.attrs.items()))
            ins = tuple(None if t is None else (t[0], None if t[1] is None else tuple(
                d if isinstance(d, int) else getattr(d, "value", None) for d in t[1].dims)) for t in in_types)
        except Exception:  # an attribute we cannot key: validate without the cache
            return None
        outs = tuple(o is not None for o in nn.outputs)
        return (nn.op_type, attrs, ins, outs)

    def _check_node(self, nn: _NewNode, in_types: list, in_data: list | None = None) -> list:
        """Checker + type inference of one default-domain node: inferred (dtype, shape) per output.
        ``in_data``: small integer constants among the inputs (a Reshape target), so inference
        can size the outputs."""
        proto = self._node_proto(nn)
        try:
            schema = onnx.defs.get_schema(nn.op_type, self.opset or onnx.defs.onnx_opset_version(), "")
        except onnx.defs.SchemaError:
            raise RewriteRejected(f"{nn.op_type} does not exist at opset {self.opset}") from None
        ctx = onnx.checker.C.CheckerContext()
        ctx.ir_version = self.model.ir_version or onnx.IR_VERSION
        ctx.opset_imports = dict(self.model.opset_imports.items())
        try:
            onnx.checker.check_node(proto, ctx)
        except Exception as exc:  # ValidationError and friends: the rewrite is invalid
            raise RewriteRejected(f"{nn.op_type}: {str(exc).strip().splitlines()[0]}") from None
        input_types = {}
        for name, t in zip(proto.input, in_types):
            if t is None:
                continue
            tp = _type_proto(*t)
            if tp is not None:
                input_types[name] = tp
        opset_imports = [onnx.helper.make_opsetid(d, v) for d, v in self.model.opset_imports.items()]
        try:
            data = {name: onnx.numpy_helper.from_array(d, name)
                    for name, d in zip(proto.input, in_data or []) if d is not None and name}
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, proto, input_types, input_data=data or None, opset_imports=opset_imports,
                ir_version=self.model.ir_version or onnx.IR_VERSION)
        except Exception as exc:  # inference errors are a rejected rewrite, not a crash
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RewriteRejected(f"{nn.op_type}: type inference failed: {msg}") from None
        result: list = []
        for out in nn.outputs:
            if out is None or out.name not in inferred:
                result.append(None)
                continue
            t = inferred[out.name].tensor_type
            dtype = ir.DataType(t.elem_type) if t.elem_type else None
            shape = None
            if t.HasField("shape"):
                unknown_zero = nn.op_type in _ZERO_MEANS_UNKNOWN
                shape = ir.Shape([(d.dim_value if not (unknown_zero and d.dim_value == 0) else None)
                                  if d.HasField("dim_value") else (d.dim_param or None)
                                  for d in t.shape.dim])
            result.append((dtype, shape))
        return result

    @staticmethod
    def _node_proto(nn: _NewNode) -> onnx.NodeProto:
        ins = ["" if v is None else v.name for v in nn.inputs]
        outs = ["" if v is None else v.name for v in nn.outputs]
        while outs and outs[-1] == "":
            outs.pop()
        attrs = {}
        for k, v in nn.attrs.items():
            attrs[k] = onnx.numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
        try:
            return onnx.helper.make_node(nn.op_type, ins, outs, name=nn.name, domain=nn.domain, **attrs)
        except (TypeError, ValueError) as exc:
            raise RewriteRejected(f"{nn.op_type}: bad attribute: {exc}") from None

    # --- commit -----------------------------------------------------------------------------

    def commit(self, plan: Plan, graph: ir.Graph, index: dict[tuple[str, str], dict[ir.Node, None]]) -> None:
        rule = plan.match.rule
        match = plan.match
        anchor = match.anchor
        # graph outputs being replaced give up their name first (the new value takes it)
        for var in rule.outputs:
            old = match.values[var]
            if old.is_graph_output() and isinstance(plan.outputs[var], _NewValue):
                old.name = self.names.propose(f"{old.name}__replaced", set())
                self.names.commit([old.name])
        for nv in plan.io_inputs:
            nv.ir_value = _graph_io.make_input(graph, nv.name, nv.dtype, nv.shape, RewriteRejected)
            self.names.commit([nv.name])
        for nv in plan.initializers:
            v = ir.Value(name=nv.name, type=ir.TensorType(nv.dtype), shape=nv.shape,
                         const_value=ir.tensor(nv.initializer, name=nv.name))
            graph.register_initializer(v)
            nv.ir_value = v
        new_nodes: list[ir.Node] = []

        def real(v: Any) -> ir.Value | None:
            if isinstance(v, _NewValue):
                assert v.ir_value is not None
                return v.ir_value
            return v

        for nn in plan.nodes:
            assert nn.ir_attrs is not None  # converted by plan(), which made every node a commit sees
            node = ir.Node(nn.domain, nn.op_type, [real(v) for v in nn.inputs], nn.ir_attrs,
                           num_outputs=len(nn.outputs), name=nn.name, metadata_props={RULE_TAG: rule.name})
            for out, nv in zip(node.outputs, nn.outputs):
                if nv is None:
                    out.name = ""
                    continue
                out.name = nv.name
                nv.ir_value = out
                if nv.var in rule.outputs:
                    old = match.values[nv.var]
                    out.dtype = old.dtype if old.dtype is not None else nv.dtype
                    out.shape = old.shape if old.shape is not None else nv.shape
                else:
                    out.dtype, out.shape = nv.dtype, nv.shape
            new_nodes.append(node)
        # an alias of an existing value to a graph output needs an Identity to carry the name
        for var in rule.outputs:
            old, new = match.values[var], plan.outputs[var]
            if not isinstance(new, _NewValue) and old.is_graph_output() and new is not old:
                ident = ir.Node("", "Identity", [new], name=self.names.propose(f"{anchor.name}/{rule.name}", set()),
                                metadata_props={RULE_TAG: rule.name})
                self.names.commit([ident.name])
                keep = old.name
                old.name = self.names.propose(f"{keep}__replaced", set())
                self.names.commit([old.name])
                ident.outputs[0].name = keep
                ident.outputs[0].dtype, ident.outputs[0].shape = old.dtype, old.shape
                new_nodes.append(ident)
                plan.outputs[var] = ident.outputs[0]
        if new_nodes:
            graph.insert_before(anchor, new_nodes)
        for d in {nn.domain for nn in plan.nodes if nn.domain not in ("", "ai.onnx")}:
            if d not in self.model.opset_imports:
                self.model.opset_imports[d] = rule.domains.get(d, 1)
            if d not in graph.opset_imports and graph is self.model.graph:
                graph.opset_imports[d] = self.model.opset_imports[d]
        self.names.commit(plan.names)
        # a cropped output: the new value takes its Slice's graph-output slot, and the Slice goes
        crop_frontier = []
        for var, sl in plan.io_crops.items():
            out = sl.outputs[0]
            for i, g in enumerate(graph.outputs):
                if g is out:
                    graph.outputs[i] = real(plan.outputs[var])
            crop_frontier += self._detach([sl])
            graph.remove(sl, safe=False)
            index.get((norm_domain(sl.domain), sl.op_type), {}).pop(sl, None)
        # Shapes outside the match that read an intermediate read a kept value's dims instead
        move_reads(list(match.shape_reads))
        # redirect uses
        matched = set(match.nodes.values())
        for var in rule.outputs:
            old, new = match.values[var], real(plan.outputs[var])
            if new is old:
                continue
            if var != rule.outputs[0] and any(u.node not in matched for u in old.uses()):
                self.needs_sort.add(graph)  # outside consumers may sit before the anchor
            ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        # remove matched nodes that nothing outside the removable set uses any more
        removable = dict.fromkeys(match.node_list())
        changed = True
        while changed:
            changed = False
            for n in list(removable):
                for o in n.outputs:
                    if o.is_graph_output() or any(u.node not in removable for u in o.uses()):
                        del removable[n]
                        changed = True
                        break
        # then whatever only fed them (Shape/Slice/Concat cones of removed Reshapes...), so later
        # rules in this pass see the graph as dead-code elimination would leave it
        removed = list(removable)
        frontier = self._detach(removed) + crop_frontier
        if removed:
            graph.remove(removed, safe=False)
        while frontier:
            dead = []
            for n in frontier:
                if n.graph is graph and n not in dead and not any(
                        o.is_graph_output() or o.uses() for o in n.outputs):
                    dead.append(n)
            frontier = self._detach(dead)
            if dead:
                graph.remove(dead, safe=False)
                removed.extend(dead)
        for n in removed:
            bucket = index.get((norm_domain(n.domain), n.op_type))
            if bucket is not None:
                bucket.pop(n, None)
        for n in new_nodes:
            index.setdefault((norm_domain(n.domain), n.op_type), {})[n] = None


def _small_int_constant(v: Any) -> np.ndarray | None:
    """The value of a small integer constant input (new initializer or existing one), else None."""
    arr = None
    if isinstance(v, _NewValue) and v.initializer is not None:
        arr = v.initializer
    elif isinstance(v, ir.Value) and v.const_value is not None and v.const_value.size <= 64:
        try:
            arr = v.const_value.numpy()
        except Exception:  # an external or exotic tensor: no data for inference
            return None
    if arr is None or arr.dtype.kind not in "iu" or arr.size > 64:
        return None
    return np.asarray(arr)


def _producers_of(values) -> list[ir.Node]:
    return list(dict.fromkeys(v.producer() for v in values if v is not None and v.producer() is not None))


def build_index(graph: ir.Graph) -> dict[tuple[str, str], dict[ir.Node, None]]:
    """Nodes by (domain, op type), in graph order; kept current by ``Rewriter.commit``."""
    index: dict[tuple[str, str], dict[ir.Node, None]] = {}
    for node in graph:
        index.setdefault((norm_domain(node.domain), node.op_type), {})[node] = None
    return index


def candidates(rule: Rule, index: dict[tuple[str, str], dict[ir.Node, None]]) -> list[ir.Node]:
    keys = rule.anchor_keys
    if len(keys) == 1:
        return list(index.get(keys[0], ()))
    out: list[ir.Node] = []
    for k in keys:
        out.extend(index.get(k, ()))
    return out


class CanonicalLeftover(InternalError):
    """A canonical op no lowering took. At the fusion opset a rule-set bug; below it the lowering may
    be one gated on a newer opset, which OpsetOnDemandRewritePass answers with its upgraded trial."""

    def __init__(self, op_type: str, rule: str) -> None:
        super().__init__(f"canonical op {op_type} (made by rule {rule!r}) has no lowering for this target; "
                         "a rule set that makes canonical ops must lower or expand every one of them")
        self.op_type, self.rule = op_type, rule


class RewritePass(FusePass):
    """Apply a rule set by priority, to a fixed point. ``stats[rule] = fires``."""

    name = "rewrite"

    def __init__(self, rule_set: RuleSet | Iterable[Rule], *, validate: bool = True, max_rounds: int = 16,
                 local_check: bool = False, stages: Iterable[str] = STAGES, float32_plugins: bool = True):
        super().__init__()
        # False (the pipeline without --precision): a rewrite to a plugin op on float32 is refused
        # (Float32Plugin) and counted in ``plugin_notes``; the rules below it lower the match
        self.float32_plugins = float32_plugins
        self.plugin_notes: list[str] = []
        # a prefix of STAGES (explain runs the stages before a rule's own); the canonical-op guard
        # only holds once every stage ran
        self.stages = tuple(stages)
        self.rule_set = rule_set if isinstance(rule_set, RuleSet) else RuleSet(rule_set)
        self.validate = validate
        # verify=True: each planned rewrite also runs against the matched nodes (_local_check.py)
        self.local_check = None
        if local_check:
            from onnx_fuse.rewrite._local_check import LocalChecker

            self.local_check = LocalChecker()
        self.max_rounds = max_rounds
        self.rejected: list[tuple[str, str, str]] = []   # (rule, anchor, reason)
        self.stats_reason: str | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # The graph is one big web of reference cycles (nodes <-> values); a full cyclic-GC sweep
        # of it on every allocation threshold made large models superlinear. Nothing here creates
        # garbage cycles that must be freed mid-pass, so collect once afterwards instead.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._call(model)
        finally:
            if was_enabled:
                gc.enable()

    def _call(self, model: ir.Model) -> ir.passes.PassResult:
        rewriter = Rewriter(model, validate=self.validate, float32_plugins=self.float32_plugins)
        rules = [r for r in self.rule_set.ordered() if r.opset_ok(rewriter.opset)]
        modified = False
        self.rejected = []
        self._float32: dict[str, tuple[set, set]] = {}   # plugin op -> (anchors, rules) refused
        self.unsettled: list[str] = []
        self._io_done: set[str] = set()
        self._io_idle: set[str] = set()  # graph_io rules whose candidates had none of their structure
        self.operand_twins = 0   # nodes merged between the fuse and lower stages (not a rule's fire)
        # Stages run in order, each to its own fixed point: recognition into canonical ops must be
        # complete before lowering picks the target op, and the layout glue lowerings leave is
        # simplified last (it would otherwise break patterns of the earlier stages).
        for stage in self.stages:
            matchers = [(r, Matcher(r)) for r in rules if r.stage == stage]
            if not matchers:
                continue
            for graph in list(model.graphs()):
                modified |= self._run_graph(graph, matchers, rewriter)
                if stage == "fuse" and "lower" in self.stages:
                    # one exporter value recognized once per layer stays one value for the
                    # lowerings' cost decisions (rewrite/_operand_twins.py)
                    merged = merge_operand_twins(graph, CANONICAL_DOMAIN)
                    self.operand_twins += merged
                    modified |= bool(merged)
            self._explain_idle_io(model.graph, matchers)
        if self.stages == STAGES:
            self._refuse_canonical_leftovers(model)
        for graph in rewriter.needs_sort:
            graph.sort()
        reasons = list(self.unsettled)
        if self.rejected:
            by_rule: dict[str, int] = {}
            for r, _, _ in self.rejected:
                by_rule[r] = by_rule.get(r, 0) + 1
            first = self.rejected[0]
            reasons.append(f"{len(self.rejected)} rewrite(s) rejected by validation "
                           f"({', '.join(f'{k}: {v}' for k, v in sorted(by_rule.items()))}); first: "
                           f"{first[0]} at {first[1]!r}: {first[2]}")
        self.stats_reason = "; ".join(reasons) or None
        self.plugin_notes = [
            f"{len(anchors)} match{'es' if len(anchors) != 1 else ''} kept TensorRT's own ops instead of {op}, "
            f"whose kernels take fp16 / bf16, not float32 ({', '.join(sorted(names))}); --precision fp16 "
            "or bf16 lowers them to the plugin" for op, (anchors, names) in sorted(self._float32.items())]
        return ir.passes.PassResult(model, modified=modified)

    def _note_float32(self, exc: Float32Plugin, rule: Rule, anchor: ir.Node) -> None:
        anchors, names = self._float32.setdefault(exc.op_type, (set(), set()))
        anchors.add(anchor)
        names.add(rule.name)

    def _explain_idle_io(self, graph: ir.Graph, matchers: list[tuple[Rule, Matcher]]) -> None:
        """A graph_io rule that found nothing to rewrite (no candidate, or none with its structure)
        is silent unless its readers hook sees what it would have rewritten and says why not (paged
        KV asked for, past inputs there, no attention over them recognized)."""
        for rule, _ in matchers:
            io = rule.graph_io
            if io is None or io.readers is None or self.stats[rule.name] or (
                    rule.name in self._io_done and rule.name not in self._io_idle):
                continue
            hook = _graph_io._HOOKS.get(io.readers)
            why = hook.explain_none(graph) if hook is not None and hook.explain_none is not None else None
            if why:
                self.unsettled.append(f"{rule.name}: not rewritten: {why}")

    def _apply_atomic(self, graph: ir.Graph, rule: Rule, matcher: Matcher, rewriter: Rewriter,
                      index: dict, facts: GraphFacts) -> int:
        """A graph_io rule changes the interface once: it fires on every candidate of the main
        graph or on none, and says why not (``<rule>: not rewritten: <reason>`` in the report)."""
        from onnx_fuse.rewrite._result import MatchStatus, Tracer

        cands = [n for n in candidates(rule, index) if n.graph is graph]
        if not cands:
            return 0
        io = rule.graph_io
        self._io_done.add(rule.name)
        hook = None
        if io.readers is not None:
            hook = _graph_io._HOOKS.get(io.readers)
            if hook is None:
                self.unsettled.append(f"{rule.name}: not rewritten: readers hook {io.readers!r} is not "
                                      "registered (its target module was not loaded)")
                return 0
        plans: list[Plan] = []
        retired: list[ir.Value] = []
        claimed: set[ir.Node] = set()
        try:
            for node in cands:
                tracer = Tracer()
                match = matcher.match(node, facts, tracer)
                if match is None:
                    r = tracer.result(rule.name, node.name or node.op_type)
                    if r.status == MatchStatus.NO_MATCH:
                        continue  # not the rule's structure: not a candidate of the interface change
                    raise RewriteRejected(f"{node.op_type} {node.name!r}: {r.reason}")
                try:
                    plan = rewriter.plan(match, facts)
                except NoProgress:
                    raise RewriteRejected(f"{node.op_type} {node.name!r}: no progress") from None
                except Float32Plugin as exc:   # the interface stays: counted, not an anomaly
                    for other in cands:
                        if other is node or matcher.match(other, facts) is not None:
                            self._note_float32(exc, rule, other)
                    return 0
                if self.local_check is not None and (why := self.local_check(plan, rewriter.model)):
                    raise RewriteRejected(f"{node.op_type} {node.name!r}: numeric check: {why}")
                if any(n in claimed for n in match.nodes.values()):
                    raise RewriteRejected(f"{node.op_type} {node.name!r}: its match overlaps another one")
                claimed.update(match.nodes.values())
                plans.append(plan)
                retired += [v for v in _graph_io.retiring(io, match, RewriteRejected) if v not in retired]
            matched = {n for p in plans for n in p.match.nodes.values()}
            why = hook.check(graph, retired, matched) if hook is not None else \
                _graph_io.unread_check(retired, matched)
            if why:
                raise RewriteRejected(why)
        except RewriteRejected as exc:
            self.unsettled.append(f"{rule.name}: not rewritten: {exc}")
            return 0
        if not plans:
            self._io_idle.add(rule.name)  # nothing had the rule's structure: _explain_idle_io
            return 0
        read_before = [v for v in graph.inputs if v.uses()]
        new_inputs: dict[str, ir.Value] = {}
        for plan in plans:
            # planned again right before its commit: an earlier commit may have replaced a value
            # this match reads (one match's output feeding the next)
            node = plan.match.anchor
            match = matcher.match(node, facts) if node.graph is graph else None
            try:
                plan = rewriter.plan(match, facts) if match is not None else None
            except (RewriteRejected, NoProgress):
                plan = None
            if plan is None:
                raise InternalError(f"rule {rule.name!r}: {node.op_type} {node.name!r} matched before the other "
                                    "matches of its graph_io rule were committed, and no longer does")
            rewriter.commit(plan, graph, index)
            self.stats[rule.name] += 1
            new_inputs.update({nv.name: nv.ir_value for nv in plan.io_inputs})
        _graph_io.finish(graph, rule.name, retired, read_before, new_inputs, hook)
        return len(plans)

    def _refuse_canonical_leftovers(self, model: ir.Model) -> None:
        """Canonical ops are internal: every one the fuse stage made must have been lowered (or
        expanded back) by now. One left over is a rule-set bug, never a model to save."""
        for graph in model.graphs():
            for node in graph:
                if norm_domain(node.domain) == CANONICAL_DOMAIN:
                    rule = node.metadata_props.get(RULE_TAG, "?")
                    raise CanonicalLeftover(node.op_type, rule)

    def _run_graph(self, graph: ir.Graph, matchers: list[tuple[Rule, Matcher]], rewriter: Rewriter) -> bool:
        index = build_index(graph)
        facts = GraphFacts(graph, rewriter.opset)
        modified = False
        rejected_at: set[tuple[str, ir.Node]] = set()
        for _ in range(self.max_rounds):
            fired = 0
            last_round: set[str] = set()
            for rule, matcher in matchers:
                if rule.graph_io is not None:
                    if rule.name not in self._io_done and graph is rewriter.model.graph:
                        n = self._apply_atomic(graph, rule, matcher, rewriter, index, facts)
                        fired += n
                        if n:
                            last_round.add(rule.name)
                    continue
                for node in candidates(rule, index):
                    if node.graph is not graph or (rule.name, node) in rejected_at:
                        continue
                    match = matcher.match(node, facts)
                    if match is None:
                        continue
                    try:
                        plan = rewriter.plan(match, facts)
                    except NoProgress:
                        rejected_at.add((rule.name, node))
                        continue
                    except Float32Plugin as exc:
                        rejected_at.add((rule.name, node))
                        self._note_float32(exc, rule, node)
                        continue
                    except RewriteRejected as exc:
                        rejected_at.add((rule.name, node))
                        self.rejected.append((rule.name, node.name or "", str(exc)))
                        continue
                    if self.local_check is not None and (why := self.local_check(plan, rewriter.model)):
                        rejected_at.add((rule.name, node))
                        self.rejected.append((rule.name, node.name or "", f"numeric check: {why}"))
                        continue
                    rewriter.commit(plan, graph, index)
                    self.stats[rule.name] += 1
                    fired += 1
                    last_round.add(rule.name)
            if not fired:
                break
            modified = True
        else:
            self.unsettled.append(f"graph {graph.name!r}: still firing after {self.max_rounds} rounds "
                                  f"(rules undoing each other?): {', '.join(sorted(last_round))}")
        return modified
