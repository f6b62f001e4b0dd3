"""Layout chains: a Transpose sunk into the next Transpose, a Reshape of a Reshape read from its source.

Cases handled (each counted in ``stats``):
- ``transpose-sunk``: Transposes by p1 -> ops that do not care about layout -> Transposes by p2
  become the ops on the first Transposes' inputs -> Transposes by p1[p2] (passes/_transpose_region.py
  collects the region: elementwise ops, last-axis norms whose axes p1 keeps, Concat / Softmax with
  their axis moved, constants permuted, Shape reads picked by p1); identity-elimination then drops an
  identity permutation, so an inverse pair cancels. Done only when fewer Transposes are left.
- ``reshape-of-reshape``: Reshape(Reshape(x, s1), s2) reads x directly when s2 does not copy (0) a dim
  of the middle value that x does not have at the same axis; identity-elimination then drops a
  Reshape to x's own shape, so a head split undone by its merge cancels.

- ``layout-chain``: a chain of Reshapes, Flattens (a Reshape to [prod(dims[:axis]), prod(dims[axis:])])
  and Transposes from known (int or symbolic) dims as at most Reshape, Transpose, Reshape on x's
  own dims where it moves whole axes; a symbolic dim is split only into exact factors (3*n as n and
  3); a target with two symbolic entries no 0 copies is the chain's own computed last target, or
  Flatten + a Reshape copying the merged leading dims (LongT5's [B*N, H, L, D] block views).

A Reshape chain's values must have that one reader and must not be a graph output: a second reader
would need the old layout, so it blocks the rewrite (a transposed region's readers are its own);
Shape reads beside it keep the nodes up to the value they read (their cost counted). Runs in the
cleanup after the rules (levels.py): the lowerings' layout glue meets the exporter's there, once the
cleanup has dropped the shape reads the rules left beside it (LayoutLM's TorchScript export at
trt-O4: 8 Transposes, and the Reshapes around them, cancel in pairs).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes import _attention_3d
from onnx_fuse.passes._dim_products import Dim, dim_text, div, mul, reshape_out_dims, shape_vector, value_dims
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes._transpose_region import ONE_AXIS, Refused, collect, layout_inputs, perm_of
from onnx_fuse.passes.constant_folding import constant_tensor

# the most axes a Transpose of the folded chain may have at trt (TensorRT's dims hold 8); ONNX and
# ONNX Runtime take any rank, so other targets fold without a cap (Hiera's unroll: one Transpose of
# 10 axes for three rounds of 6, half the time in ORT at batch 4, docs/holdout.md)
TRT_MAX_RANK = 8
#: the ops a static chain is made of (Flatten is a Reshape to [prod(dims[:axis]), prod(dims[axis:])])
LAYOUT_OPS = ("Transpose", "Reshape", "Flatten")


def _one_reader(value: ir.Value) -> ir.Node | None:
    """The one node that reads ``value`` (once), which is no graph output; else None."""
    if value.is_graph_output():
        return None
    uses = list(value.uses())
    return uses[0].node if len(uses) == 1 else None


def _chain_reader(value: ir.Value) -> tuple[ir.Node | None, bool]:
    """The one layout op (Transpose / Reshape / Flatten) that reads ``value`` beside Shape reads
    only, and whether there are such Shape reads; (None, _) for any other reader or a graph output."""
    if value.is_graph_output():
        return None, False
    uses = [u.node for u in value.uses()]
    shapes = [n for n in uses if is_default_op(n, "Shape")]
    rest = [n for n in uses if not is_default_op(n, "Shape")]
    if len(rest) != 1 or not is_default_op(rest[0], *LAYOUT_OPS):
        return None, False
    return rest[0], bool(shapes)


def _fresh(base: str, taken: set) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _zero_entries(shape: ir.Value | None) -> list[int] | None:
    """Where a constant Reshape shape holds 0; None when it is not a small int constant."""
    t = constant_tensor(shape)
    if t is None or not t.dtype.is_integer() or t.size > 64:
        return None
    return [i for i, e in enumerate(t.numpy().reshape(-1)) if int(e) == 0]


class FoldLayoutChainsPass(FusePass):
    """Transposes sunk into the next Transpose, Reshapes of Reshapes read from the source (module docstring)."""

    name = "fold-layout-chains"

    def __init__(self, max_rank: int | None = TRT_MAX_RANK, attention_3d: bool = False) -> None:
        super().__init__()
        self.max_rank = max_rank  # None: any rank
        self.attention_3d = attention_3d  # Attention-23 read 3-D where that saves Transposes

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph  # permuted constants become initializers: main graph only
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        if self.attention_3d:
            for node in list(graph):
                plan = _attention_3d.candidate(node, opset)
                if plan is not None and plan[0]:
                    _attention_3d.to_3d(graph, node, plan[1])
                    self.stats["attention-3d"] += 1
                    modified = True
        for node in list(graph):
            if node.graph is not graph:  # removed by an earlier rewrite of this sweep
                continue
            if is_default_op(node, *LAYOUT_OPS) and self._static_chain(graph, node):
                modified = True
            elif is_default_op(node, "Transpose"):
                modified |= self._sink_transpose(graph, node, opset)
            elif is_default_op(node, "Reshape"):
                modified |= self._reshape_of_reshape(node)
        return ir.passes.PassResult(model, modified=modified)

    # -- Transposes sunk through a region of layout-agnostic ops --------------------------------

    def _sink_transpose(self, graph: ir.Graph, t1: ir.Node, opset: int) -> bool:
        try:
            region = collect(t1, opset)
        except Refused:
            return False
        p1, entries = region.p1, {id(t) for t in region.entries}
        composed = {id(t): [p1[i] for i in perm_of(t)] for t in region.exits}
        after = len(region.kept) + sum(c != list(range(len(c))) for c in composed.values())
        if after >= len(region.entries) + len(region.exits):
            return False  # no Transpose saved
        inv = [int(i) for i in np.argsort(p1)]

        def source(v: ir.Value) -> ir.Value:
            """v in the entries' input layout: an entry's input, else v (rewritten in place)."""
            producer = v.producer()
            return producer.inputs[0] if producer is not None and id(producer) in entries else v

        constants = {(id(n), j) for n, j in region.constants}
        for op in region.inner:
            for j in layout_inputs(op):  # a norm's scale read off a kept entry stays as it is
                v = op.inputs[j]
                if v is None:
                    continue
                if (id(op), j) in constants:
                    op.replace_input_with(j, self._permuted(graph, v, inv, len(p1)))
                elif source(v) is not v:
                    op.replace_input_with(j, source(v))
            if op.op_type == "Concat" or op.op_type in ONE_AXIS:
                a = op.attributes.get("axis")
                op.attributes["axis"] = ir.AttrInt64("axis", region.new_axis(-1 if a is None else int(a.value)))
            for out in op.outputs:
                if out.shape is not None and len(out.shape) == len(p1):
                    out.shape = ir.Shape([out.shape.dims[i] for i in inv])
        for t2 in region.exits:
            t2.replace_input_with(0, source(t2.inputs[0]))
            t2.attributes["perm"] = ir.AttrInt64s("perm", composed[id(t2)])
        for shape in region.shape_reads:
            self._shape_through(graph, shape, source(shape.inputs[0]), p1, opset)
        for t in region.entries:
            if not t.outputs[0].uses():
                graph.remove(t, safe=True)
        self.stats["transpose-sunk"] += 1
        return True

    def _shape_through(self, graph: ir.Graph, shape: ir.Node, v: ir.Value, p1: list[int], opset: int) -> None:
        """Shape(Transpose(v, p1))[start:end] as v's dims picked by p1: one Shape slice where they
        are a run of v's axes in order (the whole shape before opset 15, which has no slice), else
        Gather(Shape(v), picked)."""
        rank = len(p1)
        start, end = attr_value(shape, "start", 0), attr_value(shape, "end", rank)
        picked = [p1[i] for i in range(rank)[start:end]]
        run = not picked or picked == list(range(picked[0], picked[0] + len(picked)))
        if run and (opset >= 15 or picked == list(range(rank))):
            shape.replace_input_with(0, v)
            if picked and opset >= 15:
                shape.attributes["start"] = ir.AttrInt64("start", picked[0])
                shape.attributes["end"] = ir.AttrInt64("end", picked[-1] + 1)
            return
        taken = set(graph.initializers) | {w.name for w in graph.inputs} | {o.name for n in graph for o in n.outputs}
        base = shape.outputs[0].name or "shape"
        name = _fresh(f"{base}_axes", taken)
        indices = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(picked)]),
                           const_value=ir.tensor(np.array(picked, dtype=np.int64), name=name))
        graph.register_initializer(indices)
        whole = ir.node("Shape", [v])
        whole.outputs[0].name = _fresh(f"{base}_all", taken)
        whole.outputs[0].type, whole.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([rank])
        gather = ir.node("Gather", [whole.outputs[0], indices], attributes={"axis": 0})
        gather.outputs[0].name = _fresh(f"{base}_picked", taken)
        gather.outputs[0].type, gather.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(picked)])
        graph.insert_after(shape, [whole, gather])
        reroute(shape.outputs[0], gather.outputs[0])
        graph.remove(shape, safe=True)

    def _permuted(self, graph: ir.Graph, v: ir.Value, inv: list[int], rank: int) -> ir.Value:
        t = constant_tensor(v)
        arr = t.numpy().reshape((1,) * (rank - len(t.shape)) + tuple(t.shape))
        arr = np.ascontiguousarray(np.transpose(arr, inv))
        name = _fresh(f"{v.name or 'const'}_perm", set(graph.initializers) | {w.name for w in graph.inputs}
                      | {o.name for n in graph for o in n.outputs})
        value = ir.Value(name=name, type=ir.TensorType(t.dtype), shape=ir.Shape(list(arr.shape)),
                         const_value=ir.tensor(arr, dtype=t.dtype, name=name))
        graph.register_initializer(value)
        return value

    # -- Reshape(Reshape(x, s1), s2) --------------------------------------------------------------

    def _reshape_of_reshape(self, r2: ir.Node) -> bool:
        if len(r2.inputs) < 2 or r2.inputs[0] is None:
            return False
        mid = r2.inputs[0]
        r1 = mid.producer()
        if not is_default_op(r1, "Reshape") or len(r1.inputs) < 2 or r1.inputs[0] is None or _one_reader(mid) is not r2:
            return False
        x = r1.inputs[0]
        a1 = r1.attributes.get("allowzero")
        if a1 is not None and (a1.is_ref() or a1.value != 0) and _zero_entries(r1.inputs[1]) != []:
            return False  # a literal 0 in s1 (an empty middle value) or an unread s1: left alone
        a = r2.attributes.get("allowzero")
        if a is not None and (a.is_ref() or a.value not in (0, 1)):
            return False
        if not (a is not None and a.value == 1) and not self._zeros_copy_same(r2.inputs[1], mid, x):
            return False
        r2.replace_input_with(0, x)
        self.stats["reshape-of-reshape"] += 1
        return True

    @staticmethod
    def _zeros_copy_same(shape: ir.Value | None, mid: ir.Value, x: ir.Value) -> bool:
        """Each 0 of ``shape`` (copy the input's dim) copies the same dim from x as from ``mid``."""
        zeros = _zero_entries(shape)
        if zeros is None:
            return False
        if not zeros:
            return True
        got, have = reshape_out_dims(mid), value_dims(x)
        if got is None or have is None:
            return False
        return all(i < len(got) and i < len(have) and have[i] is not None and got[i] == have[i]
                   and not any(invented_name(s) for s in have[i][1]) for i in zeros)

    # -- Reshape / Transpose chains on known (int or symbolic) shapes ----------------------------

    def _static_chain(self, graph: ir.Graph, start: ir.Node) -> bool:
        """A chain of Reshapes, Flattens and Transposes from a known shape, as at most Reshape,
        Transpose, Reshape (_atoms), when that is fewer nodes. Symbolic dims (``batch``, ``4*batch``)
        are split only into exact factors (``3*n`` as ``n`` and ``3``), so the folded chain is the
        same for every value they take. A chain value also read by Shape keeps the nodes up to it
        (the shape read stays as it was; they count against the saving)."""
        x = start.inputs[0] if start.inputs else None
        before = x.producer() if x is not None else None
        if x is None or (is_default_op(before, *LAYOUT_OPS) and _one_reader(x) is start):
            return False  # not the chain's first node (one read beside Shape reads: tried both ways)
        chain, node, read = [start], start, []
        while True:
            nxt, shape_read = _chain_reader(node.outputs[0])
            read.append(shape_read)
            if nxt is None:
                break
            chain.append(node := nxt)
        # chain[:kept] stay for the Shape reads of their values (the last value's readers, Shape
        # ones too, read the folded chain's result: same shape)
        kept = max((i + 1 for i in range(len(chain) - 1) if read[i]), default=0)
        shape = _known_dims(x)
        if len(chain) < 2 or shape is None:
            return False
        steps = [perm_of(n) if n.op_type == "Transpose" else _flatten_axis(n) if n.op_type == "Flatten"
                 else _reshape_target(n) for n in chain]
        if any(s is None for s in steps):
            return False
        plan = _atoms(shape, [(n.op_type, s) for n, s in zip(chain, steps)])
        if plan is None:
            return False
        sizes, perm, final, axis_perm = plan
        if self.max_rank is not None and len(perm) > self.max_rank:
            return False
        ops = []  # (op, perm or (target dims, the Reshape's input dims))
        if perm != list(range(len(perm))):
            if axis_perm is not None:
                ops.append(("Transpose", axis_perm))
                moved = [shape[p] for p in axis_perm]
            else:
                if sizes != shape:
                    ops.append(("Reshape", (sizes, shape)))
                ops.append(("Transpose", perm))
                moved = [sizes[p] for p in perm]
            if moved != final:
                ops.append(("Reshape", (final, moved)))
        else:
            ops.append(("Reshape", (final, shape)))
        last = chain[-1]
        targets = {k: _target_entries(*arg) for k, (op, arg) in enumerate(ops) if op == "Reshape"}
        reuse = _reusable_target(last)
        if ops[-1][0] == "Reshape" and targets[len(ops) - 1] is None and reuse is not None:
            targets[len(ops) - 1] = reuse  # the chain's own last target, computed from shapes
        for k in [k for k, t in targets.items() if t is None]:
            targets[k] = _flattened_target(*ops[k][1])
        if any(t is None for t in targets.values()):
            return False  # more than one symbolic entry that no 0 (or a Flatten's product) can copy
        flattens = sum(isinstance(t, tuple) for t in targets.values())
        if len(ops) + flattens + kept >= len(chain):
            return False
        taken = {o.name for n in graph for o in n.outputs} | set(graph.initializers) | {v.name for v in graph.inputs}
        cur = x
        for k, (op, arg) in enumerate(ops):
            if op == "Transpose":
                new = ir.node("Transpose", [cur], attributes={"perm": arg})
                dims = [(shape if axis_perm is not None else sizes)[p] for p in arg]
            else:
                target = targets[k]
                if isinstance(target, tuple):  # Flatten(axis) first, then the rest with a 0 copying its product
                    axis, target = target
                    flat = ir.node("Flatten", [cur], attributes={"axis": axis})
                    graph.insert_before(last, flat)
                    cur = flat.outputs[0]
                    cur.name = _fresh(f"{last.outputs[0].name or 'layout'}_flatten{k}", taken)
                    cur.dtype = x.dtype
                    halves = [(1, ()), (1, ())]
                    for i, d in enumerate(arg[1]):
                        halves[i >= axis] = mul(halves[i >= axis], d)
                    cur.shape = ir.Shape([d[0] if not d[1] else dim_text(d) for d in halves])
                if not isinstance(target, ir.Value):
                    target = self._shape_const(graph, f"{last.name or 'layout'}_shape", target)
                    taken.add(target.name)
                new = ir.node("Reshape", [cur, target])
                dims = arg[0]
            graph.insert_before(last, new)
            cur = new.outputs[0]
            cur.name = _fresh(f"{last.outputs[0].name or 'layout'}_{op.lower()}{k}", taken)
            cur.dtype = x.dtype
            cur.shape = ir.Shape([d[0] if not d[1] else dim_text(d) for d in dims])
        out = last.outputs[0]
        name, was_output = out.name, out.is_graph_output()
        cur.type, cur.shape = out.type, out.shape
        out.replace_all_uses_with(cur, replace_graph_outputs=True)
        for n in reversed(chain[kept:]):
            graph.remove(n, safe=True)
        if was_output:  # the model's output keeps its name
            out.name, cur.name = None, name
        self.stats["layout-chain"] += 1
        return True

    def _shape_const(self, graph: ir.Graph, base: str, dims: list[int]) -> ir.Value:
        name = _fresh(base, set(graph.initializers) | {w.name for w in graph.inputs}
                      | {o.name for n in graph for o in n.outputs})
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(dims)]),
                         const_value=ir.tensor(np.array(dims, dtype=np.int64), name=name))
        graph.register_initializer(value)
        return value


