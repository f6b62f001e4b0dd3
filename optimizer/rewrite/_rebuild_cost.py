"""What rebuilding a value costs the graph in nodes, computed (rule function ``net_nodes``).

A lowering may rebuild an export's mask from its inputs (``cm``) instead of keeping it (``mask``,
read through the glue ``keep`` the rewrite builds otherwise). Whether that pays used to be a count
written by hand, ``freed_ops(mask) > N`` with N the rebuild's size; it was wrong wherever the
rebuild's nodes are in the graph already (cse merges them: the past-length reads Whisper keeps for
its positions) and went stale when an exporter moved one node into or out of the mask's cone.

``net_nodes(new, old, keep)`` counts instead, on the nodes the rewrite has planned so far:

- added(x): the planned nodes under x that no live node of the graph computes already, by node
  cse's key (op, attributes, inputs; constants by value; commutative inputs in either order) and
  by shape-cse's (an int value holding the same symbolic dims: ``Shape(past.0)[2]`` and
  ``Shape(past.1)[2]`` are one value), each key once (cse merges the rewrite's own repeats);
- freed: the nodes that die with ``old`` (``freed_ops``'s cone) less those the rebuild keeps
  alive (a node it reads, or one of its twins, and what that reads in the cone);

and gives added(new) - freed - added(keep): below 0 the rebuild makes the graph smaller. A planned
Expand of a graph value to the shape it has (the broadcast to [., ., S, T] of a mask that is that
shape) adds nothing, nor does its target: identity elimination drops them. A layer
that rebuilds after another did finds the first one's nodes (cost 0), so the layers of one graph
decide alike; so what dies is counted as it will once they all have: with the glue by which other
layers of the anchor's op read ``old`` (sibling_readers: Optimum's first layer's mask, which the next
layers' masks are computed from). Nodes a later lowering adds to either side are not seen (attention-kv-trt hands its
mask to attention-trt, which broadcasts a mask smaller than [B, ., S, T]).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

_SHAPE_OPS = frozenset(("Shape", "Gather", "Slice", "Add", "Sub", "Cast", "Identity", "Squeeze", "Unsqueeze",
                        "Concat", "Reshape", "Where"))


def dead_cone(v: ir.Value, limit: int = 512, glue: set[ir.Node] = frozenset(),
              anchors: set[ir.Node] = frozenset()) -> set[ir.Node]:
    """The nodes that die with ``v`` once its readers stop reading it (freed_ops counts them): its
    producer and, transitively, every node whose outputs only those nodes read (no graph output);
    with ``glue`` / ``anchors`` (sibling_readers), once the other layers stop reading it too (the glue
    dies as well)."""
    node = v.producer()
    if node is None or v.is_graph_output():
        return set()
    dead = {node} | set(glue)
    frontier = [node, *glue]
    while frontier and len(dead) < limit:
        nxt = []
        for n in frontier:
            for i in n.inputs:
                p = i.producer() if i is not None else None
                if p is None or p in dead:
                    continue
                if all(not o.is_graph_output() and all(u.node in dead or u.node in anchors for u in o.uses())
                       for o in p.outputs):
                    dead.add(p)
                    nxt.append(p)
        frontier = nxt
    return dead


_VIEWS = frozenset(("Cast", "Identity", "Reshape", "Expand", "Unsqueeze", "Squeeze"))


def sibling_readers(v: ir.Value, matched) -> tuple[set[ir.Node], set[ir.Node]]:
    """The other layers that read the mask ``v`` is a view of, and so decide alike: (glue, anchors), the
    view ops (Cast, Reshape, Expand...) by which nodes of the matched anchor's op (other layers'
    canonical attention) read ``v`` or what ``v`` is a view of, and those nodes. Their lowering rebuilds
    what this one rebuilds (the same values: the same proof) and cse merges the rebuilds, so what dies
    is counted as it will once they all have: Optimum's float16 decoders read the first layer's float16
    mask in the next layers and its Cast in the first (1 node dies at the first layer alone)."""
    ops = {(n.domain, n.op_type) for u in v.uses() if (n := u.node) in (matched or ()) and n.domain not in ("", "ai.onnx")}
    if len(ops) != 1:
        return set(), set()
    chain = [v]
    while (p := chain[-1].producer()) is not None and p.op_type in _VIEWS and p.domain in ("", "ai.onnx") \
            and p.inputs and p.inputs[0] is not None and len(chain) < 16:
        chain.append(p.inputs[0])
    on_chain = {c.producer() for c in chain[:-1]}
    glue: set[ir.Node] = set()
    anchors: set[ir.Node] = set()

    def reach(n: ir.Node, depth: int) -> bool:
        """n reads a view of the mask: is it an anchor, or a view op whose every reader reaches one?"""
        if (n.domain, n.op_type) in ops:
            anchors.add(n)
            return True
        if n.op_type not in _VIEWS or n.domain not in ("", "ai.onnx") or depth > 8:
            return False
        if any(o.is_graph_output() for o in n.outputs):
            return False
        users = [(u.node, u.idx) for o in n.outputs for u in o.uses()]
        if users and all((idx == 0 or (u.domain, u.op_type) in ops) and reach(u, depth + 1) for u, idx in users):
            glue.add(n)
            return True
        return False

    for c in chain:
        for u in c.uses():
            if u.node not in on_chain and (u.idx == 0 or (u.node.domain, u.node.op_type) in ops):
                reach(u.node, 0)
    return glue, anchors


def _array_key(a: np.ndarray) -> tuple:
    a = np.ascontiguousarray(a)
    return ("c", str(a.dtype), tuple(a.shape), a.tobytes())


class _Cost:
    """Keys of the planned and the graph's nodes and values, for one net_nodes call."""

    def __init__(self, graph: ir.Graph, planned: list):
        from onnx_fuse.passes._rep_cost import live_nodes

        self.graph = graph
        self.live = live_nodes(graph)
        self.producer = {id(o): n for n in planned for o in n.outputs if o is not None}
        self.twin: dict[int, Any] = {}        # id(planned value) -> graph value computing it
        self._vkeys: dict[int, Any] = {}
        self._index: dict = {}
        self._indexed: set[str] = set()
        self._shape_index: dict | None = None

    # --- values ---------------------------------------------------------------------------

    def entries(self, x) -> tuple[list, bool] | None:
        """shape_entries for a graph value or a planned one (through the same ops)."""
        from onnx_fuse.passes._shape_values import shape_entries

        if x is None:
            return None
        if isinstance(x, ir.Value):
            return shape_entries(x)
        if x.initializer is not None:
            a = x.initializer
            if not np.issubdtype(a.dtype, np.integer) or a.size > 16:
                return None
            return [int(v) for v in a.reshape(-1)], a.ndim == 0
        if id(x) in self.twin:
            return shape_entries(self.twin[id(x)])
        node = self.producer.get(id(x))
        if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            return None
        return self._planned_entries(node)

    def _planned_entries(self, node) -> tuple[list, bool] | None:
        from onnx_fuse.passes._shape_values import sum_entries

        op, ins, at = node.op_type, node.inputs, node.attrs
        if op == "Shape":
            dims = self._dims(ins[0])
            if dims is None:
                return None
            n = len(dims)
            s, e = int(at.get("start", 0)), int(at.get("end", n))
            s, e = (min(max(k + n if k < 0 else k, 0), n) for k in (s, e))
            out = dims[s:e]
            return (out, False) if None not in out else None
        got = [self.entries(i) for i in ins]
        if op in ("Identity", "Cast"):
            if op == "Cast" and not ir.DataType(int(at.get("to", 0))).is_integer():
                return None
            return got[0]
        if op == "Squeeze":
            return (got[0][0], True) if got[0] and len(got[0][0]) == 1 and not got[0][1] else None
        if op == "Unsqueeze":
            ok = got[0] and got[0][1] and len(got) > 1 and got[1] and got[1][0] == [0]
            return (got[0][0], False) if ok else None
        if op == "Concat" and at.get("axis") in (0, -1):
            if any(g is None or g[1] for g in got):
                return None
            return [e for g in got for e in g[0]], False
        if op == "Gather" and at.get("axis", 0) == 0 and len(got) == 2:
            if got[0] is None or got[0][1] or got[1] is None:
                return None
            n = len(got[0][0])
            if any(not isinstance(i, int) or not -n <= i < n for i in got[1][0]):
                return None
            return [got[0][0][i] for i in got[1][0]], got[1][1]
        if op == "Slice" and len(got) >= 3 and len(got) <= 3:
            if got[0] is None or got[0][1] or got[1] is None or got[2] is None or len(got[1][0]) != 1:
                return None
            if not all(isinstance(v, int) for v in got[1][0] + got[2][0]):
                return None
            n = len(got[0][0])
            s, e = (max(min(v, n), -n) for v in (got[1][0][0], got[2][0][0]))
            return got[0][0][s:e], False
        if op in ("Add", "Sub") and len(got) == 2:
            return sum_entries(op, got[0], got[1])
        return None

    def _dims(self, x) -> list | None:
        """x's dims as ints and dim names (None for one unknown): a graph value's, or a planned
        Concat's of graph values (the joined caches: the concat axis's dims added, as inference does)."""
        from onnx_fuse.passes._dim_products import to_dim
        from onnx_fuse.passes._dim_sums import dim_sum
        from onnx_fuse.passes._shape_values import read_dims

        if isinstance(x, ir.Value):
            return read_dims(x, names="model")
        node = self.producer.get(id(x)) if x is not None else None
        if node is None or node.op_type != "Concat" or not all(isinstance(i, ir.Value) for i in node.inputs):
            return None
        parts = [read_dims(i, names="model") for i in node.inputs]
        if any(p is None for p in parts) or len({len(p) for p in parts}) != 1:
            return None
        axis = int(node.attrs.get("axis", 0)) % len(parts[0])
        out = list(parts[0])
        got = dim_sum([to_dim(p[axis]) for p in parts]) if all(p[axis] is not None for p in parts) else None
        if got is None:
            out[axis] = None
        else:
            coef, atoms = got
            out[axis] = coef if not atoms else (atoms[0] if coef == 1 and len(atoms) == 1 else None)
        return out

    def _dtype(self, x) -> ir.DataType | None:
        if isinstance(x, ir.Value):
            return x.dtype
        if x.initializer is not None:
            return ir.DataType.from_numpy(x.initializer.dtype)
        node = self.producer.get(id(x))
        if node is None:
            return None
        if node.op_type == "Shape":
            return ir.DataType.INT64
        if node.op_type == "Cast":
            return ir.DataType(int(node.attrs.get("to", 0)))
        first = next((i for i in node.inputs if i is not None), None)
        return None if first is None else self._dtype(first)

    def shape_key(self, x) -> tuple | None:
        """shape-cse's key: the dtype and symbolic entries of a small int value (None: not one)."""
        dt = self._dtype(x)
        if dt is None or not dt.is_integer():
            return None
        got = self.entries(x)
        if got is None or all(isinstance(e, int) for e in got[0]):
            return None
        return ("s", dt, tuple(got[0]), got[1])

    def vkey(self, x) -> Any:
        """What cse and shape-cse compare a value by."""
        if x is None:
            return None
        if not isinstance(x, ir.Value):
            if x.initializer is not None:
                return _array_key(x.initializer)
            if id(x) in self.twin:
                return self.vkey(self.twin[id(x)])
            return self.shape_key(x) or ("n", id(x))
        if id(x) in self._vkeys:
            return self._vkeys[id(x)]
        t = x.const_value
        node = x.producer()
        if t is None and node is not None and node.op_type == "Constant" and "value" in node.attributes:
            t = node.attributes["value"].value
        key = None
        if t is not None and t.nbytes <= 1 << 16:
            try:
                key = _array_key(t.numpy())
            except Exception:
                key = None
        key = key or self.shape_key(x) or ("v", id(x))
        self._vkeys[id(x)] = key
        return key

    # --- nodes ----------------------------------------------------------------------------

    def node_key(self, domain: str, op: str, inputs: list, attrs: list, n_out: int) -> tuple | None:
        from onnx_fuse.passes.cse import COMMUTATIVE, _UNHASHABLE, _attr_key

        keys = []
        for a in attrs:
            k = _attr_key(a)
            if k is _UNHASHABLE or (isinstance(k, tuple) and _UNHASHABLE in k):
                return None
            keys.append((a.name, k))
        ins = tuple(self.vkey(i) for i in inputs)
        if op in COMMUTATIVE and len(ins) == 2:
            ins = tuple(sorted(ins, key=repr))
        return (domain if domain != "ai.onnx" else "", op, n_out, ins, tuple(sorted(keys)))

    def index(self, ops: set[str]) -> dict:
        """Live graph nodes of those op types (and of any asked for before) by key."""
        todo = ops - self._indexed
        if todo:
            self._indexed |= todo
            for node in self.graph:
                if node in self.live and node.op_type in todo:
                    k = self.node_key(node.domain, node.op_type, list(node.inputs),
                                      list(node.attributes.values()), len(node.outputs))
                    if k is not None:
                        self._index.setdefault(k, []).append(node)
        return self._index

    def shape_index(self) -> dict:
        """Live graph values by shape-cse key."""
        if self._shape_index is None:
            self._shape_index = {}
            for node in self.graph:
                if node in self.live and node.op_type in _SHAPE_OPS and len(node.outputs) == 1:
                    k = self.shape_key(node.outputs[0])
                    if k is not None:
                        self._shape_index.setdefault(k, []).append(node.outputs[0])
        return self._shape_index

    def cone(self, v) -> list:
        """The planned nodes under v, producers first."""
        out: list = []
        seen: set[int] = set()

        def visit(x) -> None:
            n = self.producer.get(id(x))
            if n is None or id(n) in seen:
                return
            seen.add(id(n))
            for i in n.inputs:
                if i is not None and not isinstance(i, ir.Value):
                    visit(i)
            out.append(n)

        if v is not None and not isinstance(v, ir.Value):
            visit(v)
        return out

    def noop_expand(self, n) -> bool:
        """A planned Expand of a graph value to a shape it has already (on every axis, from the last, the
        target is 1 or the value's dim; no axis added): identity elimination drops it, and then what only
        its target read (a kept mask the lowering broadcasts to [., ., S, T] where it is that shape)."""
        from onnx_fuse.passes._shape_values import read_dims

        if n.op_type != "Expand" or n.domain not in ("", "ai.onnx") or len(n.inputs) != 2:
            return False
        x = n.inputs[0]
        if not isinstance(x, ir.Value):
            return False
        dims = read_dims(x, names="model")
        got = self.entries(n.inputs[1])
        if dims is None or got is None or got[1] or len(got[0]) > len(dims):
            return False
        return all(t == 1 or (t is not None and t == d) for t, d in zip(reversed(got[0]), reversed(dims)))

    def added(self, v, dead: set[ir.Node]) -> tuple[int, list[ir.Value]]:
        """(nodes v's planned cone adds, graph values it reads or reuses). A planned node with a live
        twin adds nothing, nor does what only twinned nodes read (shape-cse's copies die)."""
        from onnx_fuse.rewrite._rewriter import RewriteRejected, _ir_attr

        if isinstance(v, ir.Value):
            return 0, [v]
        cone = self.cone(v)
        index = self.index({n.op_type for n in cone})
        keys: dict[int, Any] = {}
        twinned: dict[int, ir.Node] = {}
        for n in cone:   # producers first: an input's twin is known before its reader's key
            try:
                attrs = [_ir_attr(k, a) for k, a in n.attrs.items()]
            except RewriteRejected:
                attrs = None
            k = None if attrs is None else self.node_key(n.domain, n.op_type, n.inputs, attrs, len(n.outputs))
            keys[id(n)] = k
            twins = index.get(k, []) if k is not None else []
            if not twins and len(n.outputs) == 1 and (sk := self.shape_key(n.outputs[0])) is not None:
                twins = [x.producer() for x in self.shape_index().get(sk, [])]
            if twins:
                # a live twin outside the dying cone if there is one (then nothing of the cone stays)
                g = min(twins, key=lambda t: t in dead)
                twinned[id(n)] = g
                for o, go in zip(n.outputs, g.outputs if len(g.outputs) == len(n.outputs) else [g.outputs[0]]):
                    if o is not None:
                        self.twin[id(o)] = go
        # what v needs: from v down through the nodes that are built (twinned ones end the walk)
        reads: list[ir.Value] = []
        seen: set = set()
        done: set[int] = set()
        cost = 0
        stack = [self.producer.get(id(v))]
        while stack:
            n = stack.pop()
            if n is None or id(n) in done:
                continue
            done.add(id(n))
            if id(n) in twinned:
                reads.extend(twinned[id(n)].outputs)
                continue
            if self.noop_expand(n):
                reads.append(n.inputs[0])
                continue
            k = keys.get(id(n))
            if k is None or k not in seen:
                cost += 1
                if k is not None:
                    seen.add(k)
            for i in n.inputs:
                if isinstance(i, ir.Value):
                    reads.append(i)
                elif i is not None:
                    stack.append(self.producer.get(id(i)))
        return cost, reads


