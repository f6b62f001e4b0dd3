"""Shape and type inference with symbolic dimensions kept (onnx's inference through onnx-ir).

Large initializers are detached before inference (onnx-ir's ``call_onnx_api``) so a 4 GiB model is
never copied into a proto. Inference only adds facts: a value gains a type it lacked, a shape it
lacked, or a static dim where it had a symbolic or unknown one; a known dim is never overwritten.
The pass changes only value metadata, so it reports ``modified`` only when some value gained
something. Inference is best effort: when onnx raises, the model is left as it was, ``stats``
counts the failure and ``stats_reason`` carries the first line of the error for the report.

Data propagation (constant shape math such as ``Concat(Shape(x)[0:1], [1024])``) is only run when
no 1-D value is longer than ``DATA_PROP_MAX_LEN``: onnx turns every 1-D operand of Add/Mul/Concat/
Gather/Slice into a list of dims, about 50 bytes and a microsecond per element, whether or not its
values are known (a 1-D weight of 100 MB cost 5 GB and 20 s). Shape vectors are a few elements
long, so a first inference without propagation finds the long vectors, and only a model without
them pays for the second one with propagation.

Names onnx makes up for dims it cannot relate (``unk__N``) are not facts: the pass runs again after
cleanup (optimizer/levels.py), when folding has turned shape arithmetic into constants (a rotate-half
Slice whose end was ``Shape(x)[-1] // 2``), and there such a name must give way to what inference
now proves (the head count 2, the symbol ``sequence``). So the copy given to onnx has those names
cleared, and a value's ``unk__N`` dim takes any int or exporter symbol inference finds.
Each run numbers its inventions afresh (``unk__1`` again), so the names a run leaves behind are
made unique to it (``unk__r<run>_<N>``): one name must never stand for two dims in the saved
model, or ONNX Runtime equates them (its buffer reuse failed on the affine_grid node tests).

The TorchScript exporter names a graph output's dims it could not relate ``<OpType><output>_dim_<i>``
(``Concatpresent.0.value_dim_0``: the producer's op type, the output's name, the axis). Those
placeholders are not facts either: they are cleared and give way to what inference proves (the
present's batch is the past's ``batch``), or the KV cache's views could not be proven.

A Loop that may run zero times (its trip count or first condition not a constant that runs it)
gives scan outputs whose symbolic dims ONNX Runtime makes 0: onnx names them after the body
([M, 2, H, W]), ORT returns [0, 2, 0, 0]. Such a name equates a dim with H where it is 0, so the
scan outputs keep only their first and static dims, in the model and in what inference returns.

A sequence's elements share one inferred element shape, so onnx gives every SequenceAt of it the
same invented name for a dim the elements need not share (SplitToSequence by sizes fed at run
time: [2, 3, unk] for pieces of widths 1 and 5), and ORT, equating the two, failed its buffer reuse.
So sequences' element shapes, SequenceAt outputs and what is computed from them keep no invented
name.
"""

from __future__ import annotations

import itertools

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import _c_api_utils

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._op_shapes import stand_in_plugin_ops
from onnx_fuse.passes.merged_decoder import restate_merged_mask
from onnx_fuse.passes._subgraph_scopes import restore_names, share_outer_constants, unique_subgraph_names
from onnx_fuse.passes._shape_values import INVENTED_DIM_PREFIX, constant_tensor, invented_name, unknown_or_invented

#: Longest 1-D value (elements) for which data propagation still runs; see the module docstring.
DATA_PROP_MAX_LEN = 4096

_RUNS = itertools.count(1)


def _tag_generated_dims(model: ir.Model, run: int) -> None:
    """Rename this run's invented dim names to ones no other run uses (see the docstring)."""
    for graph in model.graphs():
        for value in ir.convenience.create_value_mapping(graph).values():
            shape = value.shape
            if shape is None or not any(_untagged(d) for d in shape):
                continue
            value.shape = ir.Shape([f"{INVENTED_DIM_PREFIX}r{run}_{d.value[len(INVENTED_DIM_PREFIX):]}"
                                    if _untagged(d) else d for d in shape])


#: graph.meta key of the exporter placeholders found so far (exporter_placeholders)
PLACEHOLDERS_KEY = "onnx_fuse.exporter_placeholders"


def _untagged(dim) -> bool:
    """A name this run invented, not yet tagged with its run."""
    return (not isinstance(dim, int) and invented_name(dim.value)
            and not str(dim.value)[len(INVENTED_DIM_PREFIX):].startswith("r"))


