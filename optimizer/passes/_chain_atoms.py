"""A Reshape / Transpose / Flatten chain followed on its input's dims as one permutation of that
input's axes split into exact factors ("atoms"), the form fold-layout-chains writes back as at most
Reshape, Transpose, Reshape (_static_chain.py)."""

from __future__ import annotations

from onnx_fuse.passes._dim_products import Dim, div, mul


def atoms(shape: list[Dim], steps: list[tuple[str, list]]):
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
