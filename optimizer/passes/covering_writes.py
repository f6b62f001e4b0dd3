"""ScatterND writes that cover a tensor's first axis, in order: the Concat of what they write.

torch exports a slice assignment to a buffer (``y[..., :a] = p; y[..., a:] = q``, DeepSeek V2 / V3's
``key_states`` built from k_nope and the rope part) as Transpose -> ScatterND (one per slice, constant
indices [[0], [1], ...] on the first axis) -> Transpose. Where the writes of a chain together cover every
index of the data's first axis once, each write a run of consecutive indices in increasing order, no value
of the data is left and the result is the writes' updates joined along that axis:

    ScatterND(ScatterND(data, [[0] .. [a-1]], p), [[a] .. [n-1]], q)  =  Concat(p, q, axis=0)

(the order of the Concat is that of the runs' starts). The Transposes around it then meet through the
Concat (fold-layout-chains' transpose sink), so the joined tensor is a plain Concat on the last axis: the
form the attention rules and the head-layout passes read. Refused: reduction other than none, indices of a
last dim other than 1, a run out of order or with a gap or overlap, a first axis that is not a static
size, an intermediate write read elsewhere or a graph output. Runs in the cleanup passes (every level).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names
from onnx_fuse.passes._transpose_region import perm_of
from onnx_fuse.passes.constant_folding import constant_tensor

_MAX_INDICES = 1 << 16


def _run(indices: ir.Value | None, n: int) -> tuple[int, int] | None:
    """(start, length) where the constant ``indices`` [k, 1] name k consecutive increasing indices of an
    axis of size n (negative ones counted from the end); None otherwise."""
    t = constant_tensor(indices)
    if t is None or not t.dtype.is_integer() or t.size > _MAX_INDICES or len(t.shape) != 2 or t.shape[1] != 1:
        return None
    idx = [int(i) + n if int(i) < 0 else int(i) for i in t.numpy().reshape(-1)]
    if not idx or not all(0 <= i < n for i in idx) or idx != list(range(idx[0], idx[0] + len(idx))):
        return None
    return idx[0], len(idx)


def _write(node: ir.Node | None) -> bool:
    return (is_default_op(node, "ScatterND") and len(node.inputs) == 3 and len(node.outputs) == 1
            and all(v is not None for v in node.inputs)
            and attr_value(node, "reduction", "none") in ("none", b"none"))


def covering_chain(last: ir.Node) -> list[tuple[int, ir.Value]] | None:
    """The (start, updates) of the writes ending at the ScatterND ``last`` when they cover its data's first
    axis exactly (module docstring), sorted by start; None otherwise."""
    out = last.outputs[0]
    if out.shape is None or len(out.shape) < 1 or not isinstance(out.shape[0], int):
        return None
    n = out.shape[0]
    runs: list[tuple[int, int, ir.Value]] = []
    node = last
    while True:
        run = _run(node.inputs[1], n)
        if run is None:
            return None
        runs.append((*run, node.inputs[2]))
        covered = sorted(runs, key=lambda r: r[0])
        if covered[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in zip(covered, covered[1:])) \
                and covered[-1][0] + covered[-1][1] == n:
            return [(start, upd) for start, _, upd in covered]
        data = _through_pair(node.inputs[0])
        prev = data.producer()
        # an earlier write of the chain: read by this one only
        if not _write(prev) or data.is_graph_output() or len(list(data.uses())) != 1:
            return None
        node = prev


def _through_pair(v: ir.Value) -> ir.Value:
    """u where v = Transpose(Transpose(u, p), q) and the two compose to the identity, each read once (dynamo
    transposes each write's result back and the next write's data forth again); else v."""
    second = v.producer()
    if not is_default_op(second, "Transpose") or len(list(v.uses())) != 1 or v.is_graph_output():
        return v
    mid = second.inputs[0]
    first = mid.producer() if mid is not None else None
    if not is_default_op(first, "Transpose") or len(list(mid.uses())) != 1 or mid.is_graph_output():
        return v
    p, q = perm_of(first), perm_of(second)
    if p is None or q is None or len(p) != len(q) or [p[i] for i in q] != list(range(len(p))):
        return v
    return first.inputs[0]


class CoveringWritesPass(FusePass):
    """ScatterND writes covering the first axis as the Concat of their updates (module docstring)."""

    name = "covering-writes"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is not graph or not _write(node):
                    continue
                # the chain's last write: not read by a further write of one chain
                uses = list(node.outputs[0].uses())
                if len(uses) == 1 and _write(uses[0].node) and uses[0].idx == 0 \
                        and not node.outputs[0].is_graph_output():
                    continue
                pieces = covering_chain(node)
                if pieces is None:
                    continue
                out = node.outputs[0]
                if len(pieces) == 1 and not out.is_graph_output():
                    new = pieces[0][1]
                else:   # a graph output keeps a node of this graph (an outer value cannot take its name)
                    taken = graph_names(graph)
                    cat = ir.node("Concat", [upd for _, upd in pieces], attributes={"axis": 0}) if len(pieces) > 1 \
                        else ir.node("Identity", [pieces[0][1]])
                    cat.name = fresh_name(f"{node.name or 'write'}/covered", taken)
                    new = cat.outputs[0]
                    new.name = fresh_name(f"{out.name or 'write'}_covered", taken)
                    new.type, new.shape = out.type, out.shape
                    graph.insert_before(node, [cat])
                reroute(out, new)
                graph.remove(node, safe=True)   # the earlier writes of the chain go with dead-code elimination
                self.stats["writes"] += len(pieces)
                modified = True
        return ir.passes.PassResult(model, modified=modified)
