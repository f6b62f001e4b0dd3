"""Paged-decode launch plans over batch x context, beside torch SDPA on a contiguous cache (GB/s of K/V).

    python tools/sweep_decode_plans.py --set h200|splits|wave [--passes N] [--json OUT.json]
    python tools/sweep_decode_plans.py --shapes 48x4096 8x32768:bf16 --plans planned w4s2h@4 w8s2h@n

A candidate is ``planned`` (what launch_plan.plan_paged_decode picks for this GPU) or ``VARIANT@SPLITS``:
VARIANT a compiled 16-bit decode variant named as its kernel's suffix (``w4s2h`` = 4 warps, 2 stages, head
groups; ``hc`` the cluster-reduce head groups, ``t`` TMA per kv head, ``b`` bulk copies, no suffix cp.async),
SPLITS an integer, ``n`` (the split count the 8-head-group plan, w8s2h, takes at this shape on this GPU) or
``n/2`` (ceil(n / 2)). Candidates that resolve to the same launch are timed once. With ``--lib-b PATH`` a candidate
prefixed ``b:`` (``b:planned``, ``b:w16s2t@1``) runs the same launch on that second kernel library, in the same
process and passes as the others: an A/B of two builds (docs/PERF.md, thirty-fourth round).

``--kv-dtype fp8`` sweeps the fp8 (e4m3) pool kernels instead (paged_decode_fp8; per-kv-head scales amax / 448):
VARIANT names its kernel's suffix the same way (``w4s3`` cp.async, ``w4s3t`` TMA, ``w8s2h`` head groups, ``w4s4hc``
cluster reduce; no ``b``), ``n`` is the fp8 w8s2h's split count, the check is against the float32 reference on the
dequantized K/V (TOL8, as the GPU tests'), and GB/s counts the pool's bytes (1 per element) while SDPA beside it
reads a 16-bit contiguous copy of the dequantized K/V (2 per element): % of SDPA compares bandwidths, not times.

Shapes: B x ctx (every sequence full), heads --heads (32/8), head size --head-dim (128), block --block (16),
fp16 unless the shape names bf16; random K/V in a pool whose blocks a shuffled table hands out (--table: also
in order, or each sequence's own span shuffled; TABLES). Every plan
is first checked against a float32 reference, on full and on ragged lengths; one that misses the tolerance
(tests/plugins/test_kernels_gpu.py's) is reported and never timed. Timing: tools/bench_timing.KernelTimer
with the read flush (as tools/bench_kernels.py's decode rows), N passes over the candidates and SDPA, every
other pass in reverse order; the medians of the passes, as GB/s of K/V (sum(seq_lens) * Hkv * D * 2 * 2
bytes) and % of SDPA. Prints a Markdown table (one row per shape; the best candidate bold), ``--json``
writes every pass.

Sets (docs/PERF.md, twenty-seventh to twenty-ninth rounds):
  h200    run 38's seven shapes (H32/8 D128 block 16 fp16) with planned, w8s2h s n, w8s3h s n,
          w4s3h ceil(n/2), w4s2h ceil(n/2): the H200 sweep owed since run 37b
  splits  run 39's split counts: planned, w4s2h s3 / s4 / s8, w8s2h s4 / s8 at the shapes run 37b left
          below 97 % of SDPA on the H100
  wave    the H100 shapes past one wave of the 8-head plan (B40 / 48 / 56 x ctx 4096 / 8192, and B19 / 28 /
          36 / 45 at ctx 4096): planned, w4s2h s3 / s4, w8s2h s4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_kernels, bench_timing
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnx_fuse.plugins import launch_plan as lp  # noqa: E402

#: relative-error tolerances against the float32 reference, as tests/plugins/test_kernels_gpu.py's TOL
TOL = {"float16": 4e-3, "bfloat16": 2.5e-2}
#: the fp8 pool's against its dequantized K/V (tests/plugins/test_kernels_gpu.py's TOL8)
TOL8 = {"float16": 4e-3, "bfloat16": 1e-2}
#: fp8 variant kinds by kernel suffix (launch_plan's variant tuples: (w, s), (w, s, "tma"), ...)
FP8_KINDS = {"": None, "t": "tma", "h": "heads", "hc": "cluster"}
DTYPES = {"fp16": "float16", "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}
EIGHT_HEADS = (8, 2, 3)  # w8s2h: the variant whose split count ``n`` names
EIGHT_HEADS_FP8 = (8, 2, "heads")  # its fp8 pool form


@dataclasses.dataclass(frozen=True)
class Shape:
    batch: int
    ctx: int
    dtype: str = "float16"
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    block: int = 16
    table: str = "shuffled"  # TABLES: the block order the table hands out
    kv_dtype: str | None = None  # "fp8": the e4m3 pool (paged_decode_fp8)

    @property
    def blocks(self) -> int:
        return self.ctx // self.block

    @property
    def label(self) -> str:
        dt = "" if self.dtype == "float16" else " bf16"
        tb = "" if self.table == "shuffled" else f" {self.table}"
        kv = f" {self.kv_dtype}" if self.kv_dtype else ""
        return f"B{self.batch} ctx{self.ctx}{dt}{kv}{tb}"

    def kv_bytes(self) -> int:
        """Bytes of K/V our kernels read: the pool's element size."""
        return lp.paged_decode_kv_bytes([self.ctx] * self.batch, self.kv_heads, self.head_dim,
                                        1 if self.kv_dtype == "fp8" else 2)

    def sdpa_bytes(self) -> int:
        """Bytes of K/V SDPA reads: a 16-bit contiguous cache, whatever the pool."""
        return lp.paged_decode_kv_bytes([self.ctx] * self.batch, self.kv_heads, self.head_dim, 2)


