"""The matcher: from a candidate anchor node, walk backwards along producers binding the pattern.

Matching is a depth-first search over *goals* (pattern name, graph value) with backtracking over
commutative input orders, alternatives, and optional nodes (present first, then absent). Binding
is undone through a trail, so a failed branch leaves no trace. Constraints from `where` on a name
are checked the moment it binds, so a wrong constant prunes early. After a full structural match:
intermediates must not escape, then the `check` expressions run.

Cost per anchor is bounded by the pattern (a few dozen nodes), so a pass is linear in the number
of candidate anchors. ``GraphFacts`` caches constant values and schema attribute defaults.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.rewrite import _expr
from onnx_fuse.rewrite._constants import const_array, const_tensor
from onnx_fuse.rewrite._pattern import OpPattern
from onnx_fuse.rewrite._result import (STAGE_CHECK, STAGE_CONSTRAINT, STAGE_ESCAPE, STAGE_STRUCTURE,
                                       Tracer, describe_node, describe_value)
from onnx_fuse.rewrite._shape_reads import ShapeRead, reread
from onnx_fuse.rewrite._rule import (CANONICAL_DOMAIN, COMMUTATIVE, PROMOTED_ATTRIBUTES, Rule,
                                     ValueConstraint)


def _as_stored(want, dtype: np.dtype):
    """The rule's number as a constant of ``dtype`` holds it: a half-precision model stores
    0.044715 as 0.04471 (float16, 0.04468 in bfloat16), an error beyond the rule's float32-sized
    tolerance."""
    if _expr.is_float_dtype(dtype) and dtype.itemsize < 4:
        return np.asarray(want, dtype=np.float64).astype(dtype).astype(np.float64)
    return want


_ORDERS = [[list(range(n))] for n in range(64)]
_BOTH_ORDERS = [[0, 1], [1, 0]]


def norm_domain(d: str) -> str:
    return "" if d == "ai.onnx" else d


@functools.lru_cache(maxsize=4096)
def _schema_default(op_type: str, opset: int, name: str) -> Any:
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    return _plain(onnx.helper.get_attribute_value(attr.default_value))


_ANY = object()
# Attributes of the canonical ops (docs/ops.md "Canonical ops"): their defaults, or _ANY where any
# value is fine for a pattern that does not name it (informative, or always named where it matters).
_ATTENTION_ATTRS = {"scale": _ANY, "q_num_heads": _ANY, "kv_num_heads": _ANY, "softcap": 0.0, "nan_rows_zero": 0}
CANONICAL_ATTRS: dict[str, dict[str, Any]] = {
    "Attention": _ATTENTION_ATTRS, "AttentionKV": _ATTENTION_ATTRS, "Gelu": {"approximate": "none"},
}


# Reshape's allowzero changes results only where a shape entry is 0 at run time, i.e. for empty
# tensors (dynamo writes allowzero=1 on shapes computed from real dims): patterns may ignore it.
_IGNORABLE = {("", "Reshape"): {"allowzero"}}


@functools.lru_cache(maxsize=8192)
def attr_default(domain: str, op_type: str, opset: int | None, name: str) -> Any:
    """The default of attribute ``name`` of ``domain::op_type``, or ``_ANY`` where unknown: ops
    without a schema here (contrib, plugin ops), attributes without a default (required)."""
    if name in _IGNORABLE.get((domain, op_type), ()):
        return _ANY
    if domain == "":
        if opset is None:
            return _ANY
        try:
            schema = onnx.defs.get_schema(op_type, opset, "")
        except onnx.defs.SchemaError:
            return _ANY
        if name not in schema.attributes:
            return _ANY
        default = _schema_default(op_type, opset, name)
        return _ANY if default is None else default
    if domain == CANONICAL_DOMAIN:
        return CANONICAL_ATTRS.get(op_type, {}).get(name, _ANY)
    return _ANY


def _plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


_AT = ir.AttributeType


def attr_value(attr: ir.Attr) -> Any:
    t = attr.type
    v = attr.value
    if t is _AT.INT or t is _AT.FLOAT:
        return v
    if t is _AT.TENSOR:
        return v.numpy()
    if t in (_AT.GRAPH, _AT.GRAPHS):
        return v
    return _plain(v)


def values_equal(a: Any, b: Any, rtol: float = 1e-6) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            return bool(np.allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                                    rtol=rtol, atol=0.0))
        except (ValueError, TypeError):
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y, rtol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return abs(a - b) <= rtol * max(abs(a), abs(b)) or a == b
        return False
    return a == b


class GraphFacts:
    """Per-pass facts about a graph: constants (cached) and the default-domain opset."""

    def __init__(self, graph: ir.Graph, opset: int | None):
        self.graph = graph
        self.opset = opset
        self._consts: dict[ir.Value, np.ndarray | None] = {}
        # (id(constraint), value) -> failure reason or None; constraints without shape symbols only
        self.constraint_cache: dict[tuple[int, ir.Value], str | None] = {}

    const_tensor = staticmethod(const_tensor)

    def constant(self, v: ir.Value) -> np.ndarray | None:
        if v not in self._consts:
            self._consts[v] = const_array(v)
        return self._consts[v]

    def forget(self, v: ir.Value) -> None:
        self._consts.pop(v, None)


@dataclasses.dataclass
class Match:
    """A successful match: bindings and the matched nodes (in pattern statement order)."""

    rule: Rule
    anchor: ir.Node
    values: dict[str, ir.Value]
    attrs: dict[str, Any]
    nodes: dict[int, ir.Node]
    #: Shape nodes outside the match that read an intermediate, and where they read instead
    shape_reads: tuple[ShapeRead, ...] = ()

    def node_list(self) -> list[ir.Node]:
        return [self.nodes[i] for i in sorted(self.nodes)]


class _ExprContext:
    """What expression functions may ask about the graph during checks and rewrites."""

    def __init__(self, facts: GraphFacts, values: dict, attrs: dict, matched: Any):
        self.facts = facts
        self.values = values
        self.attrs = attrs
        self.matched = matched
        # a rewrite's nodes planned so far and the graph (net_nodes counts them); None in checks
        self.planned: list | None = None
        self.graph: ir.Graph | None = None

    def constant(self, v: ir.Value) -> np.ndarray | None:
        return self.facts.constant(v)

    def is_bound(self, name: str) -> bool:
        return name in self.values or name in self.attrs

    def consumed(self, v: ir.Value) -> bool:
        if v.is_graph_output():
            return True
        return any(u.node not in self.matched for u in v.uses())

    def data_readers(self, v: ir.Value) -> int:
        """Readers of v's values outside the match: consumers other than Shape / Size (which read
        only its dims, and which shape CSE re-points), plus one for a graph output."""
        return int(v.is_graph_output()) + sum(u.node not in self.matched and u.node.op_type not in ("Shape", "Size")
                                              for u in v.uses())


class Matcher:
    """Matches one rule at candidate anchor nodes."""

    def __init__(self, rule: Rule):
        self.rule = rule
        # per alternative: (pattern inputs, promoted input slots, commutative, highest named output)
        self._alt_info: dict[int, tuple[int, frozenset[int], bool, int]] = {}
        self._visit: dict[int, list[int]] = {}
        self._visit_traced: dict[int, list[int]] = {}
        for stmt in rule.match:
            max_out = max(j for j, o in enumerate(stmt.outputs) if o is not None)
            for alt in stmt.alternatives:
                n_pat = len(alt.inputs)
                slots = frozenset(PROMOTED_ATTRIBUTES.get(alt.op_type, {}).values()) if alt.domain == "" else frozenset()
                comm = (alt.op_type in COMMUTATIVE and alt.domain == "" and n_pat == 2 and not alt.variadic
                        and alt.inputs[0] != alt.inputs[1])
                # inputs to visit: constrained leaves first (cheap, prune early), then the rest;
                # pushed in reverse because goals are a stack
                prio = sorted(range(n_pat), key=lambda k, a=alt: (
                    0 if a.inputs[k] in rule.where and a.inputs[k] not in rule.producers else
                    (1 if a.inputs[k] not in rule.producers else 2), k))
                self._alt_info[id(alt)] = (n_pat, slots, comm, max_out)
                self._visit[id(alt)] = [k for k in reversed(prio) if alt.inputs[k] is not None]
                # with a tracer: plain input order, so the furthest failure is the deepest walk
                self._visit_traced[id(alt)] = [k for k in range(n_pat - 1, -1, -1) if alt.inputs[k] is not None]
        self.stmts = rule.match
        self.producers = rule.producers
        self.where = rule.where
        self.escape_ok = frozenset(n for n, c in rule.where.items() if c.escape)
        # Prefilter of the anchor: per alternative of the anchor statement and per input, the op
        # keys its producer must have (None: anything). Cheaper than starting the search.
        self._prefilter: list[tuple[tuple[str, str], list[frozenset | None], bool]] = []
        for alt in rule.anchor.alternatives:
            need: list[frozenset | None] = []
            for name in alt.inputs:
                prod = rule.producers.get(name) if name else None
                st = rule.match[prod[0]] if prod else None
                if st is None or st.optional:
                    need.append(None)
                else:
                    need.append(frozenset(a.key for a in st.alternatives))
            self._prefilter.append((alt.key, need, self._alt_info[id(alt)][2]))

    def quick_reject(self, anchor: ir.Node) -> bool:
        """True if no anchor alternative can match: a needed input producer has the wrong op."""
        key = (norm_domain(anchor.domain), anchor.op_type)
        inputs = anchor.inputs
        for akey, need, commutative in self._prefilter:
            if akey != key:
                continue
            if self._inputs_fit(inputs, need, (0, 1) if len(need) == 2 else None):
                return False
            if commutative and len(inputs) == 2 and self._inputs_fit(inputs, need, (1, 0)):
                return False
        return True

    @staticmethod
    def _inputs_fit(inputs, need, order) -> bool:
        for k, keys in enumerate(need):
            if keys is None:
                continue
            i = order[k] if order else k
            if i >= len(inputs) or inputs[i] is None:
                return False
            prod = inputs[i].producer()
            if prod is None or (norm_domain(prod.domain), prod.op_type) not in keys:
                return False
        return True

    # --- entry point ------------------------------------------------------------------------

    def match(self, anchor: ir.Node, facts: GraphFacts, tracer: Tracer | None = None) -> Match | None:
        rule = self.rule
        anchor_var = rule.outputs[0]
        si, oi = self.producers[anchor_var]
        if oi >= len(anchor.outputs):
            if tracer:
                tracer.record(0, STAGE_STRUCTURE, f"anchor has {len(anchor.outputs)} outputs",
                              self.stmts[si].source, describe_node(anchor), [])
            return None
        if tracer is None and self.quick_reject(anchor):
            return None
        self.facts = facts
        self.tracer = tracer
        self.values: dict[str, ir.Value] = {}
        self.attrs: dict[str, Any] = {}
        self.nodes: dict[int, ir.Node] = {}
        self.used: dict[ir.Node, int] = {}
        self.symbols: dict[str, Any] = {}
        self.trail: list[tuple[dict, Any]] = []
        self.result: Match | None = None
        self.anchor = anchor
        self._solve((anchor_var, anchor.outputs[oi], None))
        result = self.result
        self.facts = None  # type: ignore[assignment]
        self.values = self.attrs = self.symbols = {}  # type: ignore[assignment]
        self.nodes, self.used, self.trail = {}, {}, []
        return result

    # --- binding with undo ------------------------------------------------------------------

    def _set(self, d: dict, key: Any, value: Any) -> None:
        self.trail.append((d, key))
        d[key] = value

    def _undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            d, key = trail.pop()
            del d[key]

    def _bind(self, var: str, gv: ir.Value, goals) -> bool:
        """``var`` bound to ``gv``, then the remaining ``goals`` solved; the binding undone when that fails."""
        mark = len(self.trail)
        self._set(self.values, var, gv)
        if self._check_value(var, gv) and self._solve(goals):
            return True
        self._undo(mark)
        return False

    def _fail(self, stage: int, reason: str | Callable[[], str], step: str, culprit: Any = None) -> bool:
        if self.tracer is not None:
            if callable(reason):
                reason = reason()
            if isinstance(culprit, ir.Node):
                culprit = describe_node(culprit)
            elif isinstance(culprit, ir.Value):
                culprit = describe_value(culprit)
            matched = [(self.stmts[i].source, self.nodes[i].name or f"<unnamed {self.nodes[i].op_type}>") for i in sorted(self.nodes)]
            self.tracer.record(len(self.nodes), stage, reason, step, culprit or "", matched)
        return False

    # --- search -----------------------------------------------------------------------------

    def _solve(self, goals) -> bool:
        if goals is None:
            return self._finish()
        var, gv, rest = goals
        if var in self.values:
            if self.values[var] is gv:
                return self._solve(rest)
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, lambda: f"{var!r} is bound to {self.values[var].name!r} but "
                              f"this input is {gv.name if gv is not None else '<missing>'!r}",
                              f"{var} used twice", gv)
        prod = self.producers.get(var)
        if prod is None:  # a leaf
            if gv is None:
                return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"input {var!r} is missing on the node", var)
            return self._bind(var, gv, rest)
        si, oi = prod
        stmt = self.stmts[si]
        if gv is None:
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"{var!r} would be a missing input", stmt.source)
        if si in self.nodes:  # another output of this statement already matched its node
            if gv.producer() is self.nodes[si] and gv.index() == oi:
                return self._bind(var, gv, rest)
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"{var!r} is not output {oi} of the node matched for "
                              f"this statement", stmt.source, gv)
        node = gv.producer()
        for alt in stmt.alternatives:
            if node is not None and self._try_node(var, gv, node, si, oi, alt, rest):
                return True
            if alt.optional:
                # absent: the statement's output *is* its pass-through input
                if self._bind(var, gv, (alt.passthrough, gv, rest)):
                    return True
        if node is None:
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"{var!r} has no producer (it is a graph input or "
                              f"initializer) but the pattern needs {stmt.source!r}", stmt.source, gv)
        return False

    def _try_node(self, var: str, gv: ir.Value, node: ir.Node, si: int, oi: int, alt: OpPattern,
                  rest) -> bool:
        stmt = self.stmts[si]
        step = stmt.source
        if node.op_type != alt.op_type or (node.domain != alt.domain and norm_domain(node.domain) != alt.domain):
            if self.tracer is None:
                return False
            dom = f"{alt.domain}::" if alt.domain else ""
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, lambda: f"expected {dom}{alt.op_type}, found "
                              f"{node.domain + '::' if node.domain else ''}{node.op_type}", step, node)
        if gv.index() != oi:
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"value is output {gv.index()} of the node, pattern "
                              f"wants output {oi}", step, gv)
        if node in self.used:
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, "node already matched by another pattern statement", step, node)
        n_pat, slots, commutative, max_out = self._alt_info[id(alt)]
        if max_out >= len(node.outputs):
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"node has only {len(node.outputs)} outputs", step, node)
        inputs = node.inputs
        real = len(inputs)
        while real and inputs[real - 1] is None:
            real -= 1
        if slots and real > n_pat:
            real = n_pat + sum(1 for k in range(n_pat, real) if inputs[k] is not None and k not in slots)
        if real != n_pat and (real < n_pat or not alt.variadic):
            return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"node has {real} inputs, pattern has {n_pat}"
                              f"{' or more' if alt.variadic else ''}", step, node)
        for k in alt.absent:   # `None`: an omitted input only (`_` takes any)
            if k < len(inputs) and inputs[k] is not None:
                return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"input {k} is present, pattern wants "
                                                              "it absent (None)", step, node)
        mark = len(self.trail)
        # attributes
        if node.attributes:
            why = self._unnamed_attr_off_default(node, alt)
            if why:
                return self.tracer is not None and self._fail(STAGE_STRUCTURE, why, step, node)
        for ap in alt.attrs.values():
            if ap.wildcard:
                continue
            ok, value, why = self._node_attr(node, alt, ap.name)
            if not ok:
                self._undo(mark)
                return self.tracer is not None and self._fail(STAGE_STRUCTURE, why, step, node)
            if ap.capture is not None:
                if ap.capture in self.attrs:
                    if not values_equal(self.attrs[ap.capture], value):
                        self._undo(mark)
                        return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"{ap.name}={value!r} differs from "
                                          f"{ap.capture}={self.attrs[ap.capture]!r} bound earlier", step, node)
                else:
                    self._set(self.attrs, ap.capture, value)
            elif not values_equal(value, ap.literal):
                self._undo(mark)
                return self.tracer is not None and self._fail(STAGE_STRUCTURE, f"attribute {ap.name}={value!r}, pattern wants "
                                  f"{ap.literal!r}", step, node)
        trail = self.trail
        self.nodes[si] = node
        self.used[node] = si
        self.values[var] = gv
        trail.append((self.nodes, si))
        trail.append((self.used, node))
        trail.append((self.values, var))
        if var in self.where and not self._check_value(var, gv):
            self._undo(mark)
            return False
        orders = _ORDERS[n_pat] if not (commutative and inputs[0] is not inputs[1]) else _BOTH_ORDERS
        for order in orders:
            goals = rest
            if max_out:
                outs = node.outputs
                for j in range(len(stmt.outputs) - 1, -1, -1):
                    name = stmt.outputs[j]
                    if name is not None and j != oi:
                        goals = (name, outs[j], goals)
            pins = alt.inputs
            for k in (self._visit if self.tracer is None else self._visit_traced)[id(alt)]:
                goals = (pins[k], inputs[order[k]], goals)
            if self._solve(goals):
                return True
        self._undo(mark)
        return False

    def _unnamed_attr_off_default(self, node: ir.Node, alt: OpPattern) -> str:
        """Why ``node`` must not match: an attribute the pattern does not name is set away from
        its default (a rewrite that ignores it would silently drop it), or ""."""
        for name, attr in node.attributes.items():
            if name in alt.attrs:
                continue
            default = attr_default(alt.domain, alt.op_type, self.facts.opset, name)
            if default is _ANY:
                continue
            value = attr_value(attr)
            if not values_equal(value, default):
                return (f"attribute {name}={value!r} is not named by the pattern and is not at its "
                        f"default {default!r} (name it, or write {name}=_ for any value)")
        return ""

    def _node_attr(self, node: ir.Node, alt: OpPattern, name: str) -> tuple[bool, Any, str]:
        attr = node.attributes.get(name)
        if attr is not None:
            return True, attr_value(attr), ""
        promoted = PROMOTED_ATTRIBUTES.get(alt.op_type, {}) if alt.domain == "" else {}
        if name in promoted:
            idx = promoted[name]
            if idx < len(node.inputs) and node.inputs[idx] is not None:
                arr = self.facts.constant(node.inputs[idx])
                if arr is None:
                    return False, None, f"input {idx} ({name}) is not a constant"
                return True, _plain(arr.tolist()), ""
        if alt.domain == "" and self.facts.opset is not None:
            default = _schema_default(alt.op_type, self.facts.opset, name)
            if default is not None:
                return True, default, ""
        return True, None, ""

    # --- constraints --------------------------------------------------------------------------

    def _check_value(self, var: str, gv: ir.Value) -> bool:
        c = self.where.get(var)
        if c is None:
            return True
        if c.shape is None:  # no symbols: the answer depends on the value alone, cache it
            key = (id(c), gv)
            cache = self.facts.constraint_cache
            if key in cache:
                why = cache[key]
            else:
                why = cache[key] = self._constraint_failure(c, gv)
        else:
            why = self._constraint_failure(c, gv)
        if why is None:
            return True
        return self.tracer is not None and self._fail(STAGE_CONSTRAINT, why, f"where {var}", gv)

    def _constraint_failure(self, c: ValueConstraint, gv: ir.Value) -> str | None:
        if c.dtypes is not None:
            if gv.dtype is None:
                return f"{c.name}: dtype unknown, needs one of {list(c.dtypes)}"
            name = _expr.dtype_name(gv.dtype)
            if name not in c.dtypes:
                return f"{c.name}: dtype {name}, needs one of {list(c.dtypes)}"
        if c.rank is not None:
            if gv.shape is None:
                return f"{c.name}: rank unknown"
            r = len(gv.shape)
            if isinstance(c.rank, frozenset):
                if r not in c.rank:
                    return f"{c.name}: rank {r}, needs {sorted(c.rank)}"
            else:
                lo, hi = c.rank
                if (lo is not None and r < lo) or (hi is not None and r > hi):
                    return f"{c.name}: rank {r}, needs between {lo} and {hi}"
        if c.shape is not None:
            if gv.shape is None:
                return f"{c.name}: shape unknown"
            if len(gv.shape) != len(c.shape):
                return f"{c.name}: rank {len(gv.shape)}, shape pattern has {len(c.shape)} dims"
            for i, (want, have) in enumerate(zip(c.shape, gv.shape.dims)):
                have_v = have if isinstance(have, int) else getattr(have, "value", None)
                if want == "_":
                    continue
                if isinstance(want, int):
                    if have_v != want:
                        return f"{c.name}: dim {i} is {have_v}, needs {want}"
                    continue
                if have_v is None:
                    return f"{c.name}: dim {i} is unknown, needs symbol {want}"
                if want in self.symbols:
                    if self.symbols[want] != have_v:
                        return f"{c.name}: dim {i} is {have_v}, but {want} = {self.symbols[want]}"
                else:
                    self._set(self.symbols, want, have_v)
        if c.const is not None or c.scalar is not None or c.value is not None:
            is_const = self.facts.const_tensor(gv) is not None
            if c.const is False and is_const:
                return f"{c.name}: must not be a constant"
            if (c.const or c.scalar is not None or c.value is not None) and not is_const:
                return f"{c.name}: not a constant"
            if c.scalar is not None or c.value is not None:
                arr = self.facts.constant(gv)
                if arr is None:
                    return f"{c.name}: constant too large or unreadable"
                if not _expr.is_numeric_dtype(arr.dtype):
                    return f"{c.name}: constant of dtype {arr.dtype} is not numeric"
                if c.scalar is not None and arr.size == 1:  # fast path: the common scalar constant
                    got = float(arr.reshape(-1)[0])
                    want = float(_as_stored(c.scalar, arr.dtype))
                    if abs(got - want) <= c.atol + c.rtol * abs(want):
                        return None
                    return f"{c.name}: constant {[got]} != {c.scalar} (rtol={c.rtol}, atol={c.atol})"
                want = _as_stored(c.scalar if c.scalar is not None else np.asarray(c.value, dtype=np.float64),
                                  arr.dtype)
                a = arr.astype(np.float64)
                try:
                    ok = a.size > 0 and bool(np.allclose(a, np.broadcast_to(want, np.broadcast_shapes(
                        a.shape, np.shape(want))), rtol=c.rtol, atol=c.atol))
                    if ok and c.value is not None and np.broadcast_shapes(a.shape, np.shape(want)) != a.shape:
                        ok = False  # the constant would broadcast the data to a bigger shape
                except ValueError:
                    ok = False
                if not ok:
                    shown = a.reshape(-1)[:4].tolist()
                    return f"{c.name}: constant {shown}{'...' if a.size > 4 else ''} != {want} " \
                           f"(rtol={c.rtol}, atol={c.atol})"
        return None

    # --- after a full structural match -------------------------------------------------------

    def _finish(self) -> bool:
        rule = self.rule
        outs = {self.values[o] for o in rule.outputs if o in self.values}
        allowed = {self.values[n] for n in self.escape_ok if n in self.values}
        reads: list[ShapeRead] = []   # Shapes of intermediates, moved at commit (rewrite/_shape_reads.py)
        for node in self.used:
            for o in node.outputs:
                if o in outs or o in allowed:
                    continue
                if o.is_graph_output():
                    return self.tracer is not None and self._fail(STAGE_ESCAPE, f"intermediate {o.name!r} is a graph output",
                                      "intermediates must not escape", o)
                for use in o.uses():
                    if use.node not in self.used and (got := reread(o, use.node, self.used, self.facts.opset)):
                        reads.append(got)
                    elif use.node not in self.used:
                        return self.tracer is not None and self._fail(STAGE_ESCAPE, lambda: f"intermediate {o.name!r} is also "
                                          f"used by {describe_node(use.node)}", "intermediates must not escape",
                                          use.node)
        if rule.checks:
            env = {**self.values, **self.attrs}
            ctx = _ExprContext(self.facts, self.values, self.attrs, self.used)
            for chk in rule.checks:
                try:
                    ok = chk.expr.evaluate(env, ctx)
                    if isinstance(ok, np.ndarray):
                        ok = bool(np.all(ok))
                    reason = chk.message
                except _expr.EvalFailure as exc:
                    ok, reason = False, f"{chk.message} ({exc})"
                if not ok:
                    culprit = next((self.values[n] for n in sorted(chk.expr.names) if n in self.values), None)
                    return self.tracer is not None and self._fail(STAGE_CHECK, reason, f"check {chk.expr.text}", culprit)
        # a listed output produced only on an alternative this match did not take (docs/rules.md,
        # "Outputs of the pattern") is not part of it: the match carries the rule without it
        bound = [o for o in rule.outputs if o in self.values]
        if len(bound) != len(rule.outputs):
            rule = dataclasses.replace(rule, outputs=bound)
        self.result = Match(rule, self.anchor, dict(self.values), dict(self.attrs), dict(self.nodes),
                            tuple(reads))
        return True
