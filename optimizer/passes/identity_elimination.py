"""Identity elimination: remove nodes that provably pass their input through unchanged.

Cases handled (each counted in ``stats`` under the op type):
- Identity; Dropout in inference mode (no training_mode, or a constant false one) whose mask
  output is unused; Cast / CastLike to the input's own dtype; a Cast back from a lossless
  widening (float16 -> float32 -> float16, bool -> int64 -> bool); Concat of a single input, and
  Concat's inputs of static length 0 on its axis dropped first (TorchScript's cat of a rotated head
  with its empty pass-through);
- Reshape to the same shape (entries 0 = copy, equal to the input's static dim, or the same
  symbolic dim read back through Shape/Gather/Slice/Concat chains; at most one -1), Expand to a
  shape the input already has (same reasoning), Transpose with the identity
  permutation, Slice over whole axes with step 1 (an end that is the axis's own symbolic dim read
  back through a Shape chain included: TorchScript's h[:, :query_embeds.shape[1]], Optimum's
  causal_mask[..., :attention_mask.shape[-1]]), a Slice from 0 of an Expand that gives the
  expanded value's shape back (the value: PEFT's prompt encoders), Squeeze without axes of a static shape with no 1s,
  Pad with all-zero pads, Flatten of a rank-2 input at axis 1; Squeeze(Unsqueeze(a, A), A) (a;
  the other order stays: unbind-pairs' picks, Slice -> Squeeze -> Unsqueeze -> Concat, are what the
  interleaved-RoPE rules match);
- x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 where the constant broadcasts into x without changing
  its shape (dtype is the same by the op's contract); x + ConstantOfShape(s) of zeros where s is a
  shape x already has (Expand's reasoning: torch.baddbmm(torch.zeros(...), q, k) writes it, as
  GPT-NeoX / GPT-J attention before transformers 4.4x did);
- an Expand read by an elementwise op that broadcasts its inputs (Add, Mul, Where, Equal, ...) whose
  other input has a shape the Expand's output broadcasts into, when every reader is such an op: the
  readers read the Expand's input (they broadcast it the same way) and the Expand goes (MobileViT V2's
  context.expand_as(v) * relu(v); DistilBERT's masked_fill(mask.expand_as(scores)) shared by layers).

Graph outputs keep their names: when the removed node's output is a graph output, the producer's
value is renamed to it; when that cannot be done (the input is a graph input, an initializer, an
outer-scope value or already a graph output), the node stays as (or becomes) an Identity.
"""

from __future__ import annotations

import operator

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import const_ints
from onnx_fuse.passes._dim_lengths import TO_END
from onnx_fuse.passes._dim_products import shape_vector, value_dims
from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes._shape_values import read_dims
from onnx_fuse.passes._shape_values import shape_entries as _shape_entries
from onnx_fuse.passes.constant_folding import constant_tensor

_BIG = TO_END  # Slice ends at or beyond this mean "to the end" (passes/_dim_lengths.py: the bound and why)
# dtype -> dtypes that represent each of its values exactly (a Cast there and back is a no-op)
_WIDER = {ir.DataType.FLOAT16.value: (ir.DataType.FLOAT.value, ir.DataType.DOUBLE.value),
          ir.DataType.BFLOAT16.value: (ir.DataType.FLOAT.value, ir.DataType.DOUBLE.value),
          ir.DataType.FLOAT.value: (ir.DataType.DOUBLE.value,),
          # bool's 0 / 1 in any number type, and back (x != 0): a frame mask cast to int64 and read as bool
          ir.DataType.BOOL.value: tuple(t.value for t in (
              ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16, ir.DataType.INT32,
              ir.DataType.UINT32, ir.DataType.INT64, ir.DataType.UINT64, ir.DataType.FLOAT16,
              ir.DataType.BFLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE))}


