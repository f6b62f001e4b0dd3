"""Rule and RuleSet: a rule compiled from its YAML mapping, and the ordered collection of rules.

``build_rule`` turns one YAML mapping (already read by ``_loader`` with line numbers) into a
``Rule``, checking everything that can be checked without a model: keys, kebab-case name,
targets, level, opset range, the pattern's structure (a value produced twice, a cycle, a statement
not connected to the anchor, a pattern output never produced), `where` constraints on names the
pattern has, expressions, default-domain op names / input counts / attribute names against the
ONNX schemas, and that the rewrite only reads names that are bound. Problems raise RuleError with
the line they are on.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import onnx

from onnx_fuse.levels import TARGETS  # the one target list (re-exported by onnx_fuse.rewrite)
from onnx_fuse.rewrite import _expr, _graph_io
from onnx_fuse.rewrite._fragments import Fragment, expand, rename_text
from onnx_fuse.rewrite._pattern import (MatchStatement, PatternSyntaxError, RewriteStatement,
                                        parse_match, parse_rewrite, top_level)

_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_RULE_KEYS = {"name", "doc", "level", "priority", "targets", "opset", "domains", "match", "where",
              "rewrite", "outputs", "stage", "graph_io"}
#: The phases of a RewritePass, in order; each runs to a fixed point before the next starts.
#: ``fuse`` rewrites exporter idioms (into target ops or into canonical ops), ``lower`` turns
#: canonical ops into the target's ops, ``simplify`` removes the layout glue lowerings leave
#: (Transpose pairs, Reshape chains). See docs/rules.md "Stages".
STAGES = ("fuse", "lower", "simplify")
#: Domain of the canonical ops (attention with optional past...): internal, never saved.
CANONICAL_DOMAIN = "onnx_fuse.canonical"
_CONSTRAINT_KEYS = {"scalar", "value", "rtol", "atol", "const", "dtype", "rank", "shape", "escape"}

# Attributes that later opsets turned into inputs: op -> {attribute: input index}. A pattern
# written with the attribute matches both forms (see _matcher).
PROMOTED_ATTRIBUTES: dict[str, dict[str, int]] = {
    **{op: {"axes": 1} for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                   "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                   "ReduceSumSquare", "Squeeze", "Unsqueeze")},
    "Split": {"split": 1},
    "Clip": {"min": 1, "max": 2},
    "Pad": {"pads": 1, "value": 2},
    "Slice": {"starts": 1, "ends": 2, "axes": 3, "steps": 4},
}

COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "And", "Or", "Xor", "Equal",
                         "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


class RuleError(ValueError):
    """A problem in a rule file; ``line`` is 1-based (0 when unknown)."""

    def __init__(self, msg: str, line: int = 0, file: str = ""):
        super().__init__(msg)
        self.msg = msg
        self.line = line
        self.file = file

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file else (f"line {self.line}: " if self.line else "")
        return f"{where}{self.msg}"


@dataclasses.dataclass
class ValueConstraint:
    name: str
    line: int
    scalar: float | None = None
    value: Any = None
    rtol: float = 1e-5
    atol: float = 1e-6
    const: bool | None = None
    dtypes: tuple[str, ...] | None = None
    rank: tuple[int | None, int | None] | frozenset[int] | None = None
    shape: tuple[Any, ...] | None = None
    escape: bool = False


@dataclasses.dataclass
class Check:
    expr: _expr.Expr
    message: str
    line: int


@dataclasses.dataclass
class Rule:
    name: str
    doc: str
    targets: tuple[str, ...]
    match: list[MatchStatement]
    rewrite: list[RewriteStatement]
    outputs: list[str]
    where: dict[str, ValueConstraint]
    checks: list[Check]
    level: int = 2
    priority: int = 0
    stage: str = "fuse"
    # per-target rewrite blocks (`rewrite: {ort: ..., onnx: ...}`); ``rewrite`` is the one in
    # force once the rule is selected for a target (RuleSet.select)
    rewrites: dict[str, list[RewriteStatement]] = dataclasses.field(default_factory=dict)
    opset_min: int | None = None
    opset_max: int | None = None
    domains: dict[str, int] = dataclasses.field(default_factory=dict)
    file: str = ""
    line: int = 0
    source: str = ""            # the rule's YAML text, for `rules show`
    builtin: bool = False
    # derived by build_rule
    producers: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    leaves: frozenset[str] = frozenset()
    captures: frozenset[str] = frozenset()
    # graph inputs/outputs the rule adds, replaces or retires (_graph_io.py); None for most rules
    graph_io: _graph_io.GraphIO | None = None

    @property
    def anchor(self) -> MatchStatement:
        return self.match[self.producers[self.outputs[0]][0]]

    @property
    def anchor_keys(self) -> list[tuple[str, str]]:
        keys: list[tuple[str, str]] = []
        for alt in self.anchor.alternatives:
            if alt.key not in keys:
                keys.append(alt.key)
        return keys

    def applies_to(self, target: str | None, max_level: int | None) -> bool:
        return (target is None or target in self.targets) and (max_level is None or self.level <= max_level)

    def for_target(self, target: str | None) -> Rule:
        if not self.rewrites or target is None:
            return self
        block = self.rewrites.get(target, self.rewrites.get("default"))
        return dataclasses.replace(self, rewrite=block, targets=(target,))

    def opset_ok(self, opset: int | None) -> bool:
        if opset is None:
            return self.opset_min is None
        return (self.opset_min is None or opset >= self.opset_min) and \
               (self.opset_max is None or opset <= self.opset_max)


class RuleSet:
    """Rules in application order: priority high to low, then name."""

    def __init__(self, rules: Iterable[Rule] = ()):
        self._rules: dict[str, Rule] = {}
        for r in rules:
            self._rules[r.name] = r

    def add(self, rule: Rule) -> Rule | None:
        """Add or replace by name; returns the replaced rule."""
        old = self._rules.get(rule.name)
        self._rules[rule.name] = rule
        return old

    def remove(self, name: str) -> bool:
        return self._rules.pop(name, None) is not None

    def get(self, name: str) -> Rule | None:
        return self._rules.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._rules

    def __len__(self) -> int:
        return len(self._rules)

    def __iter__(self):
        return iter(self.ordered())

    def ordered(self) -> list[Rule]:
        return sorted(self._rules.values(), key=lambda r: (-r.priority, r.name))

    def select(self, *, target: str | None = None, max_level: int | None = None) -> RuleSet:
        """The rules for ``target`` and ``max_level``; a rule with per-target rewrite blocks
        comes with the block of ``target`` in force."""
        return RuleSet(r.for_target(target) for r in self.ordered() if r.applies_to(target, max_level))

    def names(self) -> list[str]:
        return [r.name for r in self.ordered()]


# --------------------------------------------------------------------------------------------
# ONNX schema facts, over all opset versions


@functools.lru_cache(maxsize=None)
def _schema_facts() -> dict[str, tuple[set[str], int, int]]:
    """Default-domain op -> (attribute names in any version, min inputs, max inputs)."""
    facts: dict[str, tuple[set[str], int, int]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain not in ("", "ai.onnx"):
            continue
        attrs, lo, hi = facts.get(s.name, (set(), 1 << 30, 0))
        attrs |= set(s.attributes)
        facts[s.name] = (attrs, min(lo, s.min_input), max(hi, s.max_input))
    return facts


def check_default_op(op_type: str, n_inputs: int, variadic: bool, attrs: Iterable[str]) -> str | None:
    facts = _schema_facts().get(op_type)
    if facts is None:
        close = [k for k in _schema_facts() if k.lower() == op_type.lower()]
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"unknown ONNX op {op_type!r}{hint}; ops in other domains need `domain::Op`"
    names, lo, hi = facts
    promoted = PROMOTED_ATTRIBUTES.get(op_type, {})
    for a in attrs:
        if a not in names and a not in promoted:
            return f"{op_type} has no attribute {a!r} (known: {', '.join(sorted(names)) or 'none'})"
    if n_inputs > hi:
        return f"{op_type} takes at most {hi} inputs, pattern has {n_inputs}"
    if not variadic and n_inputs < lo:
        return f"{op_type} needs at least {lo} inputs, pattern has {n_inputs}"
    return None


# --------------------------------------------------------------------------------------------


def _req(data: Mapping, key: str, kind: type | tuple, line: int, lines: Mapping[str, int]) -> Any:
    if key not in data:
        raise RuleError(f"rule is missing `{key}`", line)
    v = data[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise RuleError(f"`{key}` must be {_kind_name(kind)}", lines.get(key, line))
    return v


def _kind_name(kind) -> str:
    names = {str: "a string", int: "an integer", list: "a list", dict: "a mapping"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _block_first_line(lines: Mapping[str, int], styles: Mapping[str, str], key: str) -> int:
    """The file line of the first text line of a `key: |` block (or the key's line if inline)."""
    base = lines.get(key, 0)
    return base + 1 if styles.get(key) in ("|", ">") else base


def build_rule(data: Mapping, *, line: int, lines: Mapping[str, int], styles: Mapping[str, str],
               where_lines: Mapping[str, int] | None = None, file: str = "", source: str = "",
               fragments: Mapping[str, Fragment] | None = None) -> Rule:
    for key in data:
        if key not in _RULE_KEYS:
            raise RuleError(f"unknown key `{key}` (allowed: {', '.join(sorted(_RULE_KEYS))})",
                            lines.get(key, line))
    name = _req(data, "name", str, line, lines)
    if not _NAME_RE.match(name):
        raise RuleError(f"rule name {name!r} must be kebab-case (lowercase words joined by '-')",
                        lines.get("name", line))
    doc = data.get("doc", "")
    if not isinstance(doc, str) or not doc.strip():
        raise RuleError(f"rule {name!r} needs a one-line `doc` (source -> result)", lines.get("doc", line))
    stage = data.get("stage", "fuse")
    if stage not in STAGES:
        raise RuleError(f"`stage` must be one of {', '.join(STAGES)}", lines.get("stage", line))
    targets = _req(data, "targets", list, line, lines)
    for t in targets:
        if t not in TARGETS:
            raise RuleError(f"unknown target {t!r} (choose from {', '.join(TARGETS)})", lines.get("targets", line))
    if not targets:
        raise RuleError("`targets` is empty", lines.get("targets", line))
    level = data.get("level", 2)
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= 4:
        raise RuleError("`level` must be 1..4 (2 norms/GELU/RoPE, 3 attention, 4 target-specific)",
                        lines.get("level", line))
    priority = data.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise RuleError("`priority` must be an integer", lines.get("priority", line))
    opset_min = opset_max = None
    if "opset" in data:
        o = data["opset"]
        if not isinstance(o, dict) or set(o) - {"min", "max"} or \
                not all(isinstance(v, int) and not isinstance(v, bool) for v in o.values()):
            raise RuleError("`opset` must be {min: INT, max: INT} (either optional)", lines.get("opset", line))
        opset_min, opset_max = o.get("min"), o.get("max")
    domains = data.get("domains", {})
    if not isinstance(domains, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in domains.items()):
        raise RuleError("`domains` must map a domain name to its opset version", lines.get("domains", line))

    fragments = fragments or {}
    match_text = _req(data, "match", str, line, lines)
    match, frag_where, frag_checks = _parse_block(match_text, "match", _block_first_line(lines, styles, "match"),
                                                  fragments)
    rewrite_data = data.get("rewrite")
    rewrites: dict[str, list[RewriteStatement]] = {}
    if isinstance(rewrite_data, Mapping):
        rline = lines.get("rewrite", line)
        for key, text in rewrite_data.items():
            kline = rewrite_data.lines.get(key, rline) if hasattr(rewrite_data, "lines") else rline
            if key != "default" and key not in targets:
                raise RuleError(f"rewrite block {key!r} is not one of the rule's targets "
                                f"({', '.join(targets)}) or `default`", kline)
            if not isinstance(text, str):
                raise RuleError(f"rewrite block {key!r} must be statements (`{key}: |`)", kline)
            first = kline + 1 if getattr(rewrite_data, "styles", {}).get(key) in ("|", ">") else kline
            rewrites[key], _, _ = _parse_block(text, "rewrite", first, fragments)
        missing = [t for t in targets if t not in rewrites and "default" not in rewrites]
        if missing:
            raise RuleError(f"no rewrite block for target(s) {', '.join(missing)} (and no `default`)", rline)
        rewrite = rewrites.get(targets[0], rewrites.get("default"))
    else:
        rewrite_text = _req(data, "rewrite", str, line, lines)
        rewrite, _, _ = _parse_block(rewrite_text, "rewrite", _block_first_line(lines, styles, "rewrite"),
                                     fragments)

    rule = Rule(name=name, doc=doc.strip(), targets=tuple(targets), match=match, rewrite=rewrite,
                outputs=[], where={}, checks=[], level=level, priority=priority, stage=stage,
                rewrites=rewrites, opset_min=opset_min, opset_max=opset_max, domains=dict(domains),
                file=file, line=line, source=source)
    _analyze_pattern(rule, data, lines)
    where = data.get("where", {})
    if frag_where or frag_checks:
        if not isinstance(where, Mapping):
            raise RuleError("`where` must be a mapping of names to constraints", lines.get("where", line))
        own_checks = where.get("check", [])
        own_checks = [own_checks] if isinstance(own_checks, str) else list(own_checks)
        merged = {**{k: spec for k, (spec, _) in frag_where.items()},
                  **{k: v for k, v in where.items() if k != "check"}}
        merged["check"] = own_checks
        where_lines = dict(where_lines or {})
        for k, (_, ln) in frag_where.items():
            where_lines.setdefault(k, ln)
        for (text, ln, mapping) in frag_checks:
            if not isinstance(text, str):
                raise RuleError("each fragment check is a string \"expression : message\"", ln)
            expr_text, message = _split_message(text)
            where_lines[f"check[{len(merged['check'])}]"] = ln
            merged["check"].append(f"{rename_text(expr_text, mapping)} : {message or expr_text}")
        where = merged
    _build_where(rule, where, lines.get("where", line), where_lines or {})
    if "graph_io" in data:
        rule.graph_io = _graph_io.parse(data["graph_io"], lines.get("graph_io", line), RuleError)
        _graph_io.check_rule(rule.graph_io, rule, RuleError)
    for target, block in rewrites.items():
        _analyze_rewrite(dataclasses.replace(rule, rewrite=block))
    if not rewrites:
        _analyze_rewrite(rule)
    return rule


def _analyze_pattern(rule: Rule, data: Mapping, lines: Mapping[str, int]) -> None:
    producers: dict[str, tuple[int, int]] = {}
    captures: dict[str, int] = {}
    for si, st in enumerate(rule.match):
        for oi, out in enumerate(st.outputs):
            if out is None:
                continue
            if out in producers:
                raise RuleError(f"{out!r} is produced twice in the pattern", st.line)
            producers[out] = (si, oi)
        for alt in st.alternatives:
            if alt.domain == "":
                err = check_default_op(alt.op_type, len(alt.inputs), alt.variadic, alt.attrs)
                if err:
                    raise RuleError(err, st.line)
            for a in alt.attrs.values():
                if a.capture:
                    captures.setdefault(a.capture, st.line)
    for cap, ln in captures.items():
        if cap in producers or any(cap in alt.inputs for st in rule.match for alt in st.alternatives):
            raise RuleError(f"{cap!r} captures an attribute and also names a value", ln)
    used = {i for st in rule.match for alt in st.alternatives for i in alt.inputs if i}
    rule.producers = producers
    rule.leaves = frozenset(used - set(producers))
    rule.captures = frozenset(captures)

    # outputs
    if "outputs" in data:
        outs = data["outputs"]
        if not isinstance(outs, list) or not outs or not all(isinstance(o, str) for o in outs):
            raise RuleError("`outputs` must be a non-empty list of pattern names", lines.get("outputs", rule.line))
        for o in outs:
            if o not in producers:
                raise RuleError(f"output {o!r} is not produced by any match statement",
                                lines.get("outputs", rule.line))
    else:
        last = rule.match[-1]
        outs = [next(o for o in last.outputs if o is not None)]
    rule.outputs = list(outs)
    if rule.anchor.optional:
        raise RuleError("the pattern's output (anchor) cannot come from an optional op", rule.anchor.line)

    # cycles: DFS over statement -> statements producing its inputs
    deps = []
    for st in rule.match:
        d = set()
        for alt in st.alternatives:
            for i in alt.inputs:
                if i in producers:
                    d.add(producers[i][0])
        deps.append(sorted(d))
    state = [0] * len(rule.match)

    def visit(i: int) -> None:
        state[i] = 1
        for j in deps[i]:
            if state[j] == 1:
                raise RuleError(f"cycle in the pattern: {rule.match[j].source!r} depends on its own "
                                "output", rule.match[j].line)
            if state[j] == 0:
                visit(j)
        state[i] = 2

    for i in range(len(rule.match)):
        if state[i] == 0:
            visit(i)
    # connectivity: everything must be reachable backwards from the anchor
    seen = set()
    stack = [producers[rule.outputs[0]][0]]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(deps[i])
    for i, st in enumerate(rule.match):
        if i not in seen:
            raise RuleError(f"statement {st.source!r} is not an input (direct or indirect) of the "
                            f"pattern output {rule.outputs[0]!r}; matching starts there", st.line)


def _build_where(rule: Rule, where: Any, line: int, where_lines: Mapping[str, int]) -> None:
    if not isinstance(where, dict):
        raise RuleError("`where` must be a mapping of names to constraints", line)
    values = set(rule.producers) | rule.leaves
    known = values | rule.captures
    for key, spec in where.items():
        kline = where_lines.get(key, line)
        if key == "check":
            if isinstance(spec, str):
                spec = [spec]
            if not isinstance(spec, list):
                raise RuleError("`check` must be a list of \"expression : message\" strings", kline)
            for i, item in enumerate(spec):
                iline = where_lines.get(f"check[{i}]", kline)
                if not isinstance(item, str):
                    raise RuleError("each check is a string \"expression : message\"", iline)
                text, message = _split_message(item)
                try:
                    expr = _expr.parse(text)
                except _expr.ExprSyntaxError as exc:
                    raise RuleError(str(exc), iline) from None
                for n in sorted(expr.names):
                    if n not in known:
                        raise RuleError(f"check uses {n!r}, which the pattern does not bind", iline)
                rule.checks.append(Check(expr, message or text, iline))
            continue
        if key not in values:
            what = "an attribute capture (use a check)" if key in rule.captures else "not a name in the pattern"
            raise RuleError(f"constraint on {key!r}: {what}", kline)
        if not isinstance(spec, dict):
            raise RuleError(f"constraint on {key!r} must be a mapping like {{dtype: float}}", kline)
        rule.where[key] = _constraint(key, spec, kline, rule)


def _split_message(item: str) -> tuple[str, str]:
    """``"expr : message"`` -> (expr, message); a ':' inside brackets (a slice) is not the split."""
    for i, ch in top_level(item):
        if ch == ":":
            return item[:i].strip(), item[i + 1:].strip()
    return item.strip(), ""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _constraint(name: str, spec: Mapping, line: int, rule: Rule) -> ValueConstraint:
    for k in spec:
        if k not in _CONSTRAINT_KEYS:
            raise RuleError(f"constraint on {name!r}: unknown key {k!r} (allowed: "
                            f"{', '.join(sorted(_CONSTRAINT_KEYS))})", line)
    c = ValueConstraint(name, line)
    if "scalar" in spec:
        if not _num(spec["scalar"]):
            raise RuleError(f"{name}: `scalar` must be a number", line)
        c.scalar = float(spec["scalar"])
    if "value" in spec:
        c.value = spec["value"]
        try:
            import numpy as np
            np.asarray(c.value, dtype=np.float64)
        except (ValueError, TypeError):
            raise RuleError(f"{name}: `value` must be a number or a (nested) list of numbers", line) from None
    for tol in ("rtol", "atol"):
        if tol in spec:
            if not _num(spec[tol]) or spec[tol] < 0:
                raise RuleError(f"{name}: `{tol}` must be a non-negative number", line)
            setattr(c, tol, float(spec[tol]))
    if "const" in spec:
        if not isinstance(spec["const"], bool):
            raise RuleError(f"{name}: `const` must be true or false", line)
        c.const = spec["const"]
    if "dtype" in spec:
        d = spec["dtype"]
        d = [d] if isinstance(d, str) else d
        if not isinstance(d, list) or not d:
            raise RuleError(f"{name}: `dtype` must be a name or a list of names", line)
        norm = []
        for x in d:
            try:
                norm.append(_expr.dtype_name(_expr.name_to_dtype(str(x))))
            except KeyError:
                raise RuleError(f"{name}: unknown dtype {x!r}", line) from None
        c.dtypes = tuple(norm)
    if "rank" in spec:
        r = spec["rank"]
        if isinstance(r, int) and not isinstance(r, bool):
            c.rank = frozenset([r])
        elif isinstance(r, list) and all(isinstance(x, int) for x in r):
            c.rank = frozenset(r)
        elif isinstance(r, dict) and set(r) <= {"min", "max"} and all(isinstance(x, int) for x in r.values()):
            c.rank = (r.get("min"), r.get("max"))
        else:
            raise RuleError(f"{name}: `rank` must be an int, a list of ints, or {{min:, max:}}", line)
    if "shape" in spec:
        s = spec["shape"]
        if not isinstance(s, list) or not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in s):
            raise RuleError(f"{name}: `shape` must be a list of ints, symbols and `_`", line)
        c.shape = tuple(s)
    if "escape" in spec:
        if not isinstance(spec["escape"], bool):
            raise RuleError(f"{name}: `escape` must be true or false", line)
        if spec["escape"] and name not in rule.producers:
            raise RuleError(f"{name}: `escape` applies to intermediates (values produced in the pattern)", line)
        c.escape = spec["escape"]
    if c.scalar is not None and c.value is not None:
        raise RuleError(f"{name}: give `scalar` or `value`, not both", line)
    return c


