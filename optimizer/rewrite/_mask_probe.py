"""Whether an additive attention mask is causal, decided on its values: the expression functions
``causal_mask(mask, q, past)`` and ``sliding_window(mask, q, past)`` of rule checks (docs/rules.md).

The nodes computing the mask (from attention_mask, positions and shapes; never activations) are
cut out and run in ONNX Runtime for one sequence with P cached and S new tokens: attention_mask
all ones, positions P..P+S-1, every Shape given the concrete shape of its input, other integer
inputs (token types) 0, then all 1 and in runs of 0s and 1s: a mask that changes with them is
refused (_varies), as the probe cannot know their values. The mask is
causal when new token i (at position P+i) keeps exactly the keys 0..P+i (bias 0) and masks the
others (bias <= -1e4 or -inf; a bfloat16 cone runs through emulate_bf16, as ORT's CPU provider
has no bfloat16 Where). P is chosen beyond every integer constant of those nodes, so a window
written as a constant W (Mistral, Gemma 2: a query sees its last W keys) masks keys the
causal mask keeps, whichever exporter wrote the comparison. Anything else (a bias on kept keys,
a mask read from an input, a cone that cannot run) is not proven causal: the function raises
EvalFailure with the reason, which the rule's refusal carries.

``sliding_window`` gives the window W of a causal banded mask (new token at position p keeps
exactly the keys max(0, p - W + 1)..p; HF's sliding_window), 0 for a plain causal one, and
refuses anything else. It probes more than one length, so that every position where the mask
could change its form is tried: the band (and its width) must be the same everywhere.

The key-padding proofs (padding_mask, key_padding, causal_key_padding, cache_key_padding) run this
module's probe from rewrite/_key_padding_proof.py.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.passes._dim_products import same_dim
from onnx_fuse.passes._dim_sums import dim_sums
from onnx_fuse.rewrite._expr import EvalFailure

# Nodes in a mask's cone: transformers' masking_utils and Optimum's mask code stay well under this.
_CONE_LIMIT = 512
# Integer constants below this bound the probe length (larger ones are sentinels: INT64_MAX ends
# of Slice, INT32_MAX clips); the probe materializes an [S, P+S] mask, so this is also its cost.
_MAX_WINDOW = 1 << 20
_MIN_PAST = 16
_NEW = 3          # new tokens when the query length is dynamic: several rows, offset diagonal
# a kept key has bias 0; a masked one at most this (finfo.min, -inf, -1e4; bfloat16 stores -1e4 as -9984)
_MASKED = -9984.0
_HEAVY = {"MatMul", "Gemm", "Conv", "Einsum", "Softmax", "LayerNormalization", "RMSNormalization",
          "Attention"}
# probe values (or why the probe did not run; the EvalFailure of one that varies), by probe model
_RESULTS: dict[bytes, tuple[np.ndarray | None, str | None] | EvalFailure] = {}
_RESULT_LIMIT = 64


def _const(v: ir.Value) -> np.ndarray | None:
    from onnx_fuse.rewrite._local_check import _const_array

    return _const_array(v)


# meta key of a [B, T] graph input that _key_padding_proof probes as the attention mask although its
# name does not say so (an exporter's or a renaming tool's name): fed and bound like one while proven
_MASK_ROLE = "onnx_fuse.attention_mask_role"
# on a key mask the probe feeds that marks masked keys (True = masked: a [B, 1, 1, T] bool input): fed negated
_MASK_INVERTED = "onnx_fuse.key_mask_inverted"


def _is_mask_input(v: ir.Value) -> bool:
    return "mask" in (v.name or "").lower() or bool(v.meta.get(_MASK_ROLE))


def _feedable(v: ir.Value) -> bool:
    """A graph input the probe can feed: masks and integer inputs (ids, positions)."""
    return v.dtype is not None and (_is_mask_input(v) or v.dtype.is_integer()
                                    or v.dtype == ir.DataType.BOOL)


def _cone(mask: ir.Value, cut: ir.Value | None = None) -> tuple[list[ir.Node], set[int]]:
    """The nodes computing ``mask`` from constants and feedable graph inputs, in order, and the
    ids of the Shape/Size nodes among them whose input is not computable that way (an activation,
    a past tensor): those become constants of the input's shape. ``cut``: a computed value the
    probe feeds as the attention mask (its producers are left out; _key_padding_proof's key mask)."""
    order: list[ir.Node] = []
    as_const: set[int] = set()
    state: dict[int, bool] = {}   # value id -> computable (once visited)

    def ok(v: ir.Value, depth: int) -> bool:
        if id(v) in state:
            return state[id(v)]
        node = v.producer()
        if v is cut:
            state[id(v)] = True
        elif _const(v) is not None:
            state[id(v)] = True
        elif node is None:
            state[id(v)] = _feedable(v)
        elif len(order) >= _CONE_LIMIT:
            raise EvalFailure(f"the mask is computed by more than {_CONE_LIMIT} nodes")
        elif (node.domain not in ("", "ai.onnx") or node.op_type in _HEAVY or depth > 200
              or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values())):
            state[id(v)] = False
        elif node.op_type in ("Shape", "Size"):
            x = node.inputs[0]
            # a past tensor, an activation (with a cut: any graph input) -> its shape is a constant
            if (cut is not None and x.is_graph_input()) or not ok(x, depth + 1):
                as_const.add(id(node))
            order.append(node)
            state[id(v)] = True
        else:
            good = all(ok(i, depth + 1) for i in node.inputs if i is not None)
            if good:
                order.append(node)
            for o in node.outputs:
                state[id(o)] = good
        return state[id(v)]

    if not ok(mask, 0):
        raise EvalFailure("the mask is not computed from masks, positions and shapes alone")
    return order, as_const


def _new_tokens(q: ir.Value) -> tuple[int, ...]:
    """The query lengths to probe: q's when static; else several rows (_NEW), then one. A decode
    step whose length is fixed at 1 upstream (a static hidden state) can leave q's length
    symbolic (RoPE tables of Range(P, P + 1) broadcast against it); its mask cone then holds that
    1 as a constant and cannot run, or gives P + 1 keys, at any other length."""
    sd = q.shape.dims[2]   # q is 4-D: causal_mask checked it (_lengths' check)
    return (sd,) if isinstance(sd, int) else (_NEW, 1)


def _lengths(q: ir.Value, past: ir.Value, cone: list[ir.Node], s: int) -> tuple[int, dict[str, int]]:
    """(P, symbol values) for S = ``s`` new tokens: P cached ones past every integral constant of
    the cone (the past's length when it is static)."""
    if q.shape is None or past.shape is None or len(q.shape) != 4 or len(past.shape) != 4:
        raise EvalFailure("q and the past must be 4-D with known shapes")
    env: dict[str, int] = {}
    sd, pd = q.shape.dims[2], past.shape.dims[2]
    big = max([c for c in _int_constants(cone) if c > 1], default=0)
    p = pd if isinstance(pd, int) else max(_MIN_PAST, big + 2)
    for d, val in ((sd, s), (pd, p), (q.shape.dims[0], 1), (past.shape.dims[0], 1)):
        if not isinstance(d, int) and getattr(d, "value", None):
            env[d.value] = val
    return p, env