def _runs_once(loop: ir.Node) -> bool:
    """Whether a Loop runs its body at least once: a constant trip count > 0 (or none) and a
    constant true first condition (or none), not both absent."""
    trip, cond = (list(loop.inputs) + [None, None])[:2]
    if trip is None and cond is None:
        return False
    for value, runs in ((trip, lambda a: int(a) > 0), (cond, bool)):
        if value is None:
            continue
        tensor = constant_tensor(value)
        if tensor is None or tensor.numpy().size != 1 or not runs(tensor.numpy().reshape(())):
            return False
    return True


def _zero_trip_outputs(model: ir.Model) -> frozenset[str]:
    """Names of the scan outputs of Loops that may run zero times (see the docstring)."""
    return frozenset(value.name for graph in model.graphs() for node in graph
                     if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and not _runs_once(node)
                     for value in node.outputs[max(len(node.inputs) - 2, 0):])


def _forget_zero_trip_dims(model: ir.Model, names: frozenset[str]) -> int:
    """Clear the symbolic dims after the first of the values ``names``; returns how many changed.
    (The names are found on the model itself: the copy inference returns has its initializers
    detached, so its trip counts are no constants.)"""
    if not names:
        return 0
    cleared = 0
    for graph in model.graphs():
        for node in graph:
            for value in node.outputs:
                shape = value.shape
                if (value.name not in names or shape is None
                        or all(isinstance(d, int) or d.value is None for d in shape[1:])):
                    continue
                value.shape = ir.Shape([shape[0], *(d if isinstance(d, int) else None for d in shape[1:])])
                cleared += 1
    return cleared


def _sequence_values(model: ir.Model) -> frozenset[str]:
    """Names of the sequence values and the SequenceAt outputs (see the docstring)."""
    return frozenset(value.name for graph in model.graphs() for node in graph for value in node.outputs
                     if isinstance(value.type, ir.SequenceType)
                     or (node.op_type == "SequenceAt" and node.domain in ("", "ai.onnx")))


def _forget_sequence_element_dims(model: ir.Model) -> int:
    """Clear the invented dim names of the sequences' element shapes, of the SequenceAt outputs and of
    every value computed from them; returns how many values changed."""
    names = _sequence_values(model)
    if not names:
        return 0
    cleared = 0
    body = set()
    for graph in model.graphs():
        for node in graph:
            for value in node.outputs:
                shape = value.shape
                if value.name not in names or shape is None:
                    continue
                invented = {d.value for d in shape if not isinstance(d, int) and invented_name(d.value)}
                if invented:
                    body |= invented
                    value.shape = ir.Shape([None if not isinstance(d, int) and d.value in invented else d
                                            for d in shape])
                    cleared += 1
    return cleared + _forget_after_zero_trip(model, names, frozenset(body))


def _body_names(model: ir.Model, names: frozenset[str]) -> frozenset[str]:
    """The symbolic dim names after the first of the values ``names`` (what the Loop's body named)."""
    if not names:   # no zero-trip Loop (nearly every model): no walk over the graph on each inference
        return frozenset()
    return frozenset(d.value for graph in model.graphs() for node in graph for value in node.outputs
                     if value.name in names and value.shape is not None
                     for d in value.shape[1:] if not isinstance(d, int) and d.value is not None)


def _reads(node: ir.Node) -> set[str]:
    """Names of the values ``node`` reads, in its subgraphs too (outer-scope references)."""
    out = {v.name for v in node.inputs if v is not None}
    for attr in node.attributes.values():
        for g in (attr.value,) if attr.type == ir.AttributeType.GRAPH else (
                attr.value if attr.type == ir.AttributeType.GRAPHS else ()):
            out.update(name for n in g for name in _reads(n))
    return out


def _forget_after_zero_trip(model: ir.Model, names: frozenset[str], body: frozenset[str]) -> int:
    """Clear the dims named ``body`` on every value computed from the values ``names``: onnx infers
    Relu(scan output) as [M, 2, H, W] from the body's names again, where ORT gives [0, 2, 0, 0] too.
    Returns how many values changed."""
    if not names or not body:
        return 0
    cleared, tainted = 0, set(names)
    for graph in model.graphs():
        for node in graph:
            if not tainted & _reads(node):
                continue
            for value in node.outputs:
                tainted.add(value.name)
                shape = value.shape
                if value.name in names or shape is None or not any(
                        not isinstance(d, int) and d.value in body for d in shape):
                    continue
                value.shape = ir.Shape([None if not isinstance(d, int) and d.value in body else d for d in shape])
                cleared += 1
    return cleared


def exporter_placeholders(model: ir.Model) -> set[str]:
    """The TorchScript exporter's ``<OpType><output>_dim_<i>`` names on graph outputs (docstring).
    Names found once stay placeholders (kept in the graph's meta): cleanup may remove the producer
    they name (GPT-J 4.48's float16 export casts its float32 present key to float32, so
    ``Castpresent.0.key_dim_2`` sits on a Concat's output once the Cast is gone)."""
    names = set(model.graph.meta.get(PLACEHOLDERS_KEY, ()))
    for graph in model.graphs():
        for value in graph.outputs:
            node = value.producer()
            if node is None or value.shape is None:
                continue
            names |= {str(d.value) for i, d in enumerate(value.shape)
                      if not isinstance(d, int) and d.value == f"{node.op_type}{value.name}_dim_{i}"}
    model.graph.meta[PLACEHOLDERS_KEY] = frozenset(names)
    return names