def _parse_block(text: str, kind: str, first_line: int, fragments: Mapping[str, Fragment]):
    """Expand fragment calls, then parse. Returns (statements, fragment constraints as
    {name: (spec, file line)}, fragment checks as (text, file line, renaming))."""
    try:
        expanded, offsets, where, checks = expand(text, kind, fragments)
    except PatternSyntaxError as exc:
        raise RuleError(str(exc), first_line + exc.line_offset) from None
    try:
        stmts = (parse_match if kind == "match" else parse_rewrite)(expanded, 0)
    except PatternSyntaxError as exc:
        off = offsets[exc.line_offset] if 0 <= exc.line_offset < len(offsets) else exc.line_offset
        raise RuleError(str(exc), first_line + off) from None
    for st in stmts:
        st.line = first_line + offsets[st.line]
    return (stmts, {k: (spec, first_line + off) for k, (spec, off) in where.items()},
            [(c, first_line + off, m) for c, off, m in checks])


def _analyze_rewrite(rule: Rule) -> None:
    io = rule.graph_io
    bound = set(rule.producers) | rule.leaves | ({i.var for i in io.inputs} if io else set())
    computed: set[str] = set(rule.captures)
    defined: set[str] = set()
    intermediates = set(rule.producers) - set(rule.outputs)
    for st in rule.rewrite:
        if st.kind == "op":
            op = st.op
            assert op is not None
            for i in op.inputs:
                if i is None:
                    continue
                if i in computed and i not in defined:
                    raise RuleError(f"{i!r} is a computed value or attribute, not a tensor; use it "
                                    "in an attribute", st.line)
                if i not in bound and i not in defined:
                    raise RuleError(f"rewrite uses {i!r}, which is not bound by the match or an "
                                    "earlier rewrite statement", st.line)
            for hn in (op.type_hint[1] if op.type_hint is not None else ()):
                if hn not in bound and hn not in defined:
                    raise RuleError(f"type hint names {hn!r}, which is not a bound tensor", st.line)
            if op.type_hint is not None and len(op.type_hint[1]) not in (1, len(st.outputs)):
                raise RuleError(f"type hint gives {len(op.type_hint[1])} types for {len(st.outputs)} "
                                "outputs (give one for all, or one per output)", st.line)
            for aname, ex in op.attrs.items():
                for n in sorted(ex.names):
                    if n not in bound and n not in computed and n not in defined:
                        raise RuleError(f"attribute {aname} uses {n!r}, which is not bound", st.line)
            if op.domain == "":
                err = check_default_op(op.op_type, len(op.inputs), False, op.attrs)
                if err:
                    raise RuleError(err, st.line)
        elif st.kind == "alias":
            if st.alias not in bound and st.alias not in defined:
                raise RuleError(f"rewrite uses {st.alias!r}, which is not bound", st.line)
        else:
            assert st.expr is not None
            for n in sorted(st.expr.names):
                if n not in bound and n not in computed and n not in defined:
                    raise RuleError(f"expression uses {n!r}, which is not bound", st.line)
        for out, cond in zip(st.outputs, st.conditional):
            if out is None:
                continue
            if out in defined:
                raise RuleError(f"{out!r} is defined twice in the rewrite", st.line)
            if out in rule.leaves:
                raise RuleError(f"{out!r} is an input of the pattern; the rewrite cannot redefine it", st.line)
            if out in intermediates:
                raise RuleError(f"{out!r} is an intermediate of the pattern; the rewrite may only "
                                f"define the pattern outputs ({', '.join(rule.outputs)}) and new names",
                                st.line)
            if out in rule.captures:
                raise RuleError(f"{out!r} names a captured attribute", st.line)
            if cond and out not in rule.outputs:
                raise RuleError(f"`{out}?` is conditional on outside consumers, so it must be a "
                                "pattern output", st.line)
            defined.add(out)
            if st.kind == "expr":
                computed.add(out)
    for o in (io.outputs if io else ()):
        if o.var not in defined:
            raise RuleError(f"graph_io output {o.var!r} is not defined by the rewrite", io.line)
    for o in rule.outputs:
        if io and o in io.replaced:
            continue  # its graph-output slot goes to a new output; the value itself dies
        if o not in defined:
            raise RuleError(f"the rewrite does not define pattern output {o!r}",
                            rule.rewrite[-1].line if rule.rewrite else rule.line)
        # a computed output must evaluate to a tensor (`y = a if cond else b`); checked per match