def _reshape_target(node: ir.Node) -> list[Dim] | None:
    """A Reshape's target entries with 0 (copy) and -1 still to resolve: a constant, or a vector
    computed from shapes (TorchScript's Concat of Shape Gathers) read as dim products; None when an
    entry cannot be read or names a dim inference invented."""
    if len(node.inputs) < 2:
        return None
    t = constant_tensor(node.inputs[1])
    if t is not None:
        if not t.dtype.is_integer() or t.size > 64:
            return None
        entries = [(int(e), ()) for e in t.numpy().reshape(-1)]
    else:
        got = shape_vector(node.inputs[1], {})
        if got is None or got[1] or any(e is None or any(invented_name(a) for a in e[1]) for e in got[0]):
            return None
        entries = list(got[0])
    a = node.attributes.get("allowzero")
    if a is not None and (a.is_ref() or a.value != 0) and (0, ()) in entries:
        return None  # a literal 0: an empty tensor
    return entries


def _flatten_axis(node: ir.Node) -> int | None:
    """A Flatten's axis (negative: from the end, resolved in _atoms); None when it is a reference."""
    a = node.attributes.get("axis")
    if a is None:
        return 1
    return None if a.is_ref() else int(a.value)


def _reusable_target(node: ir.Node) -> ir.Value | None:
    """A Reshape's own computed target, usable after any input of the same size: no 0 entry (a 0
    copies the input's dim at its index) and not a constant (a constant target is written afresh)."""
    if node.op_type != "Reshape" or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    if constant_tensor(node.inputs[1]) is not None:
        return None
    entries = _reshape_target(node)
    return node.inputs[1] if entries is not None and (0, ()) not in entries else None