@dataclasses.dataclass(frozen=True)
class Candidate:
    spec: str
    variant: tuple[int, int, int] | None = None  # None: planned
    splits: int | str | None = None  # an int, "n" or "n/2"
    lib: str = "a"  # "b": run on the --lib-b library


_CAND_RE = re.compile(r"w(\d+)s(\d+)(hc|h|t|b|)@(\d+|n|n/2)")


def parse_candidate(spec: str, head_dim: int = 128, kv_dtype: str | None = None) -> Candidate:
    """``planned`` or VARIANT@SPLITS (module docstring), either maybe prefixed ``b:`` (run on the --lib-b
    library); ValueError for anything else, for a variant not compiled at ``head_dim`` (of the fp8 pool's
    kernels with ``kv_dtype="fp8"``) and for zero splits."""
    lib, body = ("b", spec[2:]) if spec.startswith("b:") else ("a", spec)
    if body == "planned":
        return Candidate(spec, lib=lib)
    m = _CAND_RE.fullmatch(body)
    if not m:
        raise ValueError(f"candidate {spec!r}: expected 'planned' or VARIANT@SPLITS, e.g. w4s2h@4, w8s2h@n, "
                         "w4s3h@n/2")
    if kv_dtype == "fp8":
        kind = FP8_KINDS.get(m[3], "?")
        variant = (int(m[1]), int(m[2])) + ((kind,) if kind else ())
        compiled = (lp.pa8_variants(head_dim) + lp.pa8_heads_variants(head_dim)
                    + lp.pa8_cluster_variants(head_dim)) if head_dim in lp.PA8_HEAD_DIMS else ()
    else:
        variant = (int(m[1]), int(m[2]), lp.PA_SUFFIX.index(m[3]))
        compiled = (lp.pa_variants(head_dim) + lp.pa_tma_variants(head_dim) + lp.pa_heads_variants(head_dim)
                    + lp.pa_cluster_variants(head_dim))
    if variant not in compiled:
        names = ", ".join(variant_name(v) for v in compiled)
        pool = " for the fp8 pool" if kv_dtype == "fp8" else ""
        raise ValueError(f"candidate {spec!r}: w{m[1]}s{m[2]}{m[3]} is not compiled{pool} at D={head_dim} "
                         f"({names})")
    splits = int(m[4]) if m[4].isdigit() else m[4]
    if splits == 0:
        raise ValueError(f"candidate {spec!r}: at least one split")
    return Candidate(spec, variant, splits, lib)