# elementwise ops that broadcast every input both ways (ONNX's multidirectional broadcasting; opset >= 8, as
# Expand itself): an input expanded to the shape another input already has is broadcast by the op itself
_BROADCASTING = frozenset(("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where",
                           "And", "Or", "Xor", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                           "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"))
# elementwise ops of one input (their output has its input's shape, each entry a function of one entry): they
# commute with Expand, op(Expand(a, s)) = Expand(op(a), s), so an Expand drop reads through them
_UNARY = frozenset(("Not", "Cast", "Neg", "Abs", "Sign", "Reciprocal", "Sqrt", "Exp", "Log", "Erf", "Tanh",
                    "Sigmoid", "Relu", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid",
                    "HardSwish", "Floor", "Ceil", "Round", "IsNaN", "IsInf", "Sin", "Cos", "BitwiseNot",
                    "Identity"))


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    if a is None or a.is_ref():
        return default if a is None else _Unknown
    return a.value


class _Unknown:  # a reference attribute (inside a function): value not known here
    pass


def _all_equal(value: ir.Value | None, target: float) -> bool:
    t = constant_tensor(value)
    if t is None or t.size > 4096 or t.dtype in (ir.DataType.STRING,) or t.dtype.bitwidth < 8:
        return False
    try:
        arr = t.numpy()
    except Exception:
        return False
    return arr.size > 0 and bool(np.all(arr == target))


def _dim_matches(entry, dim) -> bool:
    """An entry of a shape value denotes this dim: the same int, or the same symbolic name."""
    if isinstance(entry, int):
        return isinstance(dim, int) and dim == entry
    return not isinstance(dim, int) and dim.value is not None and str(dim.value) == entry


def _keeps(entry, dim, same=_dim_matches) -> bool:
    """Broadcasting ``entry`` against ``dim`` leaves the dim: the int 1, or ``same`` as it (``_dim_matches`` for a
    shape value's entry or a constant's dim against an inferred dim; ``==`` between two read_dims entries)."""
    return (isinstance(entry, int) and entry == 1) or same(entry, dim)


def _broadcasts(entries, dims, same=_dim_matches) -> bool:
    """``entries`` broadcast into ``dims`` without changing them: rank no larger, each entry (right-aligned)
    ``_keeps`` the dim it meets."""
    if entries is None or dims is None or len(entries) > len(dims):
        return False
    return all(_keeps(e, d, same) for e, d in zip(reversed(entries), reversed(dims)))


def _broadcasts_into(const: ir.Value, x: ir.Value) -> bool:
    """True when broadcasting ``const`` against ``x`` leaves x's shape unchanged."""
    t = constant_tensor(const)
    return t is not None and _broadcasts(list(t.shape), read_dims(x, names="raw"))


