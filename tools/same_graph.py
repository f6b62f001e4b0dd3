"""Is an export the same graph as its twin, without running either?

Exporter-drift sweeps (docs/holdout.md: fifth sweep part C, twentieth sweep) re-export corpus architectures with
another torch / onnxscript and ask first whether anything the optimizer reads changed. Compared: the nodes in order
(op, domain, every attribute with constant tensors by value, input / output arity), the initializers as a multiset
of (dtype, dims, bytes), the graph inputs and outputs (names, element types, dims), the opsets and the local
functions' names. Value and node names, doc strings and metadata are not compared: the optimizer reads none of them.

    python tools/same_graph.py tests/data/corpus /tmp/sweep27/h32      # twin of a_pt2150__kv__trained.onnx: a__kv__trained.onnx

Each file of NEW is matched to the file of TWINS with its name less a version tag (`_pt<digits>`, `_os<digits>`,
`_tf<digits>` after the architecture); prints one line per file: SAME, what differs, or `no twin`.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import re
import sys
from pathlib import Path


def _digest(tensor) -> tuple:
    from onnx import numpy_helper

    return tensor.data_type, tuple(tensor.dims), hashlib.sha1(numpy_helper.to_array(tensor).tobytes()).hexdigest()


def _attrs(node) -> tuple:
    import onnx

    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append((a.name, graph_key(a.g)[0]))
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.append((a.name, tuple(graph_key(g)[0] for g in a.graphs)))
        elif a.type == onnx.AttributeProto.TENSOR:
            out.append((a.name, _digest(a.t)))
        elif a.type == onnx.AttributeProto.TENSORS:
            out.append((a.name, tuple(_digest(t) for t in a.tensors)))
        else:
            out.append((a.name, repr(onnx.helper.get_attribute_value(a))))
    return tuple(sorted(out))


def _value(v) -> tuple:
    t = v.type.tensor_type
    return v.name, t.elem_type, tuple(d.dim_param or d.dim_value for d in t.shape.dim)


def graph_key(graph) -> tuple:
    """(nodes, initializer multiset, inputs, outputs) of one graph, names of values left out."""
    nodes = [(n.op_type, n.domain, _attrs(n), len(n.input), len(n.output)) for n in graph.node]
    inits = collections.Counter(_digest(t) for t in graph.initializer)
    return nodes, inits, [_value(v) for v in graph.input], [_value(v) for v in graph.output]


def differences(a, b) -> list[str]:
    """What differs between two ModelProtos, one short phrase per part; [] when the same graph."""
    ka, kb = graph_key(a.graph), graph_key(b.graph)
    out = []
    if ka[0] != kb[0]:
        ops_a = collections.Counter(n[0] for n in ka[0])
        ops_b = collections.Counter(n[0] for n in kb[0])
        moved = {op: ops_b[op] - ops_a[op] for op in sorted(ops_a | ops_b) if ops_a[op] != ops_b[op]}
        first = next((i for i, (x, y) in enumerate(zip(ka[0], kb[0])) if x != y), min(len(ka[0]), len(kb[0])))
        out.append(f"nodes {len(ka[0])} -> {len(kb[0])}, first difference at node {first}"
                   + (f", ops {moved}" if moved else ", same ops"))
    if ka[1] != kb[1]:
        out.append(f"initializers {sum(ka[1].values())} -> {sum(kb[1].values())}, "
                   f"{sum((ka[1] - kb[1]).values())} differ")
    for part, i in (("inputs", 2), ("outputs", 3)):
        if ka[i] != kb[i]:
            changed = [f"{x[0]} {x[2]} -> {y[2]}" if x[0] == y[0] else f"{x[0]} -> {y[0]}"
                       for x, y in zip(ka[i], kb[i]) if x != y]
            out.append(f"{part} " + ("; ".join(changed) if changed else f"{len(ka[i])} -> {len(kb[i])}"))
    opsets = [{o.domain: o.version for o in m.opset_import} for m in (a, b)]
    if opsets[0] != opsets[1]:
        out.append(f"opsets {opsets[0]} -> {opsets[1]}")
    if [f.name for f in a.functions] != [f.name for f in b.functions]:
        out.append("local functions differ")
    return out


def twin_name(name: str) -> str:
    """a_pt2150__kv__trained.onnx -> a__kv__trained.onnx (the version tag of a drift set's architecture)."""
    return re.sub(r"_(pt|os|tf)\d+(?=__)", "", name, count=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("twins", help="folder of the reference exports (e.g. tests/data/corpus)")
    ap.add_argument("new", help="folder of the new exports")
    ns = ap.parse_args(argv)
    twins, new = Path(ns.twins), Path(ns.new)
    for folder in (twins, new):
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    import onnx

    files = sorted(new.glob("*.onnx"))
    if not files:
        print(f"error: no .onnx files in {new}", file=sys.stderr)
        return 2
    same = 0
    for f in files:
        twin = twins / twin_name(f.name)
        if not twin.exists():
            print(f"{f.name}: no twin")
            continue
        try:
            diff = differences(onnx.load(str(twin)), onnx.load(str(f)))
        except Exception as exc:  # a truncated file: say which and go on
            print(f"{f.name}: cannot compare ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        same += not diff
        print(f"{f.name}: {'SAME' if not diff else '; '.join(diff)}")
    print(f"same graph: {same} of {len(files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