def _dims_of(v: ir.Value, dims: Any) -> list[int]:
    from onnx_fuse.rewrite._local_check import Unchecked

    try:
        return dims.concrete(v.shape)
    except Unchecked as exc:
        raise EvalFailure(f"shape of {v.name!r} for the mask probe: {exc}") from None


def _feed(v: ir.Value, shape: list[int], p: int, s: int, fill: int = 0, as_mask: bool = False,
          extra_keys: int = 0) -> np.ndarray:
    """attention_mask-like inputs (and ``as_mask``: a cut key mask) all kept over P + S keys (and
    ``extra_keys`` more), position-like ones P..P+S-1, other ints 0 (``fill``: 1 all ones, 2 runs of
    two zeros and two ones along the last axis: _varies)."""
    name = (v.name or "").lower()
    try:
        dtype = np.dtype(v.dtype.numpy())
    except Exception:
        raise EvalFailure(f"the mask reads {v.name!r} of dtype {v.dtype}") from None
    if as_mask or _is_mask_input(v):
        if len(shape) >= 1:
            shape = [*shape[:-1], p + s + extra_keys]
        return np.ones(shape, dtype)
    if "pos" in name and shape and np.issubdtype(dtype, np.integer):
        shape = [*shape[:-1], s]
        return np.broadcast_to(np.arange(p, p + s, dtype=dtype), shape).copy()
    if np.issubdtype(dtype, np.integer):
        if fill == 1:
            return np.ones(shape, dtype)
        if fill == 2 and shape:
            return np.broadcast_to((np.arange(shape[-1]) % 4 >= 2).astype(dtype), shape).copy()
        return np.zeros(shape, dtype)
    raise EvalFailure(f"the mask is computed from the input {v.name!r}")


def _other_ints(cone: list[ir.Node]) -> dict[int, ir.Value]:
    """The integer graph inputs _feed fills with zeros (neither masks nor positions: token types,
    ids) whose values the cone reads (not only their shape), by id."""
    found = {}
    for n in cone:
        for v in n.inputs if n.op_type not in ("Shape", "Size") else ():
            name = (v.name or "").lower() if v is not None else ""
            if (v is not None and v.is_graph_input() and not _is_mask_input(v) and "pos" not in name
                    and v.dtype is not None and v.dtype.is_integer()):
                found[id(v)] = v
    return found


