"""Fuzz motif for GroupNorm as the torch exporters write it (rules/norm/group_norm.yaml), which no other family
draws (none writes InstanceNormalization):

  group_norm  x [B, C, *spatial] (rank 3: audio / 1-D conv stems [B, C, T]; rank 4: UNet / VAE [B, C, H, W]), a
              Conv before it sometimes; viewed as [B, G, -1] by a Reshape whose shape is a constant ([0, G, -1], or
              [B, G, -1] for a static batch) or TorchScript's Concat(Shape(x)[:1], [G, -1]); InstanceNormalization
              with unit scale and zero bias (epsilon left out, 1e-5 or 1e-6); a Reshape back to x's shape (Shape(x),
              a constant, or Concat(Shape(x)[:1], [C, *spatial])) and the per-channel affine as Mul / Add with
              [C, 1, ...] tables (affine=False: none); then SiLU (x * Sigmoid(x)) and a residual Add, sometimes.
              G among C's divisors: 1 (one group, a LayerNorm over C * spatial), C (InstanceNorm), or between.

Other forms and near misses (traps), which a rewrite must get right by value: the affine tables [1, C, 1, ...] (the
same numbers, another rank), the instance norm's scale not all ones or its bias not all zeros, the batch merged into
the groups ([1, B * G, -1]: the same statistics), the groups cut on the last axis ([B, -1, G]: other statistics),
the view back flattening the spatial axes ([B, C, -1], gamma [C, 1]), a piece also a graph output.

fuzz_motifs.make_case draws a case of this family for S36_SHARE of the seeds from a side stream of its own
(S36_SALT), checked after the other families, under which no seed a test names moves.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import Builder, Dim

#: share of the motif-graph seeds that are session-36 cases (a side stream of the seed decides)
S36_SHARE = 0.06
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119 whose
#: graphs have an If (test_fuzz_control_flow counts those)
S36_SALT = 0x5186
VIEWS = ("const", "concat")
BACKS = ("shape", "const", "concat")
NEAR = ("inorm-scale", "inorm-bias", "batch-merged", "groups-last", "back-flat")
I64 = TensorProto.INT64


def _batch_of(b: Builder, x: str) -> str:
    """Shape(x)[:1] as TorchScript writes it: a Slice of the Shape, or Unsqueeze(Gather(Shape, 0))."""
    s = b.op("Shape", [x])
    if b.p(0.5):
        return b.op("Slice", [s, b.ints([0]), b.ints([1])])
    return b.op("Unsqueeze", [b.op("Gather", [s, b.ints(0)], axis=0), b.ints([0])])


def _shape(b: Builder, x: str, how: str, static: list[Dim], tail: list[int]) -> str:
    """A Reshape target: ``static`` as a constant (a symbolic batch written 0), or Concat(Shape(x)[:1], tail)."""
    if how == "const":
        return b.ints([d if isinstance(d, int) else 0 for d in static])
    return b.op("Concat", [_batch_of(b, x), b.ints(tail)], axis=0)


def _tables(b: Builder, c: int, rank: int, lead: bool) -> tuple[str, str]:
    shape = ([1] if lead else []) + [c] + [1] * (rank - 2)
    gamma = 1.0 + 0.2 * b.rng.standard_normal(shape)
    return b.const(gamma, stem="gamma"), b.const(0.1 * b.rng.standard_normal(shape), stem="beta")


def motif_group_norm(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    bsz, c, spatial = shape[0], int(shape[1]), shape[2:]
    rank = len(shape)
    static_sp = all(isinstance(d, int) for d in spatial)
    g = int(b.pick([d for d in (1, 2, 4, c // 2, c) if d and c % d == 0]))
    near = b.pick(["none"] * 8 + list(NEAR))
    if near == "batch-merged" and not isinstance(bsz, int) or near == "groups-last" and not static_sp:
        near = "none"
    if near == "back-flat" and rank == 3:
        near = "none"
    b.trap(f"gn-rank{rank}")
    b.trap(f"gn-groups-{'one' if g == 1 else 'all' if g == c else 'some'}")
    if near != "none":
        b.trap(f"near-{near}")
    # the view [B, G, -1] (or a near miss's)
    if near == "batch-merged":
        rows, r = b.rt(bsz) * g, b.op("Reshape", [x, b.ints([1, b.rt(bsz) * g, -1])])
    elif near == "groups-last":
        rows = c * int(np.prod(spatial)) // g
        r = b.op("Reshape", [x, b.ints([0 if not isinstance(bsz, int) else bsz, -1, g])])
    else:
        view = b.pick(VIEWS)
        b.trap(f"gn-view-{view}")
        rows, r = g, b.op("Reshape", [x, _shape(b, x, view, [bsz, g, -1], [g, -1])])
    one, zero = np.ones(rows), np.zeros(rows)
    if near == "inorm-scale":
        one = one + 0.3 * b.rng.standard_normal(rows)
    if near == "inorm-bias":
        zero = zero + 0.3 * b.rng.standard_normal(rows)
    eps = b.pick([None, 1e-5, 1e-6])
    attrs = {} if eps is None else {"epsilon": float(eps)}
    i = b.op("InstanceNormalization", [r, b.const(one, stem="ones"), b.const(zero, stem="zeros")], **attrs)
    b.maybe_expose(i, 0.04)
    # back to x's shape
    if near == "back-flat":
        back = b.op("Reshape", [i, b.ints([0 if not isinstance(bsz, int) else bsz, c, -1])])
        rank_t = 3
    else:
        how = b.pick(BACKS) if static_sp else b.pick(["shape", "shape"])
        b.trap(f"gn-back-{how}")
        target = b.op("Shape", [x]) if how == "shape" else _shape(b, x, how, [bsz, c, *spatial], [c, *spatial])
        back = b.op("Reshape", [i, target])
        rank_t = rank
    y = back
    if b.p(0.8):   # affine=True
        lead = b.p(0.15)
        if lead:
            b.trap("gn-tables-lead1")
        gamma, beta = _tables(b, c, rank_t, lead)
        y = b.op("Mul", [y, gamma]) if b.p(0.8) else b.op("Mul", [gamma, y])
        y = b.op("Add", [y, beta])
    else:
        b.trap("gn-no-affine")
    if near == "back-flat":
        return y
    b.maybe_expose(y, 0.04)
    if b.p(0.6):   # the UNet ResNet block's SiLU
        b.trap("gn-silu")
        y = b.op("Mul", [y, b.op("Sigmoid", [y])])
    return b.op("Add", [x, y]) if b.p(0.3) else y


def build_s36(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """x [B, C, *spatial] (a Conv before the GroupNorm sometimes), then the motif, its output the graph's."""
    bsz = b.dim("batch", (1, 2, 3), 0.6)
    c = int(b.pick([4, 6, 8, 16]))
    rank = int(b.pick([3, 4, 4]))
    spatial = [b.dim("t", (3, 5, 8), 0.5)] if rank == 3 else [b.dim("h", (2, 3), 0.4), b.dim("w", (2, 4), 0.4)]
    motifs = ["group_norm"]
    if b.p(0.4):
        cin = int(b.pick([3, 4]))
        x0 = b.input([bsz, cin, *spatial], stem="pixels")
        k = [3] * (rank - 2)
        x = b.op("Conv", [x0, b.weight([c, cin, *k], scale=0.3), b.const(0.1 * b.rng.standard_normal([c]), stem="bias")],
                 kernel_shape=k, pads=[1] * (2 * (rank - 2)))
        motifs.insert(0, "conv")
    else:
        x = b.input([bsz, c, *spatial], stem="feat")
    b.output(motif_group_norm(b, x, [bsz, c, *spatial], opset))
    return motifs