def variant_name(variant) -> str:
    """A variant tuple as its kernel's suffix: 16-bit (w, s, bulk code) or fp8 (w, s[, kind])."""
    w, s = variant[:2]
    kind = variant[2] if len(variant) > 2 else None
    suffix = lp.PA_SUFFIX[kind] if isinstance(kind, int) else {v: k for k, v in FP8_KINDS.items()}[kind]
    return f"w{w}s{s}{suffix}"


def plan_label(plan) -> str:
    if plan.kv_fp8:  # bulk 3 / 4: head groups / cluster (as the 16-bit codes); else TMA or cp.async
        suffix = lp.PA_SUFFIX[plan.bulk] if plan.bulk in (3, 4) else ("t" if plan.tma else "")
        return f"w{plan.warps}s{plan.stages}{suffix} s{plan.num_splits}"
    return f"{variant_name((plan.warps, plan.stages, plan.bulk))} s{plan.num_splits}"


def parse_shape(spec: str, **dims) -> Shape:
    """``BxCTX`` or ``BxCTX:dtype`` (fp16 / bf16); ``dims``: heads, kv_heads, head_dim, block."""
    m = re.fullmatch(r"(\d+)x(\d+)(?::(\w+))?", spec)
    if not m or (m[3] and m[3] not in DTYPES):
        raise ValueError(f"shape {spec!r}: expected BxCTX or BxCTX:fp16|bf16, e.g. 48x4096")
    shape = Shape(int(m[1]), int(m[2]), DTYPES[m[3] or "fp16"], **dims)
    if shape.batch < 1 or shape.ctx < shape.block or shape.ctx % shape.block:
        raise ValueError(f"shape {spec!r}: batch >= 1 and a context that is a multiple of the block ({shape.block})")
    return shape


SETS = {
    # run 38 (docs/PERF.md twenty-ninth round): run 37b's batch x context shapes, the 8-head groups at 2 and 3
    # stages at their own splits, the 4-head groups at half of them
    "h200": (((4, 32768), (8, 8192), (8, 32768), (16, 4096), (16, 16384), (32, 4096), (64, 4096)),
             ("planned", "w8s2h@n", "w8s3h@n", "w4s3h@n/2", "w4s2h@n/2")),
    # runs 39b-c: split counts where run 37b's plans read below 97 % of SDPA on the H100
    "splits": (((16, 4096), (40, 4096), (48, 4096), (48, 8192), (56, 4096), (32, 4096), (16, 16384)),
               ("planned", "w4s2h@3", "w4s2h@4", "w4s2h@8", "w8s2h@4", "w8s2h@8")),
    # the 8-head plan past one wave on the H100 (B48-56, run 39c; B40 fits one wave) and, at B19 / 28 / 36 / 45,
    # where a rule of w4s2h at 4 splits within 1.5 waves of two CTAs per SM would also apply (not yet measured)
    "wave": (((40, 4096), (40, 8192), (48, 4096), (48, 8192), (56, 4096), (56, 8192),
              (19, 4096), (28, 4096), (36, 4096), (45, 4096)),
             ("planned", "w4s2h@3", "w4s2h@4", "w8s2h@4")),
}
DEFAULT_PLANS = ("planned", "w8s2h@n", "w4s2h@n/2")


def eight_head_splits(shape: Shape, device: lp.DeviceInfo) -> int:
    """``n``: the splits plan_paged_decode gives w8s2h at this shape on ``device`` (one CTA per SM, the
    fewest that fill the last wave to 90 %)."""
    return _plan(shape, device, variant=EIGHT_HEADS_FP8 if shape.kv_dtype == "fp8" else EIGHT_HEADS).num_splits