def _forget_generated_dims(graph: onnx.GraphProto, placeholders: frozenset[str] = frozenset()) -> None:
    """Clear invented dim names (and the exporter's placeholders) in value_info and outputs, so
    inference may replace them (see the docstring; the model's own values keep theirs unless
    inference proves more)."""
    for vi in (*graph.value_info, *graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and (invented_name(d.dim_param) or d.dim_param in placeholders):
                    d.ClearField("dim_param")
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                _forget_generated_dims(attr.g, placeholders)
            for g in attr.graphs:
                _forget_generated_dims(g, placeholders)


def _graph_values(graph: onnx.GraphProto):
    yield from graph.input
    yield from graph.value_info
    yield from graph.output
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graph_values(attr.g)
            for g in attr.graphs:
                yield from _graph_values(g)


def longest_vector(proto: onnx.ModelProto) -> int:
    """The most static elements of any 1-D tensor value the model declares or inferred."""
    longest = 0
    for vi in _graph_values(proto.graph):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.HasField("shape") and len(tt.shape.dim) == 1:
            longest = max(longest, tt.shape.dim[0].dim_value)
    return longest


def _merge_shape(old: ir.Shape | None, new: ir.Shape | None,
                 placeholders: frozenset[str] = frozenset()) -> tuple[ir.Shape | None, int]:
    """The better of two shapes for one value, and how many facts that adds (an exporter
    placeholder name states no fact, as an invented one)."""
    if new is None:
        return old, 0
    if old is None:
        return new, 1
    if len(old) != len(new):
        return old, 0  # disagreement: keep what the model declared
    dims, gained = [], 0
    for o, n in zip(old, new):
        if not isinstance(o, int) and isinstance(n, int):
            dims.append(n)
            gained += 1
        elif _states_nothing(o, placeholders) and not _states_nothing(n, placeholders):
            dims.append(n)
            gained += 1
        elif _producer_named(o) and not _states_nothing(n, placeholders) and not _producer_named(n):
            dims.append(n)   # a dim named after its value (_dim_source) gives way to an exporter's symbol
            gained += 1
        else:
            dims.append(o)
    return (ir.Shape(dims), gained) if gained else (old, 0)


def _forget_producer_dims(model: ir.Model) -> dict | None:
    """Clear every dim named after its value (passes/_dim_source.py); None where there is none,
    else every value's (type, shape) as it was, to tell re-derived names from new facts."""
    values = [v for g in model.graphs() for v in ir.convenience.create_value_mapping(g).values()]
    if not any(v.shape is not None and any(_producer_named(d) for d in v.shape) for v in values):
        return None
    kept = {v: (v.type, v.shape) for v in values}
    for v in values:
        if v.shape is not None and any(_producer_named(d) for d in v.shape):
            v.shape = ir.Shape([None if _producer_named(d) else d for d in v.shape])
    return kept


def _producer_named(dim) -> bool:
    from onnx_fuse.passes._dim_source import producer_dim

    return not isinstance(dim, int) and producer_dim(str(dim.value))


def _states_nothing(dim, placeholders: frozenset[str]) -> bool:
    return unknown_or_invented(dim) or (not isinstance(dim, int) and str(dim.value) in placeholders)


def _call_onnx_api(fn, model: ir.Model):
    """onnx-ir's ``call_onnx_api``, leaving the model as it was when it raises. It turns the
    initializers into graph inputs and detaches the large ones' values, then serializes outside
    its try/finally: a model that fails to serialize (a dim outside int64) kept every weight as an
    overridable input, the large ones empty."""
    inputs, inits = list(model.graph.inputs), dict(model.graph.initializers)
    values = {name: (v.const_value, v.shape, v.type) for name, v in inits.items()}
    try:
        return _c_api_utils.call_onnx_api(fn, model)
    except Exception:
        model.graph.inputs.clear()
        model.graph.inputs.extend(inputs)
        model.graph.initializers.clear()
        for name, v in inits.items():
            v.const_value, v.shape, v.type = values[name]
            model.graph.initializers[name] = v
        raise


class ShapeInferencePass(FusePass):
    name = "shape-inference"

    def __init__(self, *, data_prop: bool = True) -> None:
        super().__init__()
        self.data_prop = data_prop
        self.stats_reason: str | None = None
        self._refining = False

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # a false input declaration is no fact to infer from (passes/merged_decoder.py)
        restated = restate_merged_mask(model) if not self._refining else 0
        if restated:
            self.stats["merged-mask-restated"] += restated
        # dims named after their values (passes/_dim_source.py ``_unsolved``) are derived again from
        # the graph as it is now: a rewrite may have made a better fact reachable (a fused
        # attention's output batch_size meeting the residual's), which a kept name would hide
        kept = _forget_producer_dims(model) if not self._refining else None
        zero_names = _zero_trip_outputs(model)
        zero_body = _body_names(model, zero_names)
        zero_trip = _forget_zero_trip_dims(model, zero_names) + _forget_after_zero_trip(model, zero_names, zero_body)
        zero_trip += _forget_sequence_element_dims(model)   # names an export or a run left
        placeholders = frozenset(exporter_placeholders(model))
        fed = frozenset(v.name for v in model.graph.inputs)

        def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
            _forget_generated_dims(proto.graph, placeholders)
            stand_in_plugin_ops(proto.graph)
            # subgraphs as onnx would see them in a main graph (passes/_subgraph_scopes.py)
            share_outer_constants(proto.graph, fed)
            back = unique_subgraph_names(proto.graph)
            result = infer_copy(proto)
            restore_names(result.graph, back)
            return result

        def infer_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
            plain = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                      data_prop=False)
            if not self.data_prop:
                return plain
            if longest_vector(plain) > DATA_PROP_MAX_LEN:
                self.stats["data-prop-skipped"] += 1
                return plain
            return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                     data_prop=True)

        try:
            inferred = ir.serde.deserialize_model(_call_onnx_api(infer, model))
        except Exception as exc:  # best effort: a model onnx cannot infer still optimizes
            self.stats["failed"] += 1
            text = str(exc).strip()
            self.stats_reason = ("shape inference failed: " + (text.splitlines()[0] if text else
                                 type(exc).__name__))
            for value, (_, shape) in (kept or {}).items():
                value.shape = shape
            return ir.passes.PassResult(model, modified=zero_trip > 0)
        # inference names them again each run: counted, but no change of the model by itself
        # and on the values computed from them, which it names after the body too
        zero_body = _body_names(inferred, zero_names)
        self.stats["zero-trip-dims-cleared"] += _forget_zero_trip_dims(inferred, zero_names)
        self.stats["zero-trip-dims-cleared"] += _forget_after_zero_trip(inferred, zero_names, zero_body)
        zero_trip += _forget_after_zero_trip(model, zero_names, zero_body)   # names an export or a run left
        _forget_sequence_element_dims(inferred)
        _tag_generated_dims(inferred, next(_RUNS))
        gained = 0
        for graph, inferred_graph in zip(model.graphs(), inferred.graphs()):
            found = ir.convenience.create_value_mapping(inferred_graph)
            for name, value in ir.convenience.create_value_mapping(graph).items():
                other = found.get(name)
                if other is None:
                    continue
                if value.type is None and other.type is not None:
                    value.type = other.type
                    gained += 1
                value.shape, added = _merge_shape(value.shape, other.shape, placeholders)
                gained += added
        # Reshape targets onnx cannot size (a -1 beside symbolic entries): when some became
        # static, infer once more so the facts reach the values after them (Transpose, RoPE...)
        from onnx_fuse.passes._dim_source import name_known_dims
        from onnx_fuse.passes.reshape_dims import refine_reshape_outputs

        refined = refine_reshape_outputs(model) if not self._refining else 0
        if refined:
            self.stats["reshape-dims"] += refined
        # dims onnx left unknown that an earlier value's dim provably equals (passes/_dim_source.py:
        # TorchScript's [B*H,S,D] bmm views, a hidden state after a residual Add)
        named = 0 if self._refining else sum(name_known_dims(g, placeholders) for g in model.graphs())
        if named:
            self.stats["dims-named"] += named
            refined += named
        if refined:
            again = ShapeInferencePass(data_prop=self.data_prop)
            again._refining = True   # one more round only; its stats are not this pass's
            gained += again.call(model).modified
        if not self._refining:   # names of sums kept on the side (passes/_dim_sums.py)
            from onnx_fuse.passes._dim_sums import record_dim_sums

            for g in model.graphs():
                record_dim_sums(g)
        if zero_trip:
            self.stats["zero-trip-dims-cleared"] += zero_trip
        if gained:
            self.stats["values-typed"] += gained
        if kept:   # names derived again as they were are no news: modified only where a value changed
            changed = any(v.type != t or v.shape != sh for v, (t, sh) in kept.items())
            return ir.passes.PassResult(model, modified=changed or restated > 0 or zero_trip > 0)
        return ir.passes.PassResult(model, modified=gained > 0 or refined > 0 or restated > 0 or zero_trip > 0)
