"""Rules that change the model's interface: the `graph_io` block (docs/rules.md "Graph inputs
and outputs").

A rule with ``graph_io`` may
  - add graph inputs (``inputs``: a rewrite name -> {name, dtype, shape}); an input of the same
    name made by another match of the rule is shared (block tables, sequence lengths);
  - put a rewrite value in the graph-output slot of a pattern output it retires (``outputs``:
    name -> {name, replaces}); the retired output must have no reader but the match; with
    ``crop: "{n}"`` (n > 0) the graph output is instead the one Slice of that pattern output that
    keeps its last n positions on axis 2 (a cache cropped to a window), and the Slice goes too;
  - retire graph inputs the match reads (``retire``: pattern leaves): once the rule has fired,
    they must have no reader left (a ``readers`` hook, registered by a target module, may
    re-derive what other nodes read from them first) and are removed; graph inputs that the
    rewrites left unread (a padding mask whose mask died with the attention) go too.

An interface changes once per model, not per match: such a rule fires on every candidate anchor
of the main graph or on none (``apply_atomic``), and says why not in the report.
Names, dtypes and dims are templates: plain text, or ``{expression}`` parts evaluated on the
match (a template that is one ``{expression}`` keeps the expression's value: an int dim).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import onnx_ir as ir

from onnx_fuse.rewrite import _expr

_TEMPLATE = re.compile(r"\{([^{}]+)\}")
_IO_KEYS = {"inputs", "outputs", "retire", "readers"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Template:
    """Text with ``{expression}`` parts."""

    def __init__(self, text: Any, line: int, error: type[Exception]):
        self.text = text
        self.parts: list[tuple[str, _expr.Expr | None]] = []
        if not isinstance(text, str):
            self.parts = [(str(text), None)] if not isinstance(text, int) else []
            return
        pos = 0
        for m in _TEMPLATE.finditer(text):
            if m.start() > pos:
                self.parts.append((text[pos:m.start()], None))
            try:
                self.parts.append((m.group(1), _expr.parse(m.group(1))))
            except _expr.ExprSyntaxError as exc:
                raise error(f"graph_io: {exc}", line) from None
            pos = m.end()
        if pos < len(text):
            self.parts.append((text[pos:], None))

    @property
    def names(self) -> set[str]:
        return {n for _, e in self.parts if e is not None for n in e.names}

    def evaluate(self, env: Mapping, ctx: Any) -> Any:
        if isinstance(self.text, int):
            return self.text
        if len(self.parts) == 1 and self.parts[0][1] is not None:
            v = self.parts[0][1].evaluate(env, ctx)
            return int(v) if hasattr(v, "item") and not isinstance(v, str) else v
        return "".join(t if e is None else str(e.evaluate(env, ctx)) for t, e in self.parts)


@dataclasses.dataclass
class NewInput:
    var: str
    name: Template
    dtype: Template
    shape: list[Template]


@dataclasses.dataclass
class NewOutput:
    var: str
    name: Template
    replaces: str
    crop: Template | None = None


@dataclasses.dataclass
class GraphIO:
    inputs: list[NewInput]
    outputs: list[NewOutput]
    retire: list[str]
    readers: str | None
    line: int

    @property
    def replaced(self) -> set[str]:
        return {o.replaces for o in self.outputs}


def parse(data: Any, line: int, error: type[Exception]) -> GraphIO:
    """The rule's ``graph_io`` mapping -> GraphIO; ``error(msg, line)`` is RuleError."""
    if not isinstance(data, Mapping):
        raise error("`graph_io` must be a mapping with inputs / outputs / retire / readers", line)
    unknown = set(data) - _IO_KEYS
    if unknown:
        raise error(f"graph_io: unknown key `{sorted(unknown)[0]}` (allowed: {', '.join(sorted(_IO_KEYS))})", line)
    inputs, outputs = [], []
    for var, spec in (data.get("inputs") or {}).items():
        if not isinstance(spec, Mapping) or set(spec) != {"name", "dtype", "shape"} \
                or not isinstance(spec["shape"], list):
            raise error(f"graph_io input {var!r} needs exactly name, dtype and shape (a list)", line)
        inputs.append(NewInput(var, Template(spec["name"], line, error), Template(spec["dtype"], line, error),
                               [Template(d, line, error) for d in spec["shape"]]))
    for var, spec in (data.get("outputs") or {}).items():
        if not isinstance(spec, Mapping) or set(spec) - {"crop"} != {"name", "replaces"} \
                or not isinstance(spec["replaces"], str):
            raise error(f"graph_io output {var!r} needs exactly name and replaces (a pattern output), "
                        "and optionally crop", line)
        crop = Template(spec["crop"], line, error) if "crop" in spec else None
        outputs.append(NewOutput(var, Template(spec["name"], line, error), spec["replaces"], crop))
    retire = data.get("retire", [])
    if not isinstance(retire, list) or not all(isinstance(r, str) for r in retire):
        raise error("graph_io: `retire` must be a list of pattern inputs (graph inputs)", line)
    readers = data.get("readers")
    if readers is not None and not isinstance(readers, str):
        raise error("graph_io: `readers` must name a registered hook", line)
    return GraphIO(inputs, outputs, retire, readers, line)