class IdentityEliminationPass(FusePass):
    """Remove identity-like nodes (see module docstring)."""

    name = "identity-elimination"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is not graph or node.domain not in ("", "ai.onnx"):
                    continue
                if node.op_type == "Concat" and self._drop_empty_inputs(node):
                    self.stats["Concat-empty-input"] += 1
                    modified = True
                source = self._passthrough_input(node)
                if source is not None and self._bypass(node, source, graph):
                    self.stats[node.op_type] += 1
                    modified = True
                elif source is None and node.op_type == "Expand" and self._unexpand_readers(node):
                    modified = True
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _drop_empty_inputs(node: ir.Node) -> bool:
        """Concat's inputs of static length 0 on its axis add nothing: they go, while one input of
        another length stays (a Concat left with one input is then that input). TorchScript keeps
        torch.cat([x_rot, x[..., rd:]]) with rd the whole head (Phi-3, GPT-J rotary_dim = head size,
        GPT-NeoX rotary_pct 1.0), where dynamo folds the empty slice away."""
        ins = list(node.inputs)
        axis = _attr(node, "axis")
        if len(ins) < 2 or any(v is None for v in ins) or not isinstance(axis, int):
            return False

        def empty(v: ir.Value) -> bool:
            dims = read_dims(v, names="raw")
            if dims is None or not -len(dims) <= axis < len(dims):
                return False
            d = dims[axis]
            return isinstance(d, int) and d == 0

        keep = [v for v in ins if not empty(v)]
        if len(keep) == len(ins) or not keep:
            return False
        for i, v in enumerate(keep):
            node.replace_input_with(i, v)
        node.resize_inputs(len(keep))
        return True

    # -- which input passes through unchanged, if any -----------------------------------------

    @staticmethod
    def _cast_round_trip(x: ir.Value, to) -> ir.Value | None:
        """Cast(Cast(a, wider), a's dtype) is a: the widening holds every value of a's dtype
        (TorchScript writes softmax(dtype=float32).to(float16) of a float16 softmax so; a bool
        mask cast to a number and back: 0 / 1, then != 0)."""
        inner = x.producer()
        if inner is None or inner.op_type != "Cast" or inner.domain not in ("", "ai.onnx") or not inner.inputs:
            return None
        a = inner.inputs[0]
        if a is None or a.dtype is None or x.dtype is None or to is _Unknown or to != a.dtype.value:
            return None
        return a if x.dtype.value in _WIDER.get(a.dtype.value, ()) else None

    def _passthrough_input(self, node: ir.Node) -> ir.Value | None:
        op = node.op_type
        ins = list(node.inputs)
        if not ins or ins[0] is None or not node.outputs:
            return None
        x = ins[0]
        if op == "Identity":
            return x
        if op == "Dropout":
            return x if self._inference_dropout(node) else None
        if len(node.outputs) != 1:
            return None
        if op == "Cast":
            to = _attr(node, "to")
            if x.dtype is not None and to is not _Unknown and to == x.dtype.value:
                return x
            return self._cast_round_trip(x, to)
        if op == "CastLike":
            return x if x.dtype is not None and len(ins) > 1 and ins[1] is not None and ins[1].dtype == x.dtype else None
        if op == "Concat":
            return x if len(ins) == 1 else None
        if op == "Reshape":
            return x if len(ins) > 1 and self._same_reshape(node, x, ins[1]) else None
        if op == "Expand":
            return x if len(ins) > 1 and self._same_expand(x, ins[1]) else None
        if op == "Transpose":
            perm = _attr(node, "perm")
            rank = len(x.shape) if x.shape is not None else None
            if perm is None:
                return x if rank is not None and rank <= 1 else None
            return x if perm is not _Unknown and list(perm) == list(range(len(perm))) else None
        if op == "Slice":
            return x if self._whole_slice(node, x) else self._expand_taken_back(node, x)
        if op == "Squeeze":  # not Unsqueeze(Squeeze(a)): the interleaved-RoPE rules read that pair
            undone = self._undone_axes(node, x)
            if undone is not None:
                return undone
        if op == "Squeeze":
            dims = read_dims(x, names="raw")
            if len(ins) == 1 and _attr(node, "axes") is None and dims is not None:
                return x if all(isinstance(d, int) and d != 1 for d in dims) else None
            return None
        if op == "Pad":
            pads = const_ints(ins[1], 64) if len(ins) > 1 else _attr(node, "pads")
            return x if pads is not None and pads is not _Unknown and all(p == 0 for p in pads) else None
        if op == "Flatten":
            dims = read_dims(x, names="raw")
            axis = _attr(node, "axis", 1)
            return x if dims is not None and len(dims) == 2 and axis in (1, -1) else None
        if op in ("Add", "Mul") and len(ins) == 2 and ins[1] is not None:
            neutral = 0.0 if op == "Add" else 1.0
            for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
                if _all_equal(b, neutral) and _broadcasts_into(b, a):
                    return a
                if op == "Add" and self._zeros_within(b, a):
                    return a
            return None
        if op in ("Sub", "Div") and len(ins) == 2 and ins[1] is not None:
            neutral = 0.0 if op == "Sub" else 1.0
            return x if _all_equal(ins[1], neutral) and _broadcasts_into(ins[1], x) else None
        return None

    @staticmethod
    def _undone_axes(node: ir.Node, x: ir.Value) -> ir.Value | None:
        """Squeeze(Unsqueeze(a, A), A) (and Unsqueeze(Squeeze(a, A), A), which the caller does not
        ask for) is a: the Squeeze only drops size-1 axes and the Unsqueeze puts them back at the
        same places (the axes of both counted in the larger rank). One pass's view undone by the next one's (attention-grouped-5d
        squeezes the mask's group axis that attention-plain-grouped unsqueezed)."""
        inner = x.producer()
        pair = {"Squeeze": "Unsqueeze", "Unsqueeze": "Squeeze"}[node.op_type]
        if inner is None or inner.op_type != pair or inner.domain not in ("", "ai.onnx") or not inner.inputs:
            return None
        a = inner.inputs[0]
        big = a if node.op_type == "Unsqueeze" else x
        if a is None or big.shape is None:
            return None
        rank = len(big.shape)

        def axes(n: ir.Node) -> set[int] | None:
            got = _attr(n, "axes")
            if got is None or got is _Unknown:
                got = const_ints(n.inputs[1], 64) if len(n.inputs) > 1 else None
            if not got:
                return None
            norm = {int(v) % rank for v in got}
            return norm if len(norm) == len(got) else None

        one, two = axes(node), axes(inner)
        return a if one is not None and one == two else None

    def _zeros_within(self, zeros: ir.Value, x: ir.Value) -> bool:
        """zeros = ConstantOfShape(s) filled with 0 (the default value) and s a shape x already has,
        so x + zeros is x (a dynamic-shape zero tensor that constant folding cannot fold)."""
        node = zeros.producer()
        if node is None or node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") \
                or not node.inputs or node.inputs[0] is None:
            return False
        value = _attr(node, "value")
        if value is _Unknown or (value is not None and not bool(np.all(value.numpy() == 0))):
            return False
        if self._same_expand(x, node.inputs[0]):
            return True
        # products of dims (TorchScript's zeros(batch * heads, ...)): compare canonical products
        found, dims = shape_vector(node.inputs[0], {}), value_dims(x)
        if found is None or found[1] or dims is None or len(found[0]) > len(dims):
            return False
        return all(e is not None and (e == (1, ()) or (d is not None and e == d and not any(
            invented_name(a) for a in d[1]))) for e, d in zip(reversed(found[0]), reversed(dims)))

    @staticmethod
    def _inference_dropout(node: ir.Node) -> bool:
        if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
            return False
        ins = list(node.inputs)
        if len(ins) > 2 and ins[2] is not None:
            t = constant_tensor(ins[2])
            if t is None or bool(t.numpy().reshape(-1)[0]):
                return False
        is_test = _attr(node, "is_test", None)  # opset <= 6
        return is_test is None or is_test == 1

    @staticmethod
    def _same_reshape(node: ir.Node, x: ir.Value, shape_value: ir.Value) -> bool:
        found = _shape_entries(shape_value)
        dims = read_dims(x, names="raw")
        if found is None or found[1] or dims is None or len(found[0]) != len(dims):
            return False
        allowzero = _attr(node, "allowzero", 0)
        minus_one = 0
        for t, d in zip(found[0], dims):
            if t == 0 and not allowzero:
                continue
            if t == -1:
                minus_one += 1
            elif not _dim_matches(t, d):
                return False
        # With every other dim kept, a single -1 can only be the original dim again.
        return minus_one <= 1

    @staticmethod
    def _same_expand(x: ir.Value, shape_value: ir.Value) -> bool:
        found = _shape_entries(shape_value)
        return found is not None and not found[1] and _broadcasts(found[0], read_dims(x, names="raw"))

    def _unexpand_readers(self, node: ir.Node) -> bool:
        """op(b, Expand(a, s)) is op(b, a) for an elementwise op that broadcasts its inputs (_BROADCASTING) when
        another input b of it has a shape the Expand's output broadcasts into (right-aligned, each of the output's
        dims 1 or b's: equal ints or the same model-given symbolic name): a broadcasts into the output, so into b,
        and the op's output shape and values stay. When every reader is such an op (and the output is no graph
        output) each reads a and the Expand goes (MobileViT V2's context.expand_as(v) * relu(v); DistilBERT's
        masked_fill(mask.expand_as(scores)), CSE sharing it across layers). One other reader keeps the Expand
        and every reader on it: moving some readers off an Expand that stays saves nothing (the attention
        lowerings' keep-masked-rows Max(m, m * 0.5 + F) reads its expanded mask twice).

        A one-input elementwise reader (_UNARY: Not, Cast, Neg ...) commutes with the Expand, u(Expand(a)) =
        Expand(u(a)): it is read through, its readers held to the same test (masked_fill(~mask.expand_as(s))
        writes Where(Not(Expand(m, Shape(s))), min, s)); when all pass, it reads a (its output a's shape). A
        co-input b that is itself the Expand's output or one read through it does not count (Add(e, Not(e)))."""
        ins = list(node.inputs)
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if len(ins) < 2 or ins[0] is None or out is None:
            return False
        want = read_dims(out, names="model", unknown="opaque")
        if want is None:
            return False
        through = [out]   # the Expand's output and the outputs of the unary readers read through
        reads = []        # (broadcasting reader, index of the input it reads from `through`)
        for v in through:
            uses = list(v.uses())
            if v.is_graph_output() or not uses or len(through) > 16:
                return False
            for use in uses:
                reader = use.node
                if reader.domain not in ("", "ai.onnx") or len(reader.outputs) != 1:
                    return False
                if reader.op_type in _UNARY and len(reader.inputs) == 1:
                    if reader.outputs[0] not in through:
                        through.append(reader.outputs[0])
                elif reader.op_type in _BROADCASTING:
                    reads.append((reader, use.idx))
                else:
                    return False
        for reader, idx in reads:
            if not any(_broadcasts(want, read_dims(v, names="model", unknown="opaque"), operator.eq)
                       for j, v in enumerate(reader.inputs) if j != idx and v is not None and v not in through):
                return False
        a = ins[0]
        out.replace_all_uses_with(a)
        node.graph.remove(node, safe=True)
        for v in through[1:]:   # each read-through output has a's shape now
            v.shape = ir.Shape(list(a.shape)) if a.shape is not None else None
        self.stats["Expand"] += 1
        return True

    @classmethod
    def _expand_taken_back(cls, node: ir.Node, x: ir.Value) -> ir.Value | None:
        """Slice(Expand(a, s)) is a when, on every axis, the Slice takes a whole axis Expand kept (its target
        entry 1 or a's dim) or the first entry of an axis Expand broadcast from 1 (from 0, step 1; expanded
        dims are taken as >= 1), and leaves no broadcast axis whole. PEFT's prompt encoders write it (the
        virtual-token ids [1, P] expanded to the batch, then [:1]); once it is gone their embedding / MLP
        reads constants only and folds."""
        inner = x.producer()
        if inner is None or inner.op_type != "Expand" or inner.domain not in ("", "ai.onnx") or len(inner.inputs) < 2:
            return None
        a = inner.inputs[0]
        dims = read_dims(a, names="raw") if a is not None else None
        found = _shape_entries(inner.inputs[1])
        ins = list(node.inputs) + [None] * 5
        if dims is None or found is None or found[1] or len(found[0]) > len(dims) or ins[1] is None:
            return None
        entries = [1] * (len(dims) - len(found[0])) + list(found[0])
        kept = [_keeps(t, d) for t, d in zip(entries, dims)]
        starts, ends = const_ints(ins[1], 64), const_ints(ins[2], 64)
        axes = const_ints(ins[3], 64) if ins[3] is not None else list(range(len(starts or ())))
        steps = const_ints(ins[4], 64) if ins[4] is not None else [1] * len(starts or ())
        if starts is None or ends is None or axes is None or steps is None:
            return None
        sliced = {}
        for s, e, ax, st in zip(starts, ends, axes, steps):
            if not -len(dims) <= ax < len(dims) or s != 0 or st != 1:
                return None
            sliced[ax % len(dims)] = e
        for i, (d, keep) in enumerate(zip(dims, kept)):
            e = sliced.get(i)
            if keep:   # the whole axis (or not sliced)
                if e is not None and not (e >= _BIG or (isinstance(d, int) and e >= d)):
                    return None
            elif d != 1 or e is None or e < 1:   # broadcast from 1: the first copy only
                return None
        return a

    @staticmethod
    def _whole_slice(node: ir.Node, x: ir.Value) -> bool:
        ins = list(node.inputs) + [None] * 5
        dims = read_dims(x, names="raw")
        if dims is None:
            return False
        if ins[1] is None:  # opset < 10: attributes
            starts, ends, axes, steps = _attr(node, "starts"), _attr(node, "ends"), _attr(node, "axes"), None
            if _Unknown in (starts, ends, axes):
                return False
        else:
            starts, ends = const_ints(ins[1], 64), const_ints(ins[2], 64)
            if ends is None:  # ends read from a shape (TorchScript's h[:, :q.shape[1]]): names the axis's own dim?
                found = _shape_entries(ins[2])
                ends = None if found is None or found[1] else found[0]
            axes = const_ints(ins[3], 64) if ins[3] is not None else None
            steps = const_ints(ins[4], 64) if ins[4] is not None else None
            if starts is None or ends is None or (ins[3] is not None and axes is None) or (
                    ins[4] is not None and steps is None):
                return False
        starts, ends = list(starts), list(ends)
        axes = list(range(len(starts))) if axes is None else list(axes)
        steps = [1] * len(starts) if steps is None else list(steps)
        for s, e, a, st in zip(starts, ends, axes, steps):
            if not -len(dims) <= a < len(dims) or st != 1:
                return False
            d = dims[a]
            static = isinstance(d, int)
            if not (s == 0 or (static and s <= -d)):
                return False
            if isinstance(e, str):  # a symbolic end: whole only when it is the sliced axis's own dim
                if not _dim_matches(e, d):
                    return False
            elif not (e >= _BIG or (static and e >= d)):
                return False
        return True

    # -- the rewrite --------------------------------------------------------------------------

    @staticmethod
    def _bypass(node: ir.Node, source: ir.Value, graph: ir.Graph) -> bool:
        out = node.outputs[0]
        if not out.is_graph_output():
            out.replace_all_uses_with(source)
            graph.remove(node, safe=True)
            return True
        producer = source.producer()
        renamable = (producer is not None and producer.graph is graph and not source.is_graph_output()
                     and not source.is_graph_input() and not source.is_initializer())
        if renamable:
            name = out.name
            out.replace_all_uses_with(source, replace_graph_outputs=True)
            graph.remove(node, safe=True)
            out.name = None
            source.name = name
            # the graph output's declared type is the model's contract: it wins over what
            # inference says of the source (ONNX's Attention-23 inference writes 0 for an
            # unknown V width)
            if out.type is not None:
                source.type = out.type
            if out.shape is not None:
                source.shape = out.shape
            return True
        if node.op_type == "Identity" and len(node.inputs) == 1 and len(node.outputs) == 1:
            return False
        ident = ir.node("Identity", [source])
        graph.insert_before(node, ident)
        new = ident.outputs[0]
        new.type, new.shape = out.type, out.shape
        name = out.name
        out.replace_all_uses_with(new, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        out.name = None
        new.name = name
        return True
