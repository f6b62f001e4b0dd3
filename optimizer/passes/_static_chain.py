"""A Reshape / Flatten / Transpose chain from known (int or symbolic) dims as at most Reshape,
Transpose, Reshape (fold-layout-chains' ``layout-chain``, layout_chains.py).

The chain is followed as a permutation of x's axes split into exact factors (_chain_atoms.py); the
Reshape targets written back keep a symbolic dim as a 0 copy or the one -1, else reuse the chain's
own computed last target, else Flatten + a Reshape copying the merged leading dims.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_atoms import atoms
from onnx_fuse.passes._chain_reads import (LAYOUT_OPS, chain_reader, flatten_axis, known_dims, one_reader,
                                           reshape_target, reusable_target)
from onnx_fuse.passes._dim_products import Dim, dim_text, mul
from onnx_fuse.passes._infra import is_default_op
from onnx_fuse.passes._new_values import fresh_name, int64_initializer
from onnx_fuse.passes._transpose_region import perm_of


def fold_static_chain(graph: ir.Graph, start: ir.Node, max_rank: int | None) -> bool:
    """A chain of Reshapes, Flattens and Transposes from a known shape, as at most Reshape,
    Transpose, Reshape (atoms), when that is fewer nodes. Symbolic dims (``batch``, ``4*batch``)
    are split only into exact factors (``3*n`` as ``n`` and ``3``), so the folded chain is the
    same for every value they take. A chain value also read by Shape keeps the nodes up to it
    (the shape read stays as it was; they count against the saving). ``max_rank``: the most axes
    the folded Transpose may have (None: any)."""
    x = start.inputs[0] if start.inputs else None
    before = x.producer() if x is not None else None
    if x is None or (is_default_op(before, *LAYOUT_OPS) and one_reader(x) is start):
        return False  # not the chain's first node (one read beside Shape reads: tried both ways)
    chain, node, read = [start], start, []
    while True:
        nxt, shape_read = chain_reader(node.outputs[0])
        read.append(shape_read)
        if nxt is None:
            break
        chain.append(node := nxt)
    # chain[:kept] stay for the Shape reads of their values (the last value's readers, Shape
    # ones too, read the folded chain's result: same shape)
    kept = max((i + 1 for i in range(len(chain) - 1) if read[i]), default=0)
    shape = known_dims(x)
    if len(chain) < 2 or shape is None:
        return False
    steps = [perm_of(n) if n.op_type == "Transpose" else flatten_axis(n) if n.op_type == "Flatten"
             else reshape_target(n) for n in chain]
    if any(s is None for s in steps):
        return False
    plan = atoms(shape, [(n.op_type, s) for n, s in zip(chain, steps)])
    if plan is None:
        return False
    sizes, perm, final, axis_perm = plan
    if max_rank is not None and len(perm) > max_rank:
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
    reuse = reusable_target(last)
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
                cur.name = fresh_name(f"{last.outputs[0].name or 'layout'}_flatten{k}", taken)
                cur.dtype = x.dtype
                halves = [(1, ()), (1, ())]
                for i, d in enumerate(arg[1]):
                    halves[i >= axis] = mul(halves[i >= axis], d)
                cur.shape = ir.Shape([d[0] if not d[1] else dim_text(d) for d in halves])
            if not isinstance(target, ir.Value):
                target = int64_initializer(graph, f"{last.name or 'layout'}_shape", target)
                taken.add(target.name)
            new = ir.node("Reshape", [cur, target])
            dims = arg[0]
        graph.insert_before(last, new)
        cur = new.outputs[0]
        cur.name = fresh_name(f"{last.outputs[0].name or 'layout'}_{op.lower()}{k}", taken)
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
    return True


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
