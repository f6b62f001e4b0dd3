"""What ONNX Runtime loads but the ONNX checker refuses, from tools users run before onnx-fuse.

* Nodes out of topological order: onnxruntime.transformers' float16 converter (keep_io_types)
  appends the Casts of the graph inputs after the nodes that read them. ORT sorts on load; so do
  we (``sort_nodes``, stable: nodes already in order keep their order).
* ``SimplifiedLayerNormalization`` in the default domain: ORT registers it there (opset 1) and its
  optimizers write it there (ORT's offline EXTENDED level, the transformers optimizer, Optimum
  -O2+). onnx has no schema for it, so the checker sees it as an unknown op of the ONNX domain;
  ``check_skeleton`` moves such nodes to ORT's domain in the copy it checks.
"""

from __future__ import annotations

import collections

import onnx

#: ops ONNX Runtime registers in the default domain that onnx has no schema for (and that ORT's own
#: optimizers write there)
ORT_DEFAULT_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})
_ORT_DOMAIN = "com.microsoft"


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read (outer-scope values included)."""
    names: set[str] = set()
    for attr in node.attribute:
        for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for n in g.node:
                names.update(i for i in n.input if i)
                names |= _subgraph_reads(n)
    return names


def sort_nodes(graph: onnx.GraphProto) -> bool:
    """Put ``graph``'s nodes in topological order (stable); False, graph untouched, on a cycle."""
    producer = {out: i for i, n in enumerate(graph.node) for out in n.output if out}
    deps = [{producer[x] for x in (*n.input, *_subgraph_reads(n)) if x in producer and producer[x] != i}
            for i, n in enumerate(graph.node)]
    users = collections.defaultdict(list)
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    pending = [len(ds) for ds in deps]
    import heapq

    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.node):
        return False
    if order != sorted(order):
        nodes = [graph.node[i] for i in order]
        copies = [onnx.NodeProto() for _ in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del graph.node[:]
        graph.node.extend(copies)
    return True


def ort_default_domain_nodes(graph: onnx.GraphProto) -> bool:
    return any(n.op_type in ORT_DEFAULT_DOMAIN_OPS and n.domain in ("", "ai.onnx") for n in graph.node)


def as_ort_domain(skeleton: onnx.ModelProto) -> None:
    """In a copy made for the checker: ORT's default-domain ops moved to ORT's domain (main graph)."""
    moved = False
    for n in skeleton.graph.node:
        if n.op_type in ORT_DEFAULT_DOMAIN_OPS and n.domain in ("", "ai.onnx"):
            n.domain = _ORT_DOMAIN
            moved = True
    if moved and not any(o.domain == _ORT_DOMAIN for o in skeleton.opset_import):
        skeleton.opset_import.append(onnx.helper.make_opsetid(_ORT_DOMAIN, 1))