def check_rule(io: GraphIO, rule: Any, error: type[Exception]) -> None:
    """What can be checked without a model: names the pattern and rewrite agree on."""
    for o in io.outputs:
        if o.replaces not in rule.outputs[1:]:
            raise error(f"graph_io output {o.var!r} replaces {o.replaces!r}, which is not a pattern output "
                        "other than the anchor (list it in `outputs`)", io.line)
    for r in io.retire:
        if r not in rule.leaves:
            raise error(f"graph_io retires {r!r}, which is not an input (leaf) of the pattern", io.line)
    known = set(rule.producers) | rule.leaves | rule.captures
    for i in io.inputs:
        if i.var in known:
            raise error(f"graph_io input {i.var!r} is already a name of the pattern", io.line)
        for t in (i.name, i.dtype, *i.shape):
            bad = t.names - known
            if bad:
                raise error(f"graph_io input {i.var!r} uses {sorted(bad)[0]!r}, which the pattern does not bind",
                            io.line)


# ---- hooks -----------------------------------------------------------------------------------


@dataclasses.dataclass
class ReadersHook:
    """Re-derives what nodes outside the matches read from retired inputs (a target's business,
    e.g. the batch size and positions a decoder computes from its past KV tensors).

    ``check(graph, retiring, matched) -> reason | None`` runs before anything fires (``matched``:
    the nodes the rule will replace); ``apply(graph, retiring, new_inputs)`` after every match
    fired, and must leave ``retiring`` unread; ``explain_none`` (optional) when nothing matched."""

    check: Callable[[ir.Graph, list[ir.Value], set[ir.Node]], str | None]
    apply: Callable[[ir.Graph, list[ir.Value], dict[str, ir.Value]], None]
    # ``explain_none(graph) -> reason | None``: the rule matched nothing in the main graph; where
    # the graph still has what the hook would have re-derived (past KV inputs), why nothing
    # fired, for the report; None: nothing to say (a model without such inputs)
    explain_none: Callable[[ir.Graph], str | None] | None = None


_HOOKS: dict[str, ReadersHook] = {}


def register_readers_hook(name: str, hook: ReadersHook) -> None:
    _HOOKS[name] = hook


# ---- planning and committing one match ---------------------------------------------------------


@dataclasses.dataclass(eq=False)
class PlannedInput:
    name: str
    dtype: ir.DataType
    shape: ir.Shape


def plan_inputs(io: GraphIO, env: dict, ctx: Any, new_value: Callable[..., Any], reject: type[Exception]) -> None:
    """Bind each new graph input's rewrite name to a placeholder (``new_value``) carrying its
    name, dtype and shape; the graph input itself is made (or shared) at commit."""
    for spec in io.inputs:
        try:
            name = spec.name.evaluate(env, ctx)
            dtype = _expr.name_to_dtype(str(spec.dtype.evaluate(env, ctx)))
            dims = []
            for t in spec.shape:
                d = t.evaluate(env, ctx)
                dims.append(int(d) if isinstance(d, int) or hasattr(d, "item") else str(d))
        except (_expr.EvalFailure, ValueError, KeyError) as exc:
            raise reject(f"graph_io input {spec.var!r}: {exc}") from None
        if not isinstance(name, str) or not name:
            raise reject(f"graph_io input {spec.var!r}: name {name!r} is not a string")
        env[spec.var] = new_value(name, spec.var, dtype, ir.Shape(dims))


_BIG_END = (1 << 31) - 1   # a Slice end at least this is "to the end" (exporters write INT64_MAX)


def _crop_slice(old: ir.Value, n: int) -> tuple[ir.Node | None, str]:
    """The one reader of ``old``: a Slice keeping its last n positions on axis 2 whose output is a
    graph output read by nothing else; or (None, why not)."""
    from onnx_fuse.rewrite._local_check import _const_array

    uses = list(old.uses())
    sl = uses[0].node if len(uses) == 1 else None
    if sl is None or sl.op_type != "Slice" or sl.domain not in ("", "ai.onnx") or uses[0].idx != 0:
        return None, f"{old.name!r} is not read by one Slice only"
    out = sl.outputs[0]
    if not out.is_graph_output() or list(out.uses()):
        return None, f"the Slice of {old.name!r} is not a graph output read by nothing else"
    arg = [None if i >= len(sl.inputs) or sl.inputs[i] is None else _const_array(sl.inputs[i]) for i in range(1, 5)]
    if any(a is None for a in arg[:3]):
        return None, f"the Slice of {old.name!r} has computed starts, ends or axes"
    starts, ends, axes, steps = (None if a is None else [int(x) for x in a.reshape(-1)] for a in arg)
    rank = len(old.shape) if old.shape is not None else 4
    if (starts != [-n] or len(ends) != 1 or ends[0] < _BIG_END or axes not in ([2], [2 - rank])
            or steps not in (None, [1])):
        return None, (f"the Slice of {old.name!r} is not its last {n} positions on axis 2 (starts {starts}, "
                      f"ends {ends}, axes {axes}, steps {steps})")
    return sl, ""


