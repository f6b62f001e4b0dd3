"""verify's and the fuzzer's check of each PagedAttention on fp8 (e4m3) pools: its output against
the exact attention of its own query and new tokens over the past the harness wrote, within the
bound of what may differ (docs/verify.md, "fp8 pools: each attention against its own inputs").

The past in the pools is the harness's e4m3 bytes, read back here at the harness's own scales, so
a scale the graph wires wrong (or 5 % off) shows. The new tokens are rounded as the op's contract
says, e4m3(x / s) s (round to nearest even in float32, saturated at 448 s), up to a tie's other side
(contract_rounding); or, for the derivation's worst case, anywhere within u |x| + 2^-10 s of x
(u = 2^-4: 3 mantissa bits; 2^-10 s: half the subnormal step). For one query row (scores scale c,
visible keys j, N the new ones, p the exact weights, a sink counted as a key with a zero value
row), with dk, dv, dq how far each element may be from what the op read:

- each score moves by at most e_j = c sum_d (|q_d| dk_jd + dq_d (|k_jd| + dk_jd)); with
  Z = sum_j p_j exp(d_j) in [Zlo, Zhi] = [sum p_j exp(-e_j), sum p_j exp(e_j)] the weights
  p'_j = p_j exp(d_j) / Z are within p_j max(exp(e_j) / Zlo - 1, 1 - exp(-e_j) / Zhi) of p_j
  (W: the sum of those);
- the output is a convex combination of V's rows, and the weights' changes sum to 0, so
  o' - o = sum_j (p'_j - p_j)(v_j - m) + sum_{j in N} p'_j dv_j for any m; m the midrange of the
  visible rows gives, per element d,

      |o'_d - o_d| <= W (max_j v_jd - min_j v_jd) / 2 + sum_{j in N} p_j exp(e_j) / Zlo dv_jd

plus the op's float32 arithmetic (SCORE_GAMMA on every score, (L + 2) 2^-24 sum_j p_j |v_jd| on
the sum over L keys) and the rounding of its result to the output's type. The probe reads the
op's inputs and output from the model itself (extra graph outputs), so upstream error (a later
layer's new tokens carry the earlier layers' fp8 error) is in the op's inputs, not its error; the
inputs where the op reads them, in float32 after the reference harness's Casts (run_probe).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx

from onnx_fuse.targets.paged_kv_feeds import E4M3_U, F8, gather_pool, pools

__all__ = ["probe_model", "run_probe", "check_attention", "Fp8AttentionResult", "E4M3_SUB", "E4M3_MAX"]

#: half e4m3's subnormal step (2^-9), in units of the scale: the absolute rounding error below 2^-6
E4M3_SUB = 2.0 ** -10
#: e4m3fn's largest finite value; the op saturates x / s there
E4M3_MAX = 448.0
#: float32's unit roundoff: the kernels (and the CPU reference's float32 I/O) accumulate in it
F32_U = 2.0 ** -24


def SCORE_GAMMA(d: int) -> float:   # noqa: N802 - a constant of the head size
    """Relative error of a score computed in float32: d products summed (d + 2 roundings with the
    scale's), plus 5e-7 for a scale attribute passed with 7 significant digits."""
    return (d + 2) * F32_U + 5e-7
_PROBE = "fp8_probe"


@dataclasses.dataclass
class Fp8AttentionResult:
    name: str          # "attention <node name> (fp8 pools)"
    max_abs: float     # largest |op - exact|
    max_rel: float     # largest |op - exact| / |exact|
    mean_abs: float
    ratio: float       # largest |op - exact| / bound (<= 1 passes)
    passed: bool


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def probe_model(optimized: onnx.ModelProto) -> tuple[onnx.ModelProto, list[dict]]:
    """(a copy of ``optimized`` whose graph also outputs every fp8 PagedAttention's query, new K,
    new V, sinks and output; one entry per such node: those outputs' names, its pool inputs, its
    attributes). The pools' fp8 type is read from the graph inputs behind inputs 3 and 4."""
    f8_inputs = {vi.name for vi in optimized.graph.input if vi.type.tensor_type.elem_type == F8}
    nodes = [n for n in optimized.graph.node if n.op_type == "PagedAttention" and n.domain == "onnx_fuse"]
    pool_io = pools(optimized)
    inits = {t.name for t in optimized.graph.initializer}
    inputs = {vi.name for vi in optimized.graph.input}
    probe = onnx.ModelProto()
    probe.CopyFrom(optimized)
    # typed where the model says (prepare_session wraps float16 ones in Casts by their type);
    # ORT types the rest itself
    typed = {vi.name: vi for vi in probe.graph.value_info if vi.type.tensor_type.elem_type}
    have = {o.name for o in probe.graph.output}
    entries = []
    for k, node in enumerate(nodes):
        k_pool, v_pool = pool_io[2 * k][0], pool_io[2 * k + 1][0]
        if k_pool not in f8_inputs:
            continue
        entry = {"node": node.name or f"PagedAttention#{k}", "attrs": _attrs(node), "k_pool": k_pool, "v_pool": v_pool}
        for slot, key in ((0, "q"), (1, "k"), (2, "v"), (9, "sinks")):
            name = node.input[slot] if len(node.input) > slot else ""
            if not name:
                continue
            entry[key] = name
            if name not in have and name not in inits and name not in inputs:
                probe.graph.output.append(typed.get(name, onnx.ValueInfoProto(name=name)))
                have.add(name)
        out = node.output[0]
        if out not in have:
            probe.graph.output.append(typed.get(out, onnx.ValueInfoProto(name=out)))
            have.add(out)
        entry["out"] = out
        entries.append(entry)
    return probe, entries


def _expose_op_inputs(prepared: onnx.ModelProto, entries: list[dict]) -> onnx.ModelProto:
    """After prepare_session: each entry's q, k, v and sinks renamed to what its op reads, the
    float32 Cast prepare_session put in front of a float16 / bfloat16 input, its output to what
    the op wrote before the Cast back, and those made graph outputs. ORT's CPU provider runs a
    float16 MatMul in float32 and may drop the Cast pair between it and the op, so the op can
    read a value the float16 graph value shows rounded: read there, the probe sees the op's own
    inputs whatever ORT did upstream, and its own float32 result (no float16 rounding to allow)."""
    producer = {o: n for n in prepared.graph.node for o in n.output}
    have = {o.name for o in prepared.graph.output}
    for entry in entries:
        op = producer[entry["out"]]
        if op.op_type == "Cast" and op.input[0] in producer:   # the output Cast back to float16
            op = producer[op.input[0]]
        for slot, key in ((0, "q"), (1, "k"), (2, "v"), (9, "sinks"), ("out", "out")):
            name = op.output[0] if slot == "out" else (op.input[slot] if len(op.input) > slot else "")
            if key not in entry or not name or name == entry[key]:
                continue
            entry[key] = name
            if entry[key] not in have:
                prepared.graph.output.append(onnx.helper.make_tensor_value_info(
                    entry[key], onnx.TensorProto.FLOAT, None))
                have.add(entry[key])
    return prepared


def run_probe(optimized: onnx.ModelProto, run_feeds: dict, *, threads: int | None = None
              ) -> tuple[dict, list[dict], onnx.ModelProto]:
    """(the probe's outputs by name, probe_model's entries, the model they came from): the probe
    copy run as verify runs the model (ORT's optimizations off, onnx_fuse ops through their
    references), each entry's inputs read where its op reads them (_expose_op_inputs)."""
    import onnxruntime as ort

    from onnx_fuse.reference.ort_ops import prepare_session
    from onnx_fuse.targets.paged_kv_feeds import run_paged
    from onnx_fuse.verify import _session_options

    probe, entries = probe_model(optimized)
    opts = _session_options(threads=threads, ort_optimizations=False)
    prepared = _expose_op_inputs(prepare_session(probe, opts), entries)
    sess = ort.InferenceSession(prepared.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return run_paged(sess, prepared, run_feeds), entries, prepared


def _value(name: str, got: dict, feeds: dict, model: onnx.ModelProto) -> np.ndarray:
    if name in got:
        return np.asarray(got[name])
    if name in feeds:
        return np.asarray(feeds[name])
    for t in model.graph.initializer:
        if t.name == name:
            return onnx.numpy_helper.to_array(t)
    raise KeyError(name)


def _rounding_error(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Per element of x [..., Hkv, D], the most e4m3(x / s) s can be off (s per kv head)."""
    s = np.asarray(scale, np.float64)[:, None]
    ax = np.abs(x)
    inside = E4M3_U * ax + E4M3_SUB * s
    return np.where(ax <= E4M3_MAX * s, inside, ax - E4M3_MAX * s + inside)


def _unit_roundoff(dtype) -> float:
    dtype = np.dtype(dtype)
    if dtype == ml_dtypes.bfloat16:
        return 2.0 ** -8
    return float(np.finfo(dtype).eps) / 2 if dtype.kind == "f" else 0.0


def contract_rounding(x: np.ndarray, scale: np.ndarray, window: float = 2.0 ** -21) -> tuple[np.ndarray, np.ndarray]:
    """(the op's contract for new tokens x [..., Hkv, D]: e4m3(x / s) s, round to nearest even in
    float32, saturated; per element, how far another rounding could land from it when the op's
    x / s is within ``window`` (relative) of ours: the distance to the e4m3 value x (1 +- window)
    rounds to where that is another one, else 0). The default window covers a kernel's reciprocal
    multiply in place of the division; a wider one, inputs that reach the op unrounded (below)."""
    from onnx_fuse.reference.attention import dequantize_e4m3, quantize_e4m3

    x32 = np.asarray(x, np.float32)
    got = dequantize_e4m3(quantize_e4m3(x32, scale), scale)
    tie = np.zeros_like(got)
    for f in (1.0 + window, 1.0 - window):
        alt = dequantize_e4m3(quantize_e4m3((x32.astype(np.float64) * f).astype(np.float32), scale), scale)
        tie = np.maximum(tie, np.abs(alt - got))
    return got, tie


def bound_one(q, kn, vn, k_past, v_past, dq, dk, dv, *, num_heads: int, kv_heads: int, scale: float,
              window: int, sinks=None) -> tuple[np.ndarray, np.ndarray]:
    """(exact output, bound) of one sequence's attention, [S, Hq, D] each: q [S, Hq, D], the new
    K / V [S, Hkv, D] and how far each element of them may be from what the op uses (dq; dk, dv:
    e4m3's worst case, _rounding_error, or a tie's other rounding, contract_rounding), the past
    read back [P, Hkv, D] (exact)."""
    from onnx_fuse.reference.attention import resolve_scale

    S, Hq, D = q.shape
    group = Hq // kv_heads
    P = k_past.shape[0]
    L = P + S
    c = resolve_scale(scale, D)
    K = np.concatenate([k_past, kn]).astype(np.float64)      # [L, Hkv, D]
    V = np.concatenate([v_past, vn]).astype(np.float64)
    # the op's float32 arithmetic moves every score too: a D-term dot product, the scale (its
    # attribute reaches the CPU reference with 7 significant digits), each within
    # SCORE_GAMMA(D) sum_d |q_d| |k_jd|
    dk = np.concatenate([np.zeros_like(k_past, np.float64), dk]) + SCORE_GAMMA(D) * np.abs(K)
    dv = np.concatenate([np.zeros_like(v_past, np.float64), dv])
    K, V, dk, dv = (np.repeat(a, group, axis=1).transpose(1, 0, 2) for a in (K, V, dk, dv))   # [Hq, L, D]
    qh = q.astype(np.float64).transpose(1, 0, 2)                                               # [Hq, S, D]
    scores = np.matmul(qh, K.transpose(0, 2, 1)) * c                                           # [Hq, S, L]
    dqh = np.asarray(dq, np.float64).transpose(1, 0, 2)
    e = (np.matmul(np.abs(qh), dk.transpose(0, 2, 1))                                          # score moves
         + np.matmul(dqh, (np.abs(K) + dk).transpose(0, 2, 1))) * c
    qpos = P + np.arange(S)
    pos = np.arange(L)
    vis = pos[None, :] <= qpos[:, None]
    if window:
        vis &= pos[None, :] > qpos[:, None] - window
    vis = np.broadcast_to(vis, scores.shape)
    sink = None if sinks is None else np.asarray(sinks, np.float64).reshape(Hq, 1, 1)
    s = np.where(vis, scores, -np.inf)
    m = s.max(-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    w = np.where(vis, np.exp(s - m), 0.0)
    ws = np.exp(sink - m) if sink is not None else np.zeros_like(m)
    z = w.sum(-1, keepdims=True) + ws
    p, ps = w / z, ws / z                                                   # ps: the sink's weight
    e = np.where(vis, e, 0.0)
    zlo = (p * np.exp(-e)).sum(-1, keepdims=True) + ps
    zhi = (p * np.exp(e)).sum(-1, keepdims=True) + ps
    move = p * np.maximum(np.exp(e) / zlo - 1.0, 1.0 - np.exp(-e) / zhi)
    W = move.sum(-1, keepdims=True) + ps * np.maximum(1.0 / zlo - 1.0, 1.0 - 1.0 / zhi)   # [Hq, S, 1]
    out = np.matmul(p, V)                                                   # [Hq, S, D]
    # the midrange spread of the visible rows (the sink's zero row among them), per element
    big = np.where(vis[..., None], V[:, None], -np.inf)                     # [Hq, S, L, D]
    small = np.where(vis[..., None], V[:, None], np.inf)
    hi, lo = big.max(2), small.min(2)
    if sink is not None:
        hi, lo = np.maximum(hi, 0.0), np.minimum(lo, 0.0)
    spread = np.where(np.isfinite(hi - lo), (hi - lo) / 2.0, 0.0)
    vterm = np.matmul(p * np.exp(e) / zlo, dv)                              # new rows only: dv is 0 on the past
    # the op's float32 sum over the L keys: within (L + 2) F32_U sum_j p_j |v_j|
    mass = np.matmul(p, np.abs(V))
    bound = W * spread + vterm + (L + 2) * F32_U * mass
    return out.transpose(1, 0, 2), bound.transpose(1, 0, 2)


def check_attention(entry: dict, got: dict, feeds: dict, model: onnx.ModelProto,
                    worst_case: bool = False, input_roundoff: float | None = None) -> Fp8AttentionResult:
    """One fp8 PagedAttention of ``probe_model``: ``got`` the probe's outputs by name, ``feeds``
    the paged model's feeds (pools as e4m3 bytes, ``kv_scale_{k,v}.X``, block tables, seq_lens).

    ``input_roundoff``: how far (relative) the op's float inputs may be from the probed values.
    Default: the unit roundoff of the query's type as probed: float32 where run_probe read the op's
    own inputs (the Casts prepare_session puts in front of it); a float16 graph value read in front
    of those Casts may be the rounding of what the op read (ORT's CPU provider runs a float16
    MatMul in float32 and may drop the Cast pair), hence float16's roundoff there. The query
    carries it into every score; the new tokens' e4m3 rounding may then take the other side of a
    tie within it (contract_rounding's window)."""
    from onnx_fuse.reference.attention import dequantize_e4m3

    a = entry["attrs"]
    hq = int(a["num_heads"])
    hkv = int(a.get("kv_num_heads", 0) or hq)
    q = _value(entry["q"], got, feeds, model)
    out = _value(entry["out"], got, feeds, model)
    kn, vn = (_value(entry[x], got, feeds, model) for x in ("k", "v"))
    sinks = _value(entry["sinks"], got, feeds, model) if "sinks" in entry else None
    B, S = q.shape[0], q.shape[1]
    qh = q.reshape(B, S, hq, -1)
    D = qh.shape[-1]
    kn, vn = kn.reshape(B, S, hkv, D), vn.reshape(B, S, hkv, D)
    scales = []
    for pool in (entry["k_pool"], entry["v_pool"]):
        kind, _, x = pool.partition(".")
        scales.append(np.asarray(feeds[f"kv_scale_{kind[-1]}.{x}"], np.float32))
    ks, vs = scales
    kp, vp = (np.asarray(feeds[entry[x]]).view(np.uint8) for x in ("k_pool", "v_pool"))
    tables, lens = np.asarray(feeds["block_tables"]), np.asarray(feeds["seq_lens"], np.int64)
    errs, rels, ratios, means = [], [], [], []
    # the result rounded to its type, perhaps twice (the reference's float64 -> float32 -> float16):
    # one unit in the last place, not half, so a rounding-dominated element sits at half the bound
    eps = 2.0 * _unit_roundoff(out.dtype)
    u_in = _unit_roundoff(q.dtype) if input_roundoff is None else float(input_roundoff)
    for b in range(B):
        P = int(lens[b]) - S
        past = [dequantize_e4m3(gather_pool(pool, tables[b], P).transpose(1, 0, 2), sc)
                for pool, sc in ((kp, ks), (vp, vs))]
        if worst_case:   # any rounding within e4m3's u of the unrounded new tokens
            (k_b, dk), (v_b, dv) = ((x[b].astype(np.float64), _rounding_error(x[b], sc) + u_in * np.abs(x[b]))
                                    for x, sc in ((kn, ks), (vn, vs)))
        else:            # the contract's rounding, up to a tie's other side
            tie = max(2.0 ** -21, u_in * (1 + 2.0 ** -10))   # a hair past the roundoff: its edge counts
            (k_b, dk), (v_b, dv) = (contract_rounding(x[b], sc, tie) for x, sc in ((kn, ks), (vn, vs)))
        dq = u_in * np.abs(qh[b].astype(np.float64))
        exact, bound = bound_one(qh[b], k_b, v_b, past[0], past[1], dq, dk, dv, num_heads=hq, kv_heads=hkv,
                                       scale=float(a.get("scale", 0.0)), window=int(a.get("window", 0)),
                                       sinks=sinks)
        bound = bound + eps * (np.abs(exact) + bound) + 1e-30
        err = np.abs(out[b].reshape(S, hq, D).astype(np.float64) - exact)
        errs.append(err.max(initial=0.0))
        means.append(float(err.mean()) if err.size else 0.0)
        rels.append((err / np.maximum(np.abs(exact), 1e-12)).max(initial=0.0))
        ratios.append((err / bound).max(initial=0.0))
    ratio = float(max(ratios))
    return Fp8AttentionResult(f"attention {entry['node']} (fp8 pools)", float(max(errs)), float(max(rels)),
                              float(np.mean(means)), ratio, bool(ratio <= 1.0))