def split_count(splits: int | str, n: int) -> int:
    """A candidate's split count: an int as given, "n" = n, "n/2" = ceil(n / 2)."""
    return {"n": n, "n/2": -(-n // 2)}.get(splits, splits) if isinstance(splits, str) else splits


def _plan(shape: Shape, device, **kw):
    return lp.plan_paged_decode(shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.block,
                                shape.blocks, shape.dtype, device=device, kv_dtype=shape.kv_dtype, **kw)


def resolve(shape: Shape, cand: Candidate, device: lp.DeviceInfo):
    """The PagedDecodePlan a candidate launches at ``shape`` on ``device`` (ValueError where the planner
    refuses it, e.g. a cluster reduce past 8 splits)."""
    if cand.variant is None:
        return _plan(shape, device)
    splits = cand.splits
    if isinstance(splits, str):
        splits = split_count(splits, eight_head_splits(shape, device))
    return _plan(shape, device, variant=cand.variant, num_splits=splits)


def plan_key(plan) -> tuple:
    """What makes two plans the same launch (timed once)."""
    return (plan.kernel, plan.num_splits, plan.part_tokens, plan.l2_promotion)


def resolve_all(shape: Shape, cands, device) -> tuple[list[dict], dict]:
    """One cell per candidate ({spec, plan label, ctas, key} or {spec, status 'refused: ...'}) and the
    distinct plans by key."""
    cells, plans = [], {}
    for c in cands:
        try:
            p = resolve(shape, c, device)
        except ValueError as e:
            cells.append({"spec": c.spec, "status": f"refused: {e}"})
            continue
        k = (c.lib,) + plan_key(p)  # the same launch on another library is another candidate
        plans.setdefault(k, p)
        cells.append({"spec": c.spec, "plan": plan_label(p), "ctas": math.prod(p.grid), "key": k, "status": "ok"})
    return cells, plans


def summarize(gbs: list[float]) -> float | None:
    return statistics.median(gbs) if gbs else None


def markdown_table(results: list[dict]) -> str:
    """One row per shape, one column per candidate spec (in the order first seen) and SDPA: the median
    GB/s, its % of SDPA's median and the plan; the fastest candidate of the row bold."""
    specs = list(dict.fromkeys(c["spec"] for r in results for c in r["cells"]))
    lines = ["| B, ctx (n) | " + " | ".join(f"`{s}`" for s in specs) + " | torch SDPA |",
             "|---" * (len(specs) + 2) + "|"]
    for r in results:
        sdpa = r["sdpa"].get("median")
        by_spec = {c["spec"]: c for c in r["cells"]}
        best = max((c["median"] for c in r["cells"] if c.get("median")), default=None)
        row = []
        for s in specs:
            c = by_spec.get(s)
            if c is None:
                row.append("")
            elif c.get("median") is None:
                row.append(f"{c.get('plan', '')} {c['status']}".strip())
            else:
                pct = f" ({100 * c['median'] / sdpa:.1f} %)" if sdpa else ""
                val = f"{c['median']:.0f}{pct}"
                row.append(f"{'**' + val + '**' if c['median'] == best else val} `{c['plan']}`")
        n = f" (n {r['n']})" if r.get("n") is not None else ""
        sd = f"{sdpa:.0f}" if sdpa else r["sdpa"].get("status", "-")
        lines.append(f"| {r['shape']}{n} | " + " | ".join(row) + f" | {sd} |")
    return "\n".join(lines)


# --- the GPU part ------------------------------------------------------------------------------------

#: block orders of the pool (--table): "shuffled" (the default, as the decode benches) hands the B * blocks
#: physical blocks out in a random order over the whole pool; "identity" gives sequence b the blocks b * blocks ..
#: in order (each sequence one contiguous span, as a contiguous cache); "local" gives it the same span as
#: identity in a random order (the pages of identity, the 2 KiB-grained order of shuffled at block 16 MQA):
#: the three separate the cost of where the blocks lie from the cost of their order
TABLES = ("shuffled", "identity", "local")


def block_table(torch, batch: int, blocks: int, order: str, g, dev: str = "cuda"):
    """int32 [batch, blocks] block table of a pool of batch * blocks blocks in ``order`` (TABLES)."""
    nb = batch * blocks
    if order == "shuffled":
        return torch.randperm(nb, device=dev, generator=g).to(torch.int32).view(batch, blocks).contiguous()
    span = torch.arange(nb, device=dev, dtype=torch.int32).view(batch, blocks)
    if order == "identity":
        return span.contiguous()
    if order == "local":
        perm = torch.stack([torch.randperm(blocks, device=dev, generator=g) for _ in range(batch)])
        return torch.gather(span, 1, perm).contiguous()
    raise ValueError(f"block order {order!r}: one of {', '.join(TABLES)}")


E4M3_NAN = 0x7F


def quant_e4m3(torch, pool):
    """uint8 e4m3 bytes of a [NB, BS, Hkv, D] pool and float32 per-kv-head scales amax / 448 (value = e4m3 *
    scale), as tools/bench_kernels.py's fp8 rows; in chunks of 4096 blocks (bounded float32 temporaries)."""
    sc = (pool.abs().amax(dim=(0, 1, 3)).float() / 448.0).clamp_min(1e-12).contiguous()
    b8 = torch.empty(pool.shape, dtype=torch.uint8, device=pool.device)
    for i in range(0, pool.shape[0], 4096):
        x = pool[i:i + 4096].float() / sc[None, None, :, None]
        b8[i:i + 4096] = x.clamp_(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return b8, sc


def dequant_e4m3(torch, b8, sc, dtype):
    """The values an e4m3 pool holds (e4m3 * scale), rounded to ``dtype``: the cache SDPA reads and the
    reference's input (the rounding, 2^-9 / 2^-12 relative per element, is far inside TOL8)."""
    out = torch.empty(b8.shape, dtype=dtype, device=b8.device)
    for i in range(0, b8.shape[0], 4096):
        out[i:i + 4096] = (b8[i:i + 4096].view(torch.float8_e4m3fn).float() * sc[None, None, :, None]).to(dtype)
    return out


def _reference(torch, q, kc, vc, lens):
    """float32 attention of one query per sequence over its first lens[b] keys ([B, Hkv, ctx, D] caches,
    kv heads repeated), a few sequences at a time (float32 temporaries of at most 2**28 elements each)."""
    import torch.nn.functional as F

    B, Hq, D = q.shape
    g = Hq // kc.shape[1]
    chunk = max(1, 2**28 // (Hq * kc.shape[2] * D))
    pos = torch.arange(kc.shape[2], device=q.device)
    outs = []
    for b0 in range(0, B, chunk):
        b1 = min(B, b0 + chunk)
        k = kc[b0:b1].float().repeat_interleave(g, 1)
        v = vc[b0:b1].float().repeat_interleave(g, 1)
        mask = (pos[None, :] < lens[b0:b1, None])[:, None, None, :]
        outs.append(F.scaled_dot_product_attention(q[b0:b1, :, None].float(), k, v, attn_mask=mask)[:, :, 0])
    return torch.cat(outs)


def run_shape(lib, bench, shape: Shape, cands, device, passes: int, seed: int = 1, dev: str = "cuda") -> dict:
    """Check every distinct plan of ``cands`` at ``shape`` (full and ragged lengths), then time the right
    ones and SDPA on a contiguous copy of the cache over ``passes`` interleaved passes (``bench(fn)`` ->
    milliseconds; ``dev``: the torch device, "cpu" in the tests with a stand-in library). ``lib``: the
    kernel library, or {"a": library, "b": library} for candidates on two libraries (``b:`` specs)."""
    import torch
    import torch.nn.functional as F

    from bench_kernels import rel_err

    cells, plans = resolve_all(shape, cands, device)
    dt = getattr(torch, shape.dtype)
    B, Hq, Hkv, D, ctx, bs = shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.ctx, shape.block
    g = torch.Generator(device=dev).manual_seed(seed)
    nb = B * shape.blocks
    k_pool = torch.randn(nb, bs, Hkv, D, device=dev, dtype=dt, generator=g)
    v_pool = torch.randn(nb, bs, Hkv, D, device=dev, dtype=dt, generator=g)
    tables = block_table(torch, B, shape.blocks, shape.table, g, dev)
    q = torch.randn(B, Hq, D, device=dev, dtype=dt, generator=g)
    out = torch.empty_like(q)
    full = torch.full((B,), ctx, dtype=torch.int32, device=dev)
    ragged = torch.randint(1, ctx + 1, (B,), device=dev, dtype=torch.int32, generator=g)
    ragged[0] = ctx
    fp8 = shape.kv_dtype == "fp8"
    scales = ()
    if fp8:  # e4m3 pools; the reference and SDPA see their dequantized values
        (k_pool, ks), (v_pool, vs) = quant_e4m3(torch, k_pool), quant_e4m3(torch, v_pool)
        scales = (ks, vs)
        k_deq, v_deq = dequant_e4m3(torch, k_pool, ks, dt), dequant_e4m3(torch, v_pool, vs, dt)
    else:
        k_deq, v_deq = k_pool, v_pool
    kc = k_deq[tables.long()].reshape(B, ctx, Hkv, D).transpose(1, 2).contiguous()
    vc = v_deq[tables.long()].reshape(B, ctx, Hkv, D).transpose(1, 2).contiguous()
    del k_deq, v_deq
    refs = {"full": _reference(torch, q, kc, vc, full), "ragged": _reference(torch, q, kc, vc, ragged)}
    # the ragged check reads pools whose slots past each sequence's end hold NaN (a read that is not
    # masked out shows; e4m3 NaN 0x7F in an fp8 pool), as the GPU tests' pools
    dead = (torch.arange(ctx, device=dev).view(shape.blocks, bs)[None] >= ragged.view(B, 1, 1))[..., None, None]
    nan = E4M3_NAN if fp8 else float("nan")
    pools = {"full": (k_pool, v_pool)}
    pools["ragged"] = tuple(torch.empty_like(pool).index_put_((tables.view(-1).long(),),
                                                              pool[tables.long()].masked_fill_(dead, nan)
                                                              .view(nb, bs, Hkv, D))
                            for pool in (k_pool, v_pool))
    ws = torch.empty(max([p.workspace_bytes for p in plans.values()] + [4]) // 4, dtype=torch.float32, device=dev)
    tol = (TOL8 if fp8 else TOL)[shape.dtype]

    libs = lib if isinstance(lib, dict) else {"a": lib}

    def ours(plan, lens="full", which="a"):
        seq = {"full": full, "ragged": ragged}[lens]
        kp, vp = pools[lens]
        if fp8:
            return lambda: libs[which].paged_decode_fp8(q, kp, vp, *scales, tables, seq, out, plan=plan, workspace=ws)
        return lambda: libs[which].paged_decode(q, kp, vp, tables, seq, out, plan=plan, workspace=ws)

    status, errs = {}, {}
    for k, p in plans.items():
        try:
            e = {}
            for name in ("full", "ragged"):
                out.fill_(float("nan"))
                ours(p, name, k[0])()
                if dev == "cuda":
                    torch.cuda.synchronize()
                e[name] = rel_err(out, refs[name])
            errs[k] = e
            bad = [f"{n} {x:.1e}" for n, x in e.items() if not x <= tol]  # NaN fails too
            status[k] = f"WRONG (rel err {', '.join(bad)} > {tol:.0e}): not timed" if bad else "ok"
        except Exception as ex:  # a launch error: this plan is out, the others go on
            status[k] = f"failed: {type(ex).__name__}: {str(ex)[:100]}"
    qs = q.view(B, Hq, 1, D)

    def sdpa():
        return F.scaled_dot_product_attention(qs, kc, vc, enable_gqa=True)
    sdpa_err = rel_err(sdpa().view(B, Hq, D), refs["full"])
    del pools["ragged"]
    timed = {k: ours(p, "full", k[0]) for k, p in plans.items() if status[k] == "ok"}
    timed["sdpa"] = sdpa
    gbs = {k: [] for k in timed}
    for pas in range(passes):
        order = list(timed.items())
        for k, fn in order[::-1] if pas % 2 else order:
            nbytes = shape.sdpa_bytes() if k == "sdpa" else shape.kv_bytes()
            gbs[k].append(nbytes / (bench(fn) * 1e-3) / 1e9)
    n = None
    try:
        n = eight_head_splits(shape, device)
    except ValueError:
        pass
    for c in cells:
        k = c.pop("key", None)
        if k is None:
            continue
        c["status"], c["rel_err"] = status[k], errs.get(k)
        c["gbs"] = gbs.get(k, [])
        c["median"] = summarize(c["gbs"])
    sd = {"gbs": gbs["sdpa"], "median": summarize(gbs["sdpa"]), "rel_err": sdpa_err}
    del k_pool, v_pool, kc, vc, ws, refs, pools
    if dev == "cuda":
        torch.cuda.empty_cache()
    return {"shape": shape.label, **dataclasses.asdict(shape), "n": n, "cells": cells, "sdpa": sd}


def _print_shape(r: dict) -> None:
    sdpa = r["sdpa"]["median"]
    for c in r["cells"]:
        if c.get("median") is None:
            print(f"  {r['shape']} | {c['spec']}: {c.get('plan', '')} {c['status']}", flush=True)
            continue
        passes = " / ".join(f"{x:.0f}" for x in c["gbs"])
        errs = ", ".join(f"{n} {x:.1e}" for n, x in (c.get("rel_err") or {}).items())
        print(f"  {r['shape']} | {c['spec']} = {c['plan']} ({c['ctas']} CTAs): {passes} GB/s, median "
              f"{c['median']:.0f} ({100 * c['median'] / sdpa:.1f} % of SDPA), rel err {errs}", flush=True)
    print(f"  {r['shape']} | torch SDPA: {' / '.join(f'{x:.0f}' for x in r['sdpa']['gbs'])} GB/s, median "
          f"{sdpa:.0f}, rel err {r['sdpa']['rel_err']:.1e}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    """The arguments, with ``shapes_`` (Shape list) and ``candidates`` (Candidate list) resolved; argument
    errors exit 2 (argparse) before any GPU work."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="sets: " + ", ".join(SETS))
    ap.add_argument("--set", choices=sorted(SETS), help="a named set of shapes and candidates")
    ap.add_argument("--shapes", nargs="+", metavar="BxCTX[:DT]", help="shapes instead of the set's")
    ap.add_argument("--plans", nargs="+", metavar="CAND", help="candidates instead of the set's (default: "
                    + " ".join(DEFAULT_PLANS) + ")")
    ap.add_argument("--dtype", choices=sorted(DTYPES), help="every shape in this dtype")
    ap.add_argument("--kv-dtype", choices=("fp8",), default=None,
                    help="the fp8 (e4m3) pool's kernels (paged_decode_fp8) instead of the 16-bit pool's")
    ap.add_argument("--heads", default="32/8", metavar="HQ/HKV", help="query / kv heads (32/8)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block", type=int, default=16, help="tokens per pool block (16)")
    ap.add_argument("--table", nargs="+", choices=TABLES, default=["shuffled"],
                    help="block orders: each shape is run once per order (shuffled; TABLES in the source)")
    ap.add_argument("--passes", type=int, default=3, help="timed passes over the candidates (3)")
    ap.add_argument("--flush", default="read", choices=("read", "zero", "none"),
                    help="the L2 flush before each timed call (tools/bench_timing.py; read, as the decode rows)")
    ap.add_argument("--json", default=None, metavar="OUT.json")
    ap.add_argument("--lib-b", default=None, metavar="PATH", help="a second kernel library: candidates "
                    "prefixed b: (b:planned, b:w16s2t@1) run on it, interleaved with the others (A/B of a build)")
    ap.add_argument("--dry-run", action="store_true", help="print the resolved plans for this GPU (or the "
                    "H200 / H100 planner defaults without one: --device) and time nothing")
    ap.add_argument("--device", choices=("h200", "h100"), default=None,
                    help="plan for this device's defaults instead of the GPU's (dry runs without a GPU)")
    a = ap.parse_args(argv)
    if not a.set and not a.shapes:
        ap.error("name a --set or give --shapes")
    if a.passes < 1:
        ap.error("--passes must be at least 1")
    m = re.fullmatch(r"(\d+)/(\d+)", a.heads)
    if not m or int(m[2]) < 1 or int(m[1]) % int(m[2]):
        ap.error(f"--heads {a.heads!r}: expected HQ/HKV with HKV dividing HQ, e.g. 32/8")
    dims = {"heads": int(m[1]), "kv_heads": int(m[2]), "head_dim": a.head_dim, "block": a.block}
    try:
        set_shapes, set_plans = SETS[a.set] if a.set else ((), DEFAULT_PLANS)
        shapes = ([parse_shape(s, **dims) for s in a.shapes] if a.shapes
                  else [Shape(b, c, **dims) for b, c in set_shapes])
        if a.dtype:
            shapes = [dataclasses.replace(s, dtype=DTYPES[a.dtype]) for s in shapes]
        if a.kv_dtype:
            shapes = [dataclasses.replace(s, kv_dtype=a.kv_dtype) for s in shapes]
        shapes = [dataclasses.replace(s, table=t) for s in shapes for t in dict.fromkeys(a.table)]
        a.candidates = [parse_candidate(s, a.head_dim, a.kv_dtype) for s in (a.plans or set_plans)]
    except ValueError as e:
        ap.error(str(e))
    if any(c.lib == "b" for c in a.candidates) and not a.lib_b:
        ap.error("b: candidates need --lib-b")
    a.shapes_ = shapes
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    shapes, cands = a.shapes_, a.candidates
    if a.dry_run:
        device = {"h200": lp.H200, "h100": lp.H100}.get(a.device) or lp.current_device()
        print(f"plans for {device.name} ({device.num_sms} SMs, {device.mem_bandwidth:.3g} B/s)")
        for s in shapes:
            cells, _ = resolve_all(s, cands, device)
            print(f"{s.label}: " + "; ".join(f"{c['spec']} = {c.get('plan', c['status'])}"
                                              + (f" ({c['ctas']} CTAs)" if "ctas" in c else "") for c in cells))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to sweep (--dry-run --device h100|h200 prints the plans)")
        return 2
    from bench_kernels import load_library
    from bench_timing import KernelTimer

    device = lp.current_device()
    print(f"device: {device.name}, {device.num_sms} SMs, memory {device.mem_bandwidth:.3g} B/s as planned for, "
          f"torch {torch.__version__}", flush=True)
    lib = load_library()
    if a.lib_b:  # the A/B library, loaded beside the first (ctypes' RTLD_LOCAL: each keeps its own symbols)
        from onnx_fuse.plugins.kernel_lib import KernelLib

        lib = {"a": lib, "b": KernelLib.load(Path(a.lib_b).resolve())}
        print(f"library b: {a.lib_b}", flush=True)
    bench = KernelTimer(a.flush, warmup_ms=25, rep_ms=150)
    print(f"timing: {a.passes} passes, each the median of about 150 ms of calls after an L2 flush of kind "
          f"{a.flush!r}; GB/s of K/V", flush=True)
    results = []
    for s in shapes:
        try:  # one shape's failure (memory, a launch error) must not cost the others' rows
            r = run_shape(lib, bench, s, cands, device, a.passes)
        except Exception as e:
            print(f"  {s.label}: failed: {type(e).__name__}: {e}", flush=True)
            torch.cuda.empty_cache()
            continue
        _print_shape(r)
        results.append(r)
    print()
    pool = " fp8 pool (GB/s of its 1-byte K/V; SDPA: 2-byte)" if a.kv_dtype else ""
    print(f"{device.name}, H{shapes[0].heads}/{shapes[0].kv_heads} D{shapes[0].head_dim} block {shapes[0].block}"
          f"{pool}, median of {a.passes} passes (GB/s of K/V, % of SDPA); n = the 8-head plan's split count")
    print()
    print(markdown_table(results))
    if a.json:
        Path(a.json).write_text(json.dumps({"device": dataclasses.asdict(device), "passes": a.passes,
                                            "flush": a.flush, "set": a.set, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