def _probe_model(cone: list[ir.Node], as_const: set[int], mask: ir.Value, p: int, s: int, env: dict[str, int],
                 opset: int, batch: int = 1, drop: tuple[ir.Value, np.ndarray] | None = None, fill: int = 0,
                 cut: ir.Value | None = None, extra_keys: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``batch``: the value of symbols on a leading axis that q and the past do not bind; ``drop``:
    (an attention-mask input, a 0/1 array broadcast to its feed) zeroes those of its entries;
    ``fill``: how integer inputs that are neither masks nor positions are filled (_feed); ``cut``:
    a computed value fed as the attention mask (_cone's); ``extra_keys``: the attention mask fed
    that many columns beyond P + S (a mask longer than the keys, which a cone may cut)."""
    from onnx_fuse.rewrite._local_check import _Dims

    names: dict[int, str] = {}

    def name(v: ir.Value) -> str:
        return names.setdefault(id(v), f"v{len(names)}")

    class _ProbeDims(_Dims):
        """Symbols not bound by q and the past (an exporter's or shape inference's names for the
        batch and the new tokens): 1 on the leading axis, S elsewhere; a name shape inference
        related to a sum (a present declared [.., total, ..] that is Concat(past, new):
        passes/_dim_sums.py) takes that sum's value, P + S, whatever its name."""

        def value(self, name: str, axis: int) -> int:
            if name not in self.values and name.isidentifier() and name not in self.sums:
                self.values[name] = batch if axis == 0 else s
            return super().value(name, axis)

    dims = _ProbeDims(dim_sums(mask.graph))
    dims.values.update(env)
    # an attention mask's keys are P + S (_feed): another input declared over the same symbol
    # (Gemma 3's token_type_ids [batch, total_sequence]) is as long
    for v in {id(i): i for n in cone for i in n.inputs if i is not None and (i.is_graph_input() or i is cut)}.values():
        last = v.shape.dims[-1] if v.shape is not None and len(v.shape) else None
        if (v is cut if cut is not None else _is_mask_input(v)) and getattr(last, "value", None) and (
                last.value not in dims.values):
            dims.values[last.value] = p + s + extra_keys
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    inputs: list[onnx.ValueInfoProto] = []
    feeds: dict[str, np.ndarray] = {}
    made = {id(o) for n in cone for o in n.outputs}
    varied = _other_ints(cone) if fill else {}
    for node in cone:
        if id(node) in as_const:
            shape = _dims_of(node.inputs[0], dims)   # a present's P + S: its name says so
            if node.op_type == "Size":
                arr = np.asarray(int(np.prod(shape)), np.int64)
            else:
                start = node.attributes["start"].value if "start" in node.attributes else 0
                end = node.attributes["end"].value if "end" in node.attributes else None
                arr = np.asarray(shape[start:end], np.int64)
            inits.append(onnx.numpy_helper.from_array(arr, name(node.outputs[0])))
            continue
        for v in node.inputs:
            if v is None or id(v) in made or id(v) in names:
                continue
            c = _const(v)
            if c is not None:
                inits.append(onnx.numpy_helper.from_array(c, name(v)))
            elif v.is_graph_input() or v.producer() is None or v is cut:
                arr = _feed(v, _dims_of(v, dims), p, s, fill if id(v) in varied else 0, as_mask=v is cut,
                            extra_keys=extra_keys)
                if drop is not None and v is drop[0]:
                    pat = drop[1]
                    if pat.ndim == 2 and arr.ndim > 2:   # a [B, 1, 1, T] key mask: the pattern on its first and last axes
                        pat = pat.reshape(pat.shape[0], *([1] * (arr.ndim - 2)), pat.shape[1])
                    try:
                        arr = (arr * np.broadcast_to(pat, arr.shape)).astype(arr.dtype)
                    except ValueError:   # a [B, T] pattern that does not fit the fed value
                        raise EvalFailure(f"the key mask {v.name!r} of shape {list(arr.shape)} is not [batch, keys]") from None
                if v.meta.get(_MASK_INVERTED) and arr.dtype == np.bool_:
                    arr = np.logical_not(arr)   # 1 = kept fed as False = not masked
                inputs.append(onnx.helper.make_tensor_value_info(   # its name in the reasons: in the cache keys
                    name(v), onnx.helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape), doc_string=v.name or ""))
                feeds[name(v)] = arr
            else:
                raise EvalFailure(f"the mask reads {v.name!r}, which is not computed from masks, positions and shapes")
        proto = onnx.NodeProto(op_type=node.op_type, name=f"n{len(nodes)}")
        proto.input.extend("" if v is None else name(v) for v in node.inputs)
        proto.output.extend(name(o) for o in node.outputs)
        proto.attribute.extend(ir.serde.serialize_attribute(a) for a in node.attributes.values())
        nodes.append(proto)
    out = onnx.helper.make_tensor_value_info(name(mask), onnx.helper.np_dtype_to_tensor_dtype(
        np.dtype(mask.dtype.numpy())), None)
    # the cone's types, for emulate_bf16 (_ort_runnable)
    typed = [onnx.helper.make_tensor_value_info(name(o), int(o.dtype), None) for n in cone
             if id(n) not in as_const for o in n.outputs if o.dtype is not None and o is not mask]
    graph = onnx.helper.make_graph(nodes, "mask_probe", inputs, [out], inits, value_info=typed)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, feeds


def _ort_runnable(model: onnx.ModelProto) -> onnx.ModelProto:
    """ORT's CPU provider has no bfloat16 Where (nor most bfloat16 kernels): a bfloat16 cone runs
    with every bfloat16 tensor float32 rounded through bfloat16 (emulate_bf16, as verify runs
    bfloat16 models); the values are those bfloat16 holds."""
    from onnx_fuse.passes.precision import emulate_bf16

    g, bf16 = model.graph, onnx.TensorProto.BFLOAT16
    if any(i.data_type == bf16 for i in g.initializer) or any(
            v.type.tensor_type.elem_type == bf16 for v in [*g.value_info, *g.input, *g.output]):
        return emulate_bf16(model)
    return model


def _judge(arr: np.ndarray, p: int, s: int) -> str | None:
    """None when ``arr`` is the causal mask of S new tokens after P cached ones, else why not."""
    t = p + s
    if arr.ndim < 2 or arr.shape[-1] != t or arr.shape[-2] not in (1, s):
        return f"the mask has shape {list(arr.shape)} for {s} queries over {t} keys"
    arr = np.broadcast_to(arr, (*arr.shape[:-2], s, t)).reshape(-1, s, t).astype(np.float64)
    kept, masked = arr == 0, arr <= _MASKED
    if not np.all(kept | masked):
        return "the mask adds a bias to kept keys (neither 0 nor masked)"
    causal = np.arange(t)[None, :] <= p + np.arange(s)[:, None]
    bad = np.argwhere(kept != causal[None])
    if not len(bad):
        return None
    _, i, _ = bad[0]
    keys = np.flatnonzero(kept[bad[0][0], i])
    pos = p + int(i)
    if len(keys) and keys.max() > pos:
        return f"the query at position {pos} sees the later key {int(keys.max())} (not causal)"
    lo = int(keys.min()) if len(keys) else pos + 1
    if len(keys) and np.array_equal(keys, np.arange(lo, pos + 1)):
        return (f"the query at position {pos} sees only the keys {lo}..{pos}: a sliding window of "
                f"{pos - lo + 1} keys (probed at {t} tokens)")
    return f"the query at position {pos} does not see every key 0..{pos} (probed at {t} tokens)"


def causal_mask(ctx: Any, mask: Any, q: Any, past: Any) -> bool:
    """True when ``mask`` (additive, broadcast to [B,H,S,P+S]) is the causal mask of q's S new
    tokens after ``past``'s P cached ones at every position probed; raises EvalFailure with the
    reason otherwise."""
    for v, what in ((mask, "mask"), (q, "q"), (past, "past")):
        if not isinstance(v, ir.Value):
            raise EvalFailure(f"causal_mask() needs the {what} as a graph value")
    if mask.dtype is None or not mask.dtype.is_floating_point():
        raise EvalFailure("the mask is not an additive float bias")
    if mask.is_graph_input():
        raise EvalFailure(f"the mask is the graph input {mask.name!r}, whose values are not known")
    const = _const(mask)
    cone, as_const = ([], set()) if const is not None else _cone(mask)
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    _lengths(q, past, [], 1)   # the 4-D check, before q's dims are read
    first = None
    for s in _new_tokens(q):
        p, env = _lengths(q, past, cone, s)
        if const is not None:
            arr, err = np.asarray(const), None
        else:
            arr, err = _run_probe(cone, as_const, mask, p, s, env, opset)
        if err is None and arr.ndim >= 2 and arr.shape[-1] == p + s:
            return _raise_unless(_judge(arr, p, s))
        # the cone does not run at S new tokens, or gives a key count other than P + S: the
        # model's scores [.., S, P + S] cannot take that mask, so S is no length the model runs at
        first = first or err or _judge(arr, p, s)
    # _judge accepts any array of P + S keys, which returned above: a fixed reason all the same
    raise EvalFailure(first or "the mask probe found no query length the mask fits")


def _run_probe(cone: list[ir.Node], as_const: set[int], mask: ir.Value, p: int, s: int, env: dict[str, int],
               opset: int, **kw: Any) -> tuple[np.ndarray, None] | tuple[None, str]:
    """The mask's values for P cached and S new tokens, or why the probe did not run (a shape the
    cone cannot run at, which a caller may skip as one the model cannot); raises EvalFailure where it
    ran but the mask changes with another integer input (_varies), which no caller may skip
    (``kw``: _probe_model's batch, drop, cut, extra_keys)."""
    model, feeds = _probe_model(cone, as_const, mask, p, s, env, opset, **kw)
    key = hashlib.sha256(model.SerializeToString(deterministic=True) + repr((p, s)).encode()
                         + b"".join(k.encode() + a.tobytes() for k, a in sorted(feeds.items()))).digest()
    if key not in _RESULTS:
        try:
            res: tuple[np.ndarray | None, str | None] | EvalFailure = _ran(
                model, feeds, cone, as_const, mask, p, s, env, opset, **kw)
        except EvalFailure as exc:   # kept, and raised again on every hit
            res = exc
        if len(_RESULTS) >= _RESULT_LIMIT:
            _RESULTS.pop(next(iter(_RESULTS)))
        _RESULTS[key] = res
    res = _RESULTS[key]
    if isinstance(res, EvalFailure):
        raise EvalFailure(str(res))
    return res


def _ran(model: onnx.ModelProto, feeds: dict[str, np.ndarray], cone: list[ir.Node], as_const: set[int],
         mask: ir.Value, p: int, s: int, env: dict[str, int], opset: int,
         **kw: Any) -> tuple[np.ndarray, None] | tuple[None, str]:
    """_run_probe's run of its probe model, uncached (sliding_window keeps rows, not values)."""
    from onnx_fuse.verify import make_session

    try:
        arr = np.asarray(make_session(_ort_runnable(model), threads=1, quiet=True).run(None, feeds)[0])
    except Exception as exc:  # noqa: BLE001 - a cone that cannot run proves nothing
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None, f"the mask probe did not run ({text})"
    why = _varies(cone, as_const, mask, p, s, env, opset, feeds, arr, **kw)
    if why is not None:
        raise EvalFailure(why)
    return arr, None


def _varies(cone: list[ir.Node], as_const: set[int], mask: ir.Value, p: int, s: int, env: dict[str, int],
            opset: int, feeds: dict[str, np.ndarray], arr: np.ndarray, **kw) -> str | None:
    """None when the probed values ``arr`` (run with ``feeds``, the integer inputs that are
    neither masks nor positions all 0) stay the same with those inputs all 1 and in runs of 0s
    and 1s; else why not. The probe knows no values for such inputs: a mask that changes with them
    (Gemma 3's token_type_ids: each run of image tokens attends bidirectionally) is not the
    mask the zeros show, whatever the input is called."""
    from onnx_fuse.verify import make_session

    names = sorted(v.name for v in _other_ints(cone).values())
    if not names:
        return None
    what = ", ".join(repr(n) for n in names)
    for fill, how in ((1, "all 1"), (2, "runs of 0s and 1s")):
        model, alt = _probe_model(cone, as_const, mask, p, s, env, opset, fill=fill, **kw)
        try:
            got = np.asarray(make_session(_ort_runnable(model), threads=1, quiet=True).run(None, alt)[0])
        except Exception as exc:  # noqa: BLE001
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            return f"the mask probe did not run with the integer input {what} {how} ({text})"
        if got.shape != arr.shape or not np.array_equal(got, arr):
            return (f"the mask changes with the values of the integer input {what} (all 0 vs {how}): "
                    f"it is not a mask of positions and attention_mask alone")
    return None


def _raise_unless(reason: str | None) -> bool:
    if reason is not None:
        raise EvalFailure(reason)
    return True


# --------------------------------------------------------------------------- sliding windows

# Probes at small cache lengths (each integer constant of the cone and either side of it) when the
# query length is fixed; more than this many constants is no mask worth the proof.
_MAX_BOUNDARY_PROBES = 48
# causal_only's probes with the batch too (every probed length at each batch beside a constant,
# a few ms each: 254 for test_causal_only's 'long' mask over a cache); more is no mask worth the proof
_MAX_BATCH_GRID_PROBES = 16 * _MAX_BOUNDARY_PROBES
# A probe of S queries over S keys (prefill, or a prefill over an empty cache) materializes an
# [S, S] mask: S past a window of 8192 at most (verify's bound too). Larger constants make the
# prefill proof refuse and the cache proof probe the small positions one length at a time.
_MAX_SQUARE_PROBE = 8192 + 2
# The most mask entries one probe at a batch of 1 materializes (a prefill's square at that bound):
# a count or length beside a constant must run at least there; one past it is refused, not assumed.
_SINGLE_PROBE_SIZE = _MAX_SQUARE_PROBE ** 2
# Probed rows (their windows, or why not), by probe model: a rule asks again for its rewrite, and
# every layer shares one mask; the masks themselves are not kept (an [S, S] one is large).
_ROWS: dict[bytes, tuple[set[int], int] | str] = {}


def _window_rows(arr: np.ndarray, p: int, s: int) -> tuple[set[int], int]:
    """The windows the mask's rows allow, for S new tokens after P cached ones: (exact widths
    seen, least width the other rows need). A row that keeps keys lo..pos (lo > 0) fixes
    W = pos - lo + 1; one that keeps 0..pos needs W > pos (or none). Anything else raises."""
    exact: set[int] = set()
    need = 0
    for i, lo in enumerate(_band_starts(arr, p, s)):
        if lo:
            exact.add(p + i - lo + 1)
        else:
            need = max(need, p + i + 1)
    return exact, need


def _band_starts(arr: np.ndarray, p: int, s: int) -> list[int]:
    """The first key each of the S rows keeps when every row keeps one band of keys ending at its
    own position (P + i); raises with the reason otherwise."""
    t = p + s
    if arr.ndim < 2 or arr.shape[-1] != t or arr.shape[-2] not in (1, s):
        raise EvalFailure(f"the mask has shape {list(arr.shape)} for {s} queries over {t} keys")
    arr = np.broadcast_to(arr, (*arr.shape[:-2], s, t)).reshape(-1, s, t)
    if arr.dtype == np.bool_:
        kept = arr
    else:
        # float16 / 32 / 64 compare exactly in their own type (0 and _MASKED are exact in each);
        # a float64 copy of a long window's [S, P + S] probe was a tenth of its proof's time
        if arr.dtype not in (np.float16, np.float32, np.float64):
            arr = arr.astype(np.float64)
        kept = arr == 0
        if not np.all(kept | (arr <= _MASKED)):
            raise EvalFailure("the mask adds a bias to kept keys (neither 0 nor masked)")
    if not np.all(kept == kept[:1]):
        raise EvalFailure("the mask differs between batch rows or heads")
    rows = kept[0]
    if not s:
        return []
    # every row at once (a loop over a window-4096 probe's rows was a third of its proof's time): its
    # last kept key is its own position and it keeps each key from its first
    pos = p + np.arange(s)
    lo = np.argmax(rows, axis=1)
    hi = t - 1 - np.argmax(rows[:, ::-1], axis=1)
    ok = rows.any(axis=1) & (hi == pos) & (np.count_nonzero(rows, axis=1) == hi - lo + 1)
    if not ok.all():
        _refuse_row(rows, p, int(np.argmin(ok)))   # the first row that is not a band, as one would read it
    return lo.tolist()


def _refuse_row(rows: np.ndarray, p: int, i: int) -> None:
    """Raise why kept-key row ``i`` of ``rows`` ([S, P + S]) is not a band ending at its position."""
    pos, t = p + i, rows.shape[-1]
    keys = np.flatnonzero(rows[i])
    if not len(keys) or keys.max() != pos:
        what = (f"sees the later key {int(keys.max())}" if len(keys) and keys.max() > pos
                else "does not see its own key")
        raise EvalFailure(f"the query at position {pos} {what} (not causal; probed at {t} tokens)")
    raise EvalFailure(f"the query at position {pos} sees keys with gaps, not a band (probed at {t} tokens)")


def _far_length(consts: list[int], *least: int) -> int:
    """A length past every integer constant of a cone (and at least _MIN_PAST and ``least``):
    there no comparison of a length with a constant flips any more."""
    return max(_MIN_PAST, max([c for c in consts if c > 1], default=0) + 2, *least)


def _boundary_lengths(consts: list[int], low: int, far: int) -> list[int]:
    """The lengths from ``low`` to probe below ``far``: low, low + 1, low + 2 and each constant
    of the cone plus -1, 0, 1 (where a comparison with it can flip), sorted."""
    return sorted({low, low + 1, low + 2} | {c + d for c in consts for d in (-1, 0, 1) if low <= c + d < far})


def _probe_batches(consts: list[int], far: int) -> list[int]:
    """The batches a mask proof runs its shapes at besides 1: 2, 3..5, each constant of the cone and
    either side of it, and ``far`` past them all (a mask from shapes may compare the batch, or a row
    index, with a constant)."""
    return [2, *_boundary_lengths(consts, 3, far), far]


def _int_constants(cone: list[ir.Node]) -> list[int]:
    """Integral values among the small constants the cone reads, of any numeric dtype (a window
    may be compared in float positions too), a negative integer-typed one as its magnitude (a
    window added as ``Add(q_idx, -W)``; a negative float is a mask's fill value, -1e4, -65504)."""
    out = set()
    for n in cone:
        for i in n.inputs:
            c = _const(i) if i is not None else None
            if c is None or c.size > 64:
                continue
            if np.issubdtype(c.dtype, np.integer):
                vals = np.abs(c.ravel().astype(np.float64))
            elif np.issubdtype(c.dtype, np.floating):
                vals = c.ravel().astype(np.float64)
            else:
                continue
            out.update(int(x) for x in vals if np.isfinite(x) and x == int(x) and abs(x) < _MAX_WINDOW)
    return sorted(out)


def _bind(q: ir.Value, past: ir.Value | None, s: int, p: int, rows: int = 1) -> dict[str, int]:
    """Symbols of q's length and batch and the past's length and batch -> S, ``rows``, P and
    ``rows`` (the batches bound last: a run has one batch, the past concatenated with the new
    keys, whatever each is named)."""
    env: dict[str, int] = {}
    pairs = [(q.shape.dims[-2], s)]
    if past is not None:
        pairs += [(past.shape.dims[2], p), (past.shape.dims[0], rows)]
    for d, val in [*pairs, (q.shape.dims[0], rows)]:
        if not isinstance(d, int) and getattr(d, "value", None):
            env[d.value] = val
    return env


def sliding_window(ctx: Any, mask: Any, q: Any, past: Any = None, without: Any = None) -> int:
    """The sliding window W of ``mask`` (an additive bias, or a boolean keep-mask, broadcast to
    [B,H,S,P+S]) for q's S new tokens ([B,H,S,D] or [B,S,H*D]) after ``past``'s P cached ones
    ([B,Hkv,P,D]; None: prefill, P = 0): the query at position p keeps exactly the keys
    max(0, p - W + 1)..p at every position probed; 0 when it keeps 0..p (plain causal).
    Raises EvalFailure with the reason otherwise.

    Probes: P (or, in prefill, S) past every integer constant of the mask's cone, so that a
    window written as a constant shows; then the small positions too (a prefill over an empty
    cache of that many tokens, or, where the query length is fixed, P at 0, 1 and each constant
    of the cone and either side of it), so that a mask banded at some positions and not at
    others is refused rather than read from one of them. Over a cache, the new tokens' count
    too at 1, 2, 3, each constant and either side of it (a band dropped for some counts); and
    every probed shape again at a batch of 2 and either side of each constant (_by_batch).

    ``without``: a graph input the mask must not read (the probe feeds attention masks all
    ones, so a part of the mask that reads one is not proven by it: a rule that proves the
    padding part by its structure names attention_mask here)."""
    for v, what in ((mask, "mask"), (q, "q")):
        if not isinstance(v, ir.Value):
            raise EvalFailure(f"sliding_window() needs the {what} as a graph value")
    if past is not None and not isinstance(past, ir.Value):
        raise EvalFailure("sliding_window() needs the past as a graph value (or None)")
    if mask.dtype is None or not (mask.dtype.is_floating_point() or mask.dtype == ir.DataType.BOOL):
        raise EvalFailure("the mask is neither an additive float bias nor a boolean keep-mask")
    if mask.is_graph_input():
        raise EvalFailure(f"the mask is the graph input {mask.name!r}, whose values are not known")
    if q.shape is None or len(q.shape) not in (3, 4) or (
            past is not None and (past.shape is None or len(past.shape) != 4)):
        raise EvalFailure("q must be 3-D or 4-D and the past 4-D, with known ranks")
    const = _const(mask)
    if const is not None:   # every position the model runs at is in the array
        arr = np.asarray(const)
        t, s = arr.shape[-1] if arr.ndim else 0, arr.shape[-2] if arr.ndim >= 2 else 0
        return _settle([_window_rows(arr, t - s, s)])
    cone, as_const = _cone(mask)
    if without is not None and any(i is without for n in cone for i in n.inputs):
        raise EvalFailure(f"the mask reads {without.name!r}, which the probe cannot vary")
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    consts = _int_constants(cone)
    far = _far_length(consts)
    sd = q.shape.dims[-2]
    pd = past.shape.dims[2] if past is not None else 0

    def probe(p: int, s: int, rows: int = 1) -> tuple[set[int], int] | str:
        if rows * s * (p + s) > _SINGLE_PROBE_SIZE:   # a static length past it: refused, not assumed
            raise EvalFailure(f"a probe of {s} queries over {p + s} keys at a batch of {rows} is too large")
        env = _bind(q, past, s, p, rows)
        model, feeds = _probe_model(cone, as_const, mask, p, s, env, opset, batch=rows)
        key = hashlib.sha256(model.SerializeToString(deterministic=True) + repr((p, s)).encode()
                             + b"".join(k.encode() + a.tobytes() for k, a in sorted(feeds.items()))).digest()
        if key not in _ROWS:
            try:
                arr, why = _ran(model, feeds, cone, as_const, mask, p, s, env, opset, batch=rows)
                res: tuple[set[int], int] | str = why if arr is None else (
                    _window_rows(arr, p, s) if arr.ndim >= 2 and arr.shape[-1] == p + s else
                    f"the mask has shape {list(arr.shape)} for {s} queries over {p + s} keys")
            except EvalFailure as exc:   # it varies, or a mask of the right size that is not a band: refuse
                res = ("!", str(exc))
            if len(_ROWS) >= 4 * _RESULT_LIMIT:
                _ROWS.pop(next(iter(_ROWS)))
            _ROWS[key] = res
        res = _ROWS[key]
        if isinstance(res, tuple) and res[0] == "!":
            raise EvalFailure(res[1])
        return res

    if past is None:   # prefill: rows 0..S-1 cover every position up to S
        if not isinstance(sd, int) and far > _MAX_SQUARE_PROBE:
            raise EvalFailure(f"the mask's cone holds constants up to {far - 2}: a prefill probe "
                              f"past them ({far} x {far}) is too large")
        if isinstance(sd, int) and 2 * sd * sd > _BATCH_PROBE_SIZE:   # what _by_batch ends in, before the probe
            raise EvalFailure("no probed length fits a batch of 2 (the band is not proven at every batch)")
        got = probe(0, sd if isinstance(sd, int) else far)
        if isinstance(got, str):
            raise EvalFailure(got)
        lengths = [sd] if isinstance(sd, int) else [*_boundary_lengths(consts, 1, far), far]
        # each length at a batch of 1 too (_by_batch runs batches from 2): a mask from shapes may drop
        # its band for some lengths at a batch of 1 only; a length the cone cannot run at is one the
        # model cannot (every length is at most far, so within the square bound)
        more = [r for r in (probe(0, n) for n in lengths if n != far) if not isinstance(r, str)]
        return _settle([got, *more, *_by_batch(probe, [(0, n) for n in lengths], consts, far)])
    p_far = pd if isinstance(pd, int) else far
    found, first, s_ok, shapes = [], None, None, []
    for s in ((sd,) if isinstance(sd, int) else (_NEW, 1)):
        got = probe(p_far, s)
        if not isinstance(got, str):
            found.append(got)
            s_ok = s
            shapes.append((p_far, s))
            break
        first = first or got
    if s_ok is None:
        raise EvalFailure(first)
    # new tokens over a cache: each count where a comparison with a constant can flip
    counts = [] if isinstance(sd, int) else [s for s in [*_boundary_lengths(consts, 1, far), far] if s != s_ok]
    ran = [s_ok]   # the counts the cone runs at after p_far cached tokens
    for s in counts:
        if s * (p_far + s) > _SINGLE_PROBE_SIZE:   # a count never run would be assumed banded
            raise EvalFailure(f"a probe of {s} new tokens after {p_far} cached ones is too large "
                              f"(the band is not proven at every count beside a constant)")
        got = probe(p_far, s)
        if not isinstance(got, str):   # a count the cone cannot run at is one the model cannot
            found.append(got)
            shapes.append((p_far, s))
            ran.append(s)
    if isinstance(pd, int):   # a static cache length: the model runs at this P only
        return _settle([*found, *_by_batch(probe, shapes, consts, far)])
    small = (probe(0, far) if not isinstance(sd, int) and s_ok > 1 and far <= _MAX_SQUARE_PROBE
             else "query length fixed, or too long a prefill")
    if not isinstance(small, str):
        found.append(small)
        shapes.append((0, far))
    # the small cache lengths at every probed count, jointly: a mask from shapes may keep every key
    # only where both P and S are in some range (a prefill of far tokens and counts after p_far
    # cached ones show neither)
    w = _settle(found)
    ps = {0, 1, 2, w - 1, w, w + 1} | {c + d for c in consts for d in (-1, 0, 1)}
    ps = sorted(x for x in ps if 0 <= x < p_far)
    if len(ps) > _MAX_BOUNDARY_PROBES:
        raise EvalFailure(f"the mask's cone has too many constants to probe every boundary "
                          f"({len(ps)} cache lengths)")
    grid = [(p, s) for p in ps for s in ran]   # p < p_far: each fits where (p_far, s) did
    if len(grid) > _MAX_BATCH_GRID_PROBES:
        raise EvalFailure("the mask's cone has too many constants to probe every cache length at every count")
    for p, s in grid:
        got = probe(p, s)
        if not isinstance(got, str):   # a length the cone cannot run at is one the model cannot
            found.append(got)
            shapes.append((p, s))
    return _settle([*found, *_by_batch(probe, shapes, consts, far)])


def _by_batch(probe: Callable[..., tuple[set[int], int] | str], shapes: list[tuple[int, int]],
              consts: list[int], far: int) -> list[tuple[set[int], int]]:
    """``probe``'s rows at the (P, S) ``shapes`` again with a batch of 2, either side of each
    constant of the cone and past them: a mask from shapes may compare the batch with a constant
    (rows past the second seeing every key, or all of them at a batch of 3 and some lengths only),
    and a probe at a batch of 1 shows none of it (_band_starts refuses rows that differ). Shapes
    whose mask would be too large at a batch are left out there; a batch none fits, or a probe a
    batch cannot run, is not proven."""
    out, runs = [], 0
    for rows in _probe_batches(consts, far):
        fit = [(p, s) for p, s in shapes if rows * s * (p + s) <= _BATCH_PROBE_SIZE]
        if not fit:
            raise EvalFailure(f"no probed length fits a batch of {rows} (the band is not proven at every batch)")
        runs += len(fit)
        if runs > _MAX_BATCH_GRID_PROBES:
            raise EvalFailure("the mask's cone has too many constants to probe every batch at every length")
        for p, s in fit:
            got = probe(p, s, rows)
            if isinstance(got, str):
                raise EvalFailure(f"at a batch of {rows}: {got}")
            out.append(got)
    return out


def _settle(rows: list[tuple[set[int], int]]) -> int:
    """One window for every probed row, or the reason there is none."""
    exact = set().union(*(e for e, _ in rows))
    need = max(n for _, n in rows)
    if len(exact) > 1:
        raise EvalFailure(f"the mask's band is not one width: queries see {sorted(exact)} keys "
                          f"at different positions")
    if not exact:
        return 0
    w = exact.pop()
    if need > w:
        raise EvalFailure(f"the mask is a band of {w} keys at some positions but lets a query "
                          f"see all of its {need} keys at another")
    return w


def cropped_window(ctx: Any, mask: Any, q: Any, kept: Any, past: Any) -> int:
    """The window W of a mask over a cropped cache: the attention reads ``kept`` (the last n
    cached tokens, ``Slice(past, -n)``, n static) and q's S new ones, the model's own present
    keeps the last n (transformers 5's sliding layers, GPT-OSS). The mask is probed at full past
    lengths P (``past``'s length; attention masks of P + S, positions P..P+S-1) from n up past
    every integer constant of its cone; its [S, n + S] rows are read with the kept keys ending
    at the last cached position, so new token i must keep exactly keys i..n+i, i.e. the last
    W = n + 1 positions (with the key before the crop gone, a row that keeps the whole crop sees
    exactly its last n + i + 1: one new token over a plain causal mask is the window n + 1).
    Raises EvalFailure with the reason otherwise (a causal mask over the crop with S > 1 new
    tokens lets query i see n + i + 1 keys, no single window)."""
    for v, what in ((mask, "mask"), (q, "q"), (kept, "cropped past"), (past, "past")):
        if not isinstance(v, ir.Value):
            raise EvalFailure(f"cropped_window() needs the {what} as a graph value")
    if mask.dtype is None or not (mask.dtype.is_floating_point() or mask.dtype == ir.DataType.BOOL):
        raise EvalFailure("the mask is neither an additive float bias nor a boolean keep-mask")
    if mask.is_graph_input():
        raise EvalFailure(f"the mask is the graph input {mask.name!r}, whose values are not known")
    if q.shape is None or len(q.shape) != 4 or any(v.shape is None or len(v.shape) != 4 for v in (kept, past)):
        raise EvalFailure("q and the pasts must be 4-D with known shapes")
    from onnx_fuse.rewrite._crop import crop_length

    n, pd = crop_length(ctx, kept, past), past.shape.dims[2]
    if n < 1:
        raise EvalFailure("the cropped past is the whole past, not a crop of it")
    if isinstance(pd, int) or not getattr(pd, "value", None):
        raise EvalFailure("the full past's length must be a named dynamic dim (the probe varies it)")
    const = _const(mask)   # a decode graph's mask over n + 1 keys may fold to a constant
    cone, as_const = ([], set()) if const is not None else _cone(mask)
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    consts = _int_constants(cone)
    far = _far_length(consts, n + 2)
    sd = q.shape.dims[2]
    lengths = sorted({*_boundary_lengths(consts, n, far), far})
    if len(lengths) > _MAX_BOUNDARY_PROBES:
        raise EvalFailure(f"the mask's cone has too many constants to probe every boundary ({len(lengths)} lengths)")
    # the keys before the crop are gone, so a row keeping crop keys lo..n+i sees exactly the last
    # n + i - lo + 1 positions, lo = 0 included: one new token over the whole crop (a plain causal
    # mask, or a decode graph's all-kept one) is the window n + 1 too; with more new tokens a
    # plain causal mask gives n + 1, n + 2, ... and is no window
    widths: dict[int, tuple[int, int, int]] = {}   # width -> (P, S, row) it was first seen at
    # every new-token count beside a constant too (a band dropped at some counts), at each P
    counts = (sd,) if isinstance(sd, int) else (
        _NEW, 1, *sorted({*_boundary_lengths(consts, 1, far), far} - {_NEW, 1}))
    if max(counts) * (n + max(counts)) > _SINGLE_PROBE_SIZE:   # a count never run would be assumed
        raise EvalFailure(f"a probe of {max(counts)} new tokens over the {n} kept keys is too large")
    shapes = [(s, p) for s in counts for p in lengths]
    runs = [(s, p, 1) for s, p in shapes]
    if const is None:   # each shape again at the batches beside each constant (as _by_batch)
        runs += [(s, p, rows) for rows in _probe_batches(consts, far) for s, p in shapes
                 if rows * s * (n + s) <= _BATCH_PROBE_SIZE]
        if len(runs) > _MAX_BATCH_GRID_PROBES:
            raise EvalFailure("the mask's cone has too many constants to probe every batch at every length")
    for s, p, rows in runs:
        if const is not None:
            arr = np.asarray(const)
        else:
            env = _bind(q, kept, s, n, rows)
            env[pd.value] = p
            arr, why = _run_probe(cone, as_const, mask, p, s, env, opset, batch=rows)
            if why is not None:
                raise EvalFailure(why if rows == 1 else f"at a batch of {rows}: {why}")
        if arr.ndim < 2 or arr.shape[-1] != n + s:
            raise EvalFailure(f"the mask has shape {list(arr.shape)} for {s} queries over the {n} kept "
                              f"and {s} new keys (probed after {p} cached tokens)")
        for i, lo in enumerate(_band_starts(arr, n, s)):
            widths.setdefault(n + i - lo + 1, (p, s, i))
    if len(widths) > 1:
        where = ", ".join(f"{w} for new token {i} of {s} after {p}" for w, (p, s, i) in sorted(widths.items()))
        raise EvalFailure(f"the mask over the crop is no single window: queries see the last {where} "
                          f"(a causal mask over the crop with more than one new token)")
    w = next(iter(widths))
    if w != n + 1:
        raise EvalFailure(f"the cache keeps the last {n} tokens but the mask's window is {w}, not {n + 1}")
    return w


# --------------------------------------------------------------------------- proofs by mask
# A lowering asks about one mask several times and every layer reads the same one: a proof is kept
# per mask (by identity) with the signature of the cone it read, and reused while that is unchanged.

def _memo_get(store: dict[int, tuple], mask: ir.Value, key: tuple) -> tuple | None:
    """(result,) of a proof ``store`` holds for ``mask`` under ``key`` while its cone is unchanged."""
    hit = store.get(id(mask))
    if hit is not None and hit[0] is mask and hit[1] == key and _cone_unchanged(mask, hit[2]):
        return (hit[3],)
    return None


def _memo_put(store: dict[int, tuple], mask: ir.Value, key: tuple, cone: list[ir.Node], res: Any) -> None:
    if len(store) >= _RESULT_LIMIT:
        store.pop(next(iter(store)))
    store[id(mask)] = (mask, key, _cone_sig(cone), res)


def _cone_sig(cone: list[ir.Node]) -> list[tuple[ir.Node, tuple, tuple]]:
    return [(n, tuple(n.inputs), tuple(repr(i.shape) for i in n.inputs if i is not None and i.is_graph_input()))
            for n in cone]


def _cone_unchanged(mask: ir.Value, sig: list[tuple[ir.Node, tuple, tuple]]) -> bool:
    """Whether the nodes that computed ``mask`` when it was proven are still in its graph with the
    same inputs (identity; graph inputs of the same shape): a rewrite that touched the cone
    replaced one of them."""
    return all(n.graph is mask.graph and len(n.inputs) == len(ins) and all(a is b for a, b in zip(n.inputs, ins))
               and tuple(repr(i.shape) for i in n.inputs if i is not None and i.is_graph_input()) == shapes
               for n, ins, shapes in sig)


# --------------------------------------------------------------------------- causal masks from shapes

# the most mask entries (batch x queries x keys) a probe at another batch or length materializes
# (causal_only here, the key padding proofs in _key_padding_proof.py)
_BATCH_PROBE_SIZE = 1 << 24
# causal_only proofs by mask: (the mask, (q's, k's and the past's shapes, the opset), the cone's
# signature, True / False)
_CAUSAL_ONLY: dict[int, tuple] = {}


def _causal_fill_bound(dtype: ir.DataType) -> float:
    """The highest bias a causally masked key may get for a causal flag to stand for it: the
    lowest float of the dtype over 2, -1e30 at most (exp underflows to exactly 0 beside the row's
    own key, whatever the score, as with the flag's -inf)."""
    lowest = {ir.DataType.FLOAT16: -65504.0}.get(dtype, float(np.finfo(np.float32).min))
    return max(-1e30, lowest / 2)


def causal_only(ctx: Any, mask: Any, q: Any, k: Any, past: Any = None) -> bool:
    """True when ``mask`` (an additive bias broadcast to [B,H,S,P+S]) over q's S queries and ``k``'s
    S new keys (after ``past``'s P cached ones, axis 2; None: prefill) is the causal mask and
    nothing else at every shape the model takes: query i keeps exactly the keys 0..P + i (bias 0),
    every other key gets at most _causal_fill_bound (the lowest float / 2, -1e30 at most). Only for
    a mask computed from shapes alone (its cone reads no graph input's values: Cohere ASR's decoder,
    whose packed-sequence check, a CumSum of position jumps, is all one sequence for positions
    0..S-1): its values are then those of the probe at each shape. Probed at the lengths where a
    comparison with a constant of the cone can flip and past them (S, and P with a past; every row
    of a prefill probe is a position), with a batch of 1, and of 2, either side of each constant and
    past them at each of those lengths (a batch condition may hold at some lengths only), the other
    named dims of the inputs it reads the shape of at other values, and an attention mask whose length (only) it reads 2 longer and 1 shorter than the keys. No row loses
    every key, so the causal flag (Attention-23's is_causal, the contrib ops' unidirectional: both
    offset by P over a past) gives the same result. Never fails: False where any of it is not proven."""
    try:
        return _causal_only(ctx, mask, q, k, past)
    except EvalFailure:
        return False


def _causal_only(ctx: Any, mask: Any, q: Any, k: Any, past: Any) -> bool:
    if not all(isinstance(v, ir.Value) for v in (mask, q, k)) or (past is not None and not isinstance(past, ir.Value)):
        return False
    if mask.dtype is None or not mask.dtype.is_floating_point() or mask.is_graph_input():
        return False
    if any(v.shape is None or len(v.shape) not in (3, 4) for v in (q, k)) or (
            past is not None and (past.shape is None or len(past.shape) != 4)):
        return False
    sd = q.shape.dims[-2] if len(q.shape) == 4 else q.shape.dims[1]
    kd = k.shape.dims[-2] if len(k.shape) == 4 else k.shape.dims[1]
    if not same_dim(sd, kd):
        return False   # keys of another length than the queries (cross-attention): no causal flag
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    key = (repr(q.shape), repr(k.shape), repr(past.shape) if past is not None else None, opset)
    hit = _memo_get(_CAUSAL_ONLY, mask, key)
    if hit is not None:
        return hit[0]
    const = _const(mask)
    if const is not None:   # every shape the model runs at is the constant's (q's length fixed)
        if not isinstance(sd, int) or (past is not None and not isinstance(past.shape.dims[2], int)):
            return False
        p = past.shape.dims[2] if past is not None else 0
        return _causal_values(np.asarray(const), p, sd, mask.dtype) is None
    cone, as_const = _cone(mask)
    res = _causal_probes(cone, as_const, mask, q, sd, past, opset)
    _memo_put(_CAUSAL_ONLY, mask, key, cone, res)
    return res


def _causal_values(arr: np.ndarray, p: int, s: int, dtype: ir.DataType) -> str | None:
    """None when ``arr`` is the causal mask of S queries after P cached keys with every masked
    key at most _causal_fill_bound, else why not."""
    why = _judge(arr, p, s)
    if why is not None:
        return why
    arr = np.broadcast_to(arr, (*arr.shape[:-2], s, p + s)).astype(np.float64)
    masked = arr[..., np.arange(p + s)[None, :] > p + np.arange(s)[:, None]]
    if masked.size and masked.max() > _causal_fill_bound(dtype):
        return f"a causally masked key gets {masked.max()}, not (nearly) -inf"
    return None


def _causal_probes(cone: list[ir.Node], as_const: set[int], mask: ir.Value, q: ir.Value, sd: Any,
                   past: ir.Value | None, opset: int) -> bool:
    if any(i is not None and i.is_graph_input() for n in cone if n.op_type not in ("Shape", "Size") for i in n.inputs):
        return False   # reads an input's values (attention_mask, positions): not the shapes alone
    consts = _int_constants(cone)
    far = _far_length(consts)
    if far > _MAX_SQUARE_PROBE:
        return False
    pd = past.shape.dims[2] if past is not None else 0
    lengths = [sd] if isinstance(sd, int) else [*_boundary_lengths(consts, 1, far), far]
    pasts = [pd] if isinstance(pd, int) else [*_boundary_lengths(consts, 0, far), far]
    if len(lengths) * len(pasts) > _MAX_BOUNDARY_PROBES:
        return False
    # the named dims of what the cone reads the shape of, other than q's batch and length and the
    # past's: probed at another value once (an encoder's length, a batch read from another input)
    bound = set(_bind(q, past, 1, 1))
    others = {d.value for i in _shape_sources(cone, as_const) if i.shape is not None for d in i.shape.dims
              if not isinstance(d, int) and getattr(d, "value", None) and d.value not in bound}
    runs = [(p, s, 1, {}) for s in lengths for p in pasts]
    far_p, far_s = pasts[-1], lengths[-1]
    runs += [(far_p, far_s, 2, {})] + [(far_p, far_s, 1, {o: far_s + d for o in others}) for d in ((3, -3) if others else ())]
    # the batch too: a mask from shapes may compare a row index or the batch size with a constant
    # (rows past the second seeing every key), so batches either side of each constant and past
    # them, at the far lengths or, where that mask is too large, the shortest with several queries,
    # and at every other probed length that mask fits: a batch condition may hold only together
    # with a length between two constants (every key for a batch of 3 at 5..10 tokens)
    short = next((s for s in lengths if s >= 2), lengths[-1])
    grid = [(p, s) for s in lengths for p in pasts]
    seen = {(p, s, rows) for p, s, rows, extra in runs if not extra}
    for rows in _probe_batches(consts, far):
        p, s = (far_p, far_s) if rows * far_s * (far_p + far_s) <= _BATCH_PROBE_SIZE else (pasts[0], short)
        if rows * s * (p + s) > _BATCH_PROBE_SIZE:
            return False
        for p_, s_ in [*grid, (p, s)]:
            if (p_, s_, rows) not in seen and (rows * s_ * (p_ + s_) <= _BATCH_PROBE_SIZE or (p_, s_) == (p, s)):
                seen.add((p_, s_, rows))
                runs.append((p_, s_, rows, {}))
    if len(runs) > _MAX_BATCH_GRID_PROBES:
        return False
    for p, s, rows, extra in runs:
        env = {**_bind(q, past, s, p, rows), **extra}
        arr, why = _run_probe(cone, as_const, mask, p, s, env, opset, batch=rows)
        if why is not None or _causal_values(arr, p, s, mask.dtype) is not None:
            return False
    # an attention-mask input whose length (only) it reads, declared apart from q's and the past's, is
    # fed P + S long above: a model may take it 2 longer or 1 shorter too (the probe's mask then
    # still over the P + S keys; the cone failing, or a key per column, is a length the model does
    # not take), and a mask that reads its query positions from that length is no causal mask there
    if any(_is_mask_input(i) and i.shape is not None and len(i.shape)
           and getattr(i.shape.dims[-1], "value", None) in others for i in _shape_sources(cone, as_const)):
        for extra_keys in (2, -1):
            if far_p + far_s + extra_keys < 1:
                continue
            arr, why = _run_probe(cone, as_const, mask, far_p, far_s, _bind(q, past, far_s, far_p), opset,
                                  extra_keys=extra_keys)
            if why is None and arr.ndim >= 2 and arr.shape[-1] == far_p + far_s and (
                    _causal_values(arr, far_p, far_s, mask.dtype) is not None):
                return False
    return True


def _shape_sources(cone: list[ir.Node], as_const: set[int]) -> list[ir.Value]:
    """The values whose shape (only) the cone reads: inputs of its Shape / Size nodes."""
    return [n.inputs[0] for n in cone if n.op_type in ("Shape", "Size") and n.inputs and n.inputs[0] is not None]