def plan_outputs(io: GraphIO, match: Any, env: dict, ctx: Any, outputs: dict, reject: type[Exception],
                 crops: dict | None = None) -> None:
    """Each replaced pattern output takes the value the rewrite computed for the new graph
    output, named by its template. Refused when the old output is not a graph output or has a
    reader outside the match: a rule never removes an output something still reads. An output
    with ``crop`` n > 0 takes the graph-output slot of its cropping Slice instead (``crops``:
    pattern output -> that Slice, which the commit removes)."""
    matched = set(match.nodes.values())
    for spec in io.outputs:
        old = match.values[spec.replaces]
        try:
            n = int(spec.crop.evaluate(env, ctx)) if spec.crop is not None else 0
        except (_expr.EvalFailure, TypeError, ValueError) as exc:
            raise reject(f"graph_io output {spec.var!r} crop: {exc}") from None
        if n > 0:
            if old.is_graph_output():
                raise reject(f"graph_io: {spec.replaces!r} ({old.name!r}) is a graph output, not cropped")
            sl, why = _crop_slice(old, n)
            if sl is None:
                raise reject(f"graph_io: {why}")
            if crops is not None:
                crops[spec.replaces] = sl
        elif not old.is_graph_output():
            raise reject(f"graph_io: {spec.replaces!r} ({old.name!r}) is not a graph output, so it cannot be "
                         "replaced by a new one")
        readers = [u.node for u in old.uses() if u.node not in matched] if n <= 0 else []
        if readers:
            r = readers[0]
            raise reject(f"graph output {old.name!r} is still read by {r.op_type} {r.name!r}; a rule can only "
                         "retire an output nothing else reads")
        new = env.get(spec.var)
        if new is None or not hasattr(new, "var"):
            raise reject(f"graph_io output {spec.var!r} is not a value the rewrite makes")
        try:
            new.name = spec.name.evaluate(env, ctx)
        except _expr.EvalFailure as exc:
            raise reject(f"graph_io output {spec.var!r}: {exc}") from None
        outputs[spec.replaces] = new


def retiring(io: GraphIO, match: Any, reject: type[Exception]) -> list[ir.Value]:
    out = []
    for r in io.retire:
        v = match.values.get(r)
        if v is None or not v.is_graph_input():
            raise reject(f"graph_io retires {r!r} ({getattr(v, 'name', None)!r}), which is not a graph input")
        out.append(v)
    return out


def unread_check(retired: list[ir.Value], matched: set[ir.Node]) -> str | None:
    """Without a readers hook, a retired input must have no reader but the matches."""
    for v in retired:
        for u in v.uses():
            if u.node not in matched:
                return (f"graph input {v.name!r} is still read by {u.node.op_type} {u.node.name!r}; a rule can "
                        "only retire an input nothing else reads (or name a readers hook)")
    return None


def check_input(graph: ir.Graph | None, name: str, dtype: ir.DataType, shape: ir.Shape,
                reject: type[Exception]) -> ir.Value | None:
    """The existing graph input ``name`` (refused unless its dtype and rank agree), or None."""
    for v in (graph.inputs if graph is not None else []):
        if v.name == name:
            if v.dtype != dtype or v.shape is None or len(v.shape) != len(shape):
                raise reject(f"graph input {name!r} exists with another dtype or rank")
            return v
    return None


def make_input(graph: ir.Graph, name: str, dtype: ir.DataType, shape: ir.Shape,
               reject: type[Exception]) -> ir.Value:
    """The graph input ``name``: an existing one (same dtype and rank) or a new one, appended."""
    v = check_input(graph, name, dtype, shape, reject)
    if v is not None:
        return v
    v = ir.Value(name=name, type=ir.TensorType(dtype), shape=shape)
    graph.inputs.append(v)
    return v


def finish(graph: ir.Graph, rule_name: str, retired: list[ir.Value], read_before: list[ir.Value],
           new_inputs: dict[str, ir.Value], hook: ReadersHook | None) -> list[str]:
    """After every match fired: let the hook re-derive other readers, then remove the retired
    inputs and those the rewrites left unread. Returns the removed names."""
    if hook is not None:
        hook.apply(graph, retired, new_inputs)
    still = [(v, u.node) for v in retired for u in v.uses()]
    if still:
        v, n = still[0]
        from onnx_fuse.errors import InternalError

        raise InternalError(f"rule {rule_name!r} retired graph input {v.name!r}, still read by {n.op_type} "
                            f"{n.name!r} (its readers hook must rewrite every reader it accepted)")
    gone = {id(v) for v in retired} | {id(v) for v in read_before if not v.uses()}
    removed = [v.name for v in graph.inputs if id(v) in gone]
    keep = [v for v in graph.inputs if id(v) not in gone]
    graph.inputs.clear()
    graph.inputs.extend(keep)
    return removed