def _known_dims(x: ir.Value) -> list[Dim] | None:
    """x's dims as products (``4*batch`` is (4, ("batch",))); None when one is unknown or invented
    by inference (no fact to fold on) or not positive."""
    dims = value_dims(x)
    if dims is None or any(d is None or d[0] <= 0 or any(invented_name(a) for a in d[1]) for d in dims):
        return None
    return dims


def _target_entries(target: list[Dim], ins: list[Dim]) -> list[int] | None:
    """A Reshape target for ``target`` dims from an input with dims ``ins``: ints as they are, a
    symbolic entry as 0 where the input has the same dim at that axis, else as the one -1; None when
    two entries would need -1."""
    out = [d[0] if not d[1] else 0 if i < len(ins) and ins[i] == d else None for i, d in enumerate(target)]
    if out.count(None) > 1:
        return None
    return [-1 if e is None else e for e in out]


def _flattened_target(target: list[Dim], ins: list[Dim]) -> tuple[int, list[int]] | None:
    """Where no Reshape target alone can say ``target`` (two symbolic entries, neither copied), its
    first entry the product of the input's first k >= 2 dims: (k, the entries after Flatten(axis k),
    a 0 copying that product and the one symbolic entry left as -1); None otherwise."""
    one: Dim = (1, ())
    lead = one
    for k, d in enumerate(ins[:-1]):
        lead = mul(lead, d)
        if k >= 1 and lead == target[0]:
            rest = [d[0] if not d[1] else None for d in target[1:]]
            if rest.count(None) > 1:
                return None
            return k + 1, [0] + [-1 if e is None else e for e in rest]
    return None


