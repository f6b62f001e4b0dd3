"""Lengths that are sums: a Concat's output along its axis holds its inputs' lengths added up.

onnx's inference leaves such a dim unknown unless every part is an int, so a KV cache's present
= Concat(past [.., P, ..], new [.., S, ..]) gets a name invented afresh on every value, and no
rule can prove two of them equal (a repeat_kv Reshape's ``-1`` solved against the present).
Shape inference names it instead (passes/_dim_source.py, ``known_dim``): the parts' sizes in
one canonical spelling, ``dim_sum``: symbol terms sorted, the int terms added into one last
term, joined by `` + `` (``p + s``, ``past_sequence_length + 1``); a computed length plus an int is
the one floor atom ``(L+c)//s`` (passes/_dim_products.py ``floor_plus``). ONNX compares dim names as
text, so one spelling per sum makes equal sums equal names; the rule language's checks evaluate
such a name as the expression it is (rewrite/_local_check.py).

Where the Concat's length already has a name (a present declared ``[batch, H, total, D]``), the
name stays and the relation is kept on the side: ``record_dim_sums`` stores ``{name: sum}`` in
the graph's metadata (``dim_sums(graph)``) for passes that bind concrete sizes to names (the mask
probe: ``total`` is P + S, whatever an exporter calls it).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._dim_products import _TOKEN, Dim, floor_plus, to_dim
from onnx_fuse.passes._shape_values import invented_name

#: graph.meta key of the {dim name: canonical sum} relations
META_KEY = "onnx_fuse.dim_sums"
_SEP = " + "


def _terms(d: Dim) -> list[str | int] | None:
    """A Dim's summands: an int, a symbol or product term, or the terms of a sum spelled so."""
    coef, atoms = d
    if not atoms:
        return [coef] if coef >= 0 else None
    if coef == 1 and len(atoms) == 1 and _SEP in atoms[0]:
        parts = atoms[0].split(_SEP)
        if not all(_plain(p) for p in parts):
            return None   # "2*(a + b)": not a sum of plain terms
        return [int(p) if p.isdigit() else p for p in parts]
    if any(invented_name(a) for a in atoms):
        return None   # onnx's unk__N: no fact (passes/_shape_values.py)
    if coef > 0 and all(_SEP not in a and to_dim(a) == (1, (a,)) for a in atoms):
        return ["*".join(([str(coef)] if coef != 1 else []) + list(atoms))]
    return None


def _from_terms(terms: list) -> Dim:
    consts = sum(t for t in terms if isinstance(t, int))
    names = sorted(t for t in terms if not isinstance(t, int))
    if not names:
        return consts, ()
    if len(names) == 1 and consts and (folded := floor_plus(names[0], consts)) is not None:
        return 1, (folded,)   # (L+2)//2 - 1 is (L)//2: one spelling for the floor and the sum
    if len(names) == 1 and not consts:
        return to_dim(names[0])
    return 1, (_SEP.join(names + ([str(consts)] if consts else [])),)


def _plain(term: str) -> bool:
    """An int, a symbol, or a product of them, spelled without spaces around a sum."""
    return term == term.strip() and all(_TOKEN.match(f) for f in term.split("*"))


def dim_sum(parts: list[Dim | None]) -> Dim | None:
    """The sum of ``parts`` in canonical form (an int Dim when every part is one); None when a
    part is unknown or not a plain term."""
    terms = []
    for p in parts:
        got = _terms(p) if p is not None else None
        if got is None:
            return None
        terms += got
    return _from_terms(terms)


def dim_diff(a: Dim | None, b: Dim | None) -> Dim | None:
    """``a - b`` where ``b``'s terms are among ``a``'s (``(p + s) - p`` is ``s``); else None."""
    ta, tb = (_terms(a) if a is not None else None), (_terms(b) if b is not None else None)
    if ta is None or tb is None:
        return None
    rest = [t for t in ta if not isinstance(t, int)]
    for t in (t for t in tb if not isinstance(t, int)):
        if t not in rest:
            return None
        rest.remove(t)
    const = sum(t for t in ta if isinstance(t, int)) - sum(t for t in tb if isinstance(t, int))
    if const < 0:
        return None
    return _from_terms(rest + ([const] if const else []))


def concat_axis(node: ir.Node, rank: int) -> int | None:
    a = node.attributes.get("axis")
    axis = a.value if a is not None and not a.is_ref() else None
    if not isinstance(axis, int) or not -rank <= axis < rank:
        return None
    return axis % rank


def record_dim_sums(graph: ir.Graph) -> int:
    """Store ``{name: sum}`` for every Concat whose length along its axis carries a name that
    is not already its inputs' sum (see the docstring); returns how many relations are known."""
    from onnx_fuse.passes._dim_source import _fact, known_dim

    found: dict[str, str] = {}
    for node in graph:
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or not node.outputs:
            continue
        out = node.outputs[0]
        axis = concat_axis(node, len(out.shape)) if out.shape is not None else None
        name = _fact(out.shape[axis]) if axis is not None else None
        if not isinstance(name, str) or any(i is None for i in node.inputs):
            continue
        total = dim_sum([known_dim(i, axis) for i in node.inputs])
        if total is not None and total[1] and total[1][0] != name and _SEP in total[1][0]:
            found[name] = total[1][0]
    graph.meta[META_KEY] = found
    return len(found)


def dim_sums(graph: ir.Graph | None) -> dict[str, str]:
    """The relations ``record_dim_sums`` stored on ``graph`` (empty before shape inference)."""
    return dict(graph.meta.get(META_KEY, {})) if graph is not None else {}