def net_nodes(ctx, new, old, keep=None) -> int:
    """Nodes the graph gains by rebuilding ``old`` as ``new`` rather than reading it through
    ``keep`` (both values the rewrite has planned; ``keep`` None or ``old``: read as it is)."""
    from onnx_fuse.rewrite._expr import EvalFailure

    planned = getattr(ctx, "planned", None)
    graph = getattr(ctx, "graph", None)
    if planned is None or graph is None:
        raise EvalFailure("net_nodes() counts what a rewrite has built: use it in a rewrite, after `new`")
    if not isinstance(old, ir.Value):
        raise EvalFailure(f"net_nodes() needs the graph value it rebuilds, got {type(old).__name__}")
    if isinstance(new, ir.Value) or new is None:
        raise EvalFailure("net_nodes()'s first argument must be a value the rewrite builds")
    cost = _Cost(graph, planned)
    dead = dead_cone(old, 512, *sibling_readers(old, getattr(ctx, "matched", None)))
    made, reads = cost.added(new, dead)
    kept = 0 if keep is None or keep is old else cost.added(keep, set())[0]
    # what the rebuild reads keeps its producers alive, and what they read in the dying cone
    alive: set[ir.Node] = set()
    stack = [r.producer() for r in reads]
    while stack:
        n = stack.pop()
        if n is None or n not in dead or n in alive:
            continue
        alive.add(n)
        stack.extend(i.producer() for i in n.inputs if i is not None)
    return made - (len(dead) - len(alive)) - kept