def _atoms(shape: list[Dim], steps: list[tuple[str, list]]):
    """Follow a Reshape / Transpose chain on x's ``shape`` (dims as products, _dim_products.Dim) as a
    permutation of x's axes split into factors ("atoms"); a Reshape's step is its target entries
    (Dims, (0, ()) a copy, (-1, ()) the one to solve). Returns (atom sizes in x's order, the
    permutation of the atoms, the final shape), adjacent atoms that stay adjacent merged and 1s
    dropped, and that permutation on x's axes where it moves whole axes (else None); None when a
    Reshape does not split the atoms on their boundaries (or an exact factor), or a shape entry
    cannot be resolved. A Flatten's step is its axis."""
    one: Dim = (1, ())
    size = {i: d for i, d in enumerate(shape)}
    order = list(range(len(shape)))  # the atoms in x's memory order
    axes = [[i] for i in order]      # the atoms of each axis of the current value, outer first
    dims = list(shape)
    fresh = len(shape)
    for op, arg in steps:
        if op == "Transpose":
            if sorted(arg) != list(range(len(axes))):
                return None
            axes, dims = [axes[p] for p in arg], [dims[p] for p in arg]
            continue
        if op == "Flatten":  # a Reshape to [prod(dims[:axis]), prod(dims[axis:])]
            axis = arg + len(dims) if arg < 0 else arg
            if not 0 <= axis <= len(dims):
                return None
            outer, inner = one, one
            for i, d in enumerate(dims):
                outer, inner = (mul(outer, d), inner) if i < axis else (outer, mul(inner, d))
            arg = [outer, inner]
        if any(e[0] < 0 and e != (-1, ()) for e in arg) or arg.count((-1, ())) > 1:
            return None
        target = [dims[i] if e == (0, ()) and i < len(dims) else None if e == (-1, ()) else e
                  for i, e in enumerate(arg)]
        if any(d is not None and d[0] <= 0 for d in target):
            return None
        total = one
        for d in dims:
            total = mul(total, d)
        known = one
        for d in target:
            known = mul(known, d) if d is not None else known
        if None in target:
            solved = div(total, known)
            if solved is None or solved[0] <= 0:
                return None
            target[target.index(None)] = solved
        elif known != total:
            return None
        flat = [a for ax in axes for a in ax if size[a] != one]
        axes, k = [], 0
        for d in target:
            group, have = [], one
            while have != d:
                need = div(d, have)  # what this axis still takes
                if k >= len(flat) or need is None:
                    return None
                a = flat[k]
                if div(need, size[a]) is not None:
                    group.append(a)
                    have = mul(have, size[a])
                    k += 1
                    continue
                rest = div(size[a], need)
                if rest is None:
                    return None  # a dim is split only into exact factors (3*n as n and 3, not n as 2 and n/2)
                outer, inner = fresh, fresh + 1  # a as [need, size / need]
                fresh += 2
                size[outer], size[inner] = need, rest
                order[order.index(a):order.index(a) + 1] = [outer, inner]
                flat[k:k + 1] = [outer, inner]
                group.append(outer)
                have = mul(have, need)
                k += 1
            axes.append(group)
        dims = target
    final_order = [a for ax in axes for a in ax if size[a] != one]
    order = [a for a in order if size[a] != one]
    # merge atoms adjacent in both orders
    merged: list[list[int]] = []
    for a in final_order:
        if merged and order.index(a) == order.index(merged[-1][-1]) + 1:
            merged[-1].append(a)
        else:
            merged.append([a])
    groups = sorted(merged, key=lambda g: order.index(g[0]))
    sizes = []
    for g in groups:
        d = one
        for a in g:
            d = mul(d, size[a])
        sizes.append(d)
    perm = [groups.index(g) for g in merged]
    # the same permutation on x's own axes, where no axis was split and none is 1: a Transpose of x
    # needs no merging Reshape before it
    whole = all(d != one for d in shape) and all(a < len(shape) for g in merged for a in g)
    axis_perm = [a for g in merged for a in g] if whole else None
    return sizes, perm, dims, axis_perm
