"""Pattern IR: the statements of a rule's `match` and `rewrite` blocks, parsed from their text.

    y = Op(a, b, attr=1)                 one node, one output
    a, b = dom.ain::Op(x, ...)           several outputs, a domain, any further inputs
    sq = Pow(d, two) | Mul(d, d)         alternatives (match only)
    xc = Cast?(x, to=1)                  optional node: absent means xc is x (match only)
    y, _, _, s? = Op(...)                rewrite: emit `s` only if consumed outside the match
    nh = int(value(c)[2])                rewrite: a computed value
    w = initializer(array([1.0], "float"))   rewrite: a new initializer
    y = x                                rewrite: alias

A hand-written scanner splits a statement at top-level commas and parentheses; attribute values
are Python literals (match; read with ``ast.literal_eval``) or expressions of ``_expr`` (rewrite).
Errors raise PatternSyntaxError with the line offset inside the block.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Any

from onnx_fuse.rewrite import _expr

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_IDENT_RE = re.compile(rf"^{_IDENT}$")
_OP_RE = re.compile(rf"^(?:(?P<domain>{_IDENT}(?:\.{_IDENT})*)::)?(?P<op>{_IDENT})(?P<opt>\?)?\s*\($", re.S)
_OPCALL_START = re.compile(rf"^\s*(?:{_IDENT}(?:\.{_IDENT})*::)?[A-Z][A-Za-z0-9_]*\??\s*\(")

ONNX_DOMAINS = ("", "ai.onnx")


class PatternSyntaxError(ValueError):
    def __init__(self, msg: str, line_offset: int = 0):
        super().__init__(msg)
        self.line_offset = line_offset


@dataclasses.dataclass
class AttrPattern:
    """``name=literal`` (must equal), ``name=ident`` (captures the value as ``ident``) or
    ``name=_`` (any value: an attribute the pattern does not name must be at its default)."""

    name: str
    literal: Any = None
    capture: str | None = None
    wildcard: bool = False


@dataclasses.dataclass
class OpPattern:
    domain: str
    op_type: str
    inputs: list[str | None]          # None: `_`, matches anything
    attrs: dict[str, AttrPattern]
    variadic: bool = False             # `...`: any further inputs
    optional: bool = False             # `Op?(...)`
    passthrough: str | None = None     # optional op: the input it stands for when absent
    absent: frozenset[int] = frozenset()   # `None`: input positions that must be absent (omitted)

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)

    def text(self) -> str:
        dom = f"{self.domain}::" if self.domain else ""
        args = [("None" if k in self.absent else a or "_") for k, a in enumerate(self.inputs)] \
            + (["..."] if self.variadic else [])
        for a in self.attrs.values():
            args.append(f"{a.name}={a.capture if a.capture else repr(a.literal)}")
        if self.optional and self.passthrough != (self.inputs[0] if self.inputs else None):
            args.append(f"pass={self.passthrough}")
        return f"{dom}{self.op_type}{'?' if self.optional else ''}({', '.join(args)})"


@dataclasses.dataclass
class MatchStatement:
    outputs: list[str | None]
    alternatives: list[OpPattern]
    line: int                          # 1-based line in the file (set by the loader)
    source: str

    @property
    def optional(self) -> bool:
        return any(a.optional for a in self.alternatives)


@dataclasses.dataclass
class RewriteOp:
    domain: str
    op_type: str
    inputs: list[str | None]           # None: an omitted optional input
    attrs: dict[str, _expr.Expr]
    # (`like` | `dtype`, names): the outputs' type, one name for all outputs or one per output
    type_hint: tuple[str, tuple[str, ...]] | None = None


_HINT_RE = re.compile(rf"\)\s*:\s*(\w+)\(\s*({_IDENT}(?:\s*,\s*{_IDENT})*)\s*\)\s*$")


def _split_hint(rhs: str) -> tuple[str, tuple[str, tuple[str, ...]] | None]:
    """``Op(...) : like(v)`` -> (``Op(...)``, ("like", ("v",))); ``like(a, b)``: one per output."""
    m = _HINT_RE.search(rhs)
    if not m:
        return rhs, None
    call = rhs[: m.start() + 1]
    try:
        _parse_call(call)
    except PatternSyntaxError:
        return rhs, None  # the `:` was inside the call after all; let the call parser complain
    if m.group(1) not in ("like", "dtype"):
        raise PatternSyntaxError(f"unknown type hint {m.group(1)}(); use like(name) or dtype(name)")
    return call, (m.group(1), tuple(n.strip() for n in m.group(2).split(",")))


@dataclasses.dataclass
class RewriteStatement:
    outputs: list[str | None]          # None: `_`, an output slot left empty
    conditional: list[bool]            # `s?`
    kind: str                          # "op" | "expr" | "initializer" | "alias"
    op: RewriteOp | None = None
    expr: _expr.Expr | None = None
    alias: str | None = None
    line: int = 0
    source: str = ""


# --------------------------------------------------------------------------------------------
# Scanning helpers


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out).strip()


def top_level(text: str, *, strict: bool = False):
    """(index, char) of each character of ``text`` outside brackets and quotes (brackets and
    quote marks themselves are not yielded). ``strict`` raises on unbalanced brackets or quotes."""
    depth, quote = 0, None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0 and strict:
                raise PatternSyntaxError(f"unbalanced {ch!r}")
        elif depth == 0:
            yield i, ch
    if strict and (depth != 0 or quote):
        raise PatternSyntaxError("unbalanced brackets or quotes")


def _split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` characters outside brackets and quotes."""
    cuts = [i for i, ch in top_level(text, strict=True) if ch == sep]
    bounds = zip([-1, *cuts], [*cuts, len(text)])
    return [text[a + 1:b].strip() for a, b in bounds]


def _split_assign(stmt: str) -> tuple[str, str]:
    for i, ch in top_level(stmt):
        if ch == "=":
            nxt = stmt[i + 1: i + 2]
            prv = stmt[i - 1: i] if i else ""
            if nxt != "=" and prv not in "!<>=":
                return stmt[:i].strip(), stmt[i + 1:].strip()
    raise PatternSyntaxError(f"expected `name = Op(...)`, got {stmt!r}")


def _parse_call(text: str) -> tuple[str, str, bool, list[str]]:
    """``dom::Op?(a, b=1)`` -> (domain, op, optional, raw args)."""
    text = text.strip()
    if not text.endswith(")"):
        raise PatternSyntaxError(f"expected an op call like `Op(x, y)`, got {text!r}")
    depth = 0
    open_at = -1
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0 and open_at < 0:
                open_at = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                raise PatternSyntaxError(f"unexpected text after the call in {text!r}")
    m = _OP_RE.match(text[: open_at + 1]) if open_at > 0 else None
    if not m:
        raise PatternSyntaxError(f"expected an op call like `Op(x)` or `domain::Op(x)`, got {text!r}")
    inner = text[open_at + 1: -1].strip()
    args = _split_top(inner, ",") if inner else []
    if any(a == "" for a in args):
        raise PatternSyntaxError(f"empty argument in {text!r}")
    domain = m.group("domain") or ""
    if domain == "ai.onnx":
        domain = ""
    return domain, m.group("op"), bool(m.group("opt")), args


def _kwarg(arg: str) -> tuple[str, str] | None:
    m = re.match(rf"^({_IDENT})\s*=(?!=)\s*(.+)$", arg, re.S)
    return (m.group(1), m.group(2).strip()) if m else None


def _check_ident(name: str, what: str) -> str:
    if not _IDENT_RE.match(name):
        raise PatternSyntaxError(f"{what} {name!r} is not an identifier")
    return name


def iter_lines(block: str):
    """Yield (line offset, statement text) for the non-empty statements of a block."""
    for offset, raw in enumerate(block.splitlines()):
        line = _strip_comment(raw)
        if line:
            yield offset, line


# --------------------------------------------------------------------------------------------
# match


def _parse_match_op(text: str) -> OpPattern:
    domain, op, optional, args = _parse_call(text)
    inputs: list[str | None] = []
    absent: set[int] = set()
    attrs: dict[str, AttrPattern] = {}
    variadic = False
    for i, arg in enumerate(args):
        kw = _kwarg(arg)
        if kw:
            name, raw = kw
            if name in attrs:
                raise PatternSyntaxError(f"attribute {name!r} given twice")
            if raw == "_":
                attrs[name] = AttrPattern(name, wildcard=True)
            elif _IDENT_RE.match(raw) and raw not in ("True", "False", "None"):
                attrs[name] = AttrPattern(name, capture=raw)
            else:
                try:
                    lit = ast.literal_eval(raw)
                except (ValueError, SyntaxError):
                    raise PatternSyntaxError(f"attribute {name}={raw}: expected a literal "
                                             "(number, string, list) or a name to capture") from None
                if isinstance(lit, tuple):
                    lit = list(lit)
                attrs[name] = AttrPattern(name, literal=lit)
            continue
        if attrs:
            raise PatternSyntaxError(f"input {arg!r} after attributes in {text!r}")
        if variadic:
            raise PatternSyntaxError("`...` must be the last input")
        if arg == "...":
            variadic = True
        elif arg == "_":
            inputs.append(None)
        elif arg == "None":   # the input must be absent: `_` would match a present one too
            absent.add(len(inputs))
            inputs.append(None)
        else:
            inputs.append(_check_ident(arg, "input"))
    passthrough = None
    if "pass" in attrs:
        pa = attrs.pop("pass")
        if not optional:
            raise PatternSyntaxError(f"`pass=` is only for optional ops ({op}?)")
        if pa.capture is None or pa.capture not in inputs:
            raise PatternSyntaxError(f"`pass=` must name one of the inputs of {op}?")
        passthrough = pa.capture
    elif optional:
        if not inputs or inputs[0] is None:
            raise PatternSyntaxError(f"optional op {op}? needs a named first input or `pass=NAME` "
                                     "(the value it stands for when absent)")
        passthrough = inputs[0]
    return OpPattern(domain, op, inputs, attrs, variadic, optional, passthrough, frozenset(absent))


def _parse_outputs(lhs: str, *, allow_conditional: bool) -> tuple[list[str | None], list[bool]]:
    outs: list[str | None] = []
    cond: list[bool] = []
    for part in _split_top(lhs, ","):
        c = part.endswith("?")
        if c:
            if not allow_conditional:
                raise PatternSyntaxError(f"`{part}`: conditional outputs are for rewrites only")
            part = part[:-1].strip()
        if part in ("_", ""):
            outs.append(None)
        else:
            outs.append(_check_ident(part, "output"))
        cond.append(c)
    if all(o is None for o in outs):
        raise PatternSyntaxError("a statement must name at least one output")
    return outs, cond


def parse_match(block: str, first_line: int) -> list[MatchStatement]:
    stmts = []
    for offset, text in iter_lines(block):
        try:
            lhs, rhs = _split_assign(text)
            outs, _ = _parse_outputs(lhs, allow_conditional=False)
            alts = [_parse_match_op(a) for a in _split_top(rhs, "|")]
        except PatternSyntaxError as exc:
            exc.line_offset = offset
            raise
        if len(alts) > 1 and any(a.optional for a in alts):
            raise PatternSyntaxError("an optional op cannot be one of several alternatives", offset)
        stmts.append(MatchStatement(outs, alts, first_line + offset, text))
    if not stmts:
        raise PatternSyntaxError("`match` has no statements")
    return stmts


# --------------------------------------------------------------------------------------------
# rewrite


def _parse_rewrite_op(text: str) -> RewriteOp:
    domain, op, optional, args = _parse_call(text)
    if optional:
        raise PatternSyntaxError(f"{op}?: optional ops are for patterns only")
    inputs: list[str | None] = []
    attrs: dict[str, _expr.Expr] = {}
    for arg in args:
        kw = _kwarg(arg)
        if kw:
            name, raw = kw
            if name in attrs:
                raise PatternSyntaxError(f"attribute {name!r} given twice")
            try:
                attrs[name] = _expr.parse(raw)
            except _expr.ExprSyntaxError as exc:
                raise PatternSyntaxError(f"attribute {name}: {exc}") from None
            continue
        if attrs:
            raise PatternSyntaxError(f"input {arg!r} after attributes in {text!r}")
        if arg in ("_", "None"):
            inputs.append(None)
        else:
            inputs.append(_check_ident(arg, "input"))
    return RewriteOp(domain, op, inputs, attrs)


@functools.lru_cache(maxsize=4096)
def _initializer_argument(expr: _expr.Expr) -> _expr.Expr:
    """The argument of ``initializer(...)`` as its own expression; shared like parsed texts are."""
    inner = ast.Expression(expr.tree.body.args[0])
    return _expr.Expr(ast.unparse(inner.body), inner, expr.names, expr.calls - {"initializer"})


def parse_rewrite(block: str, first_line: int) -> list[RewriteStatement]:
    stmts = []
    for offset, text in iter_lines(block):
        try:
            lhs, rhs = _split_assign(text)
            outs, cond = _parse_outputs(lhs, allow_conditional=True)
            if _OPCALL_START.match(rhs):
                call, hint = _split_hint(rhs)
                op = _parse_rewrite_op(call)
                op.type_hint = hint
                st = RewriteStatement(outs, cond, "op", op=op)
            elif _IDENT_RE.match(rhs) and rhs not in ("True", "False", "None"):
                st = RewriteStatement(outs, cond, "alias", alias=rhs)
            else:
                try:
                    expr = _expr.parse(rhs)
                except _expr.ExprSyntaxError as exc:
                    raise PatternSyntaxError(str(exc)) from None
                kind = "expr"
                if isinstance(expr.tree.body, ast.Call) and getattr(expr.tree.body.func, "id", "") == "initializer":
                    kind = "initializer"
                    if len(expr.tree.body.args) != 1 or expr.tree.body.keywords:
                        raise PatternSyntaxError("initializer() takes one expression")
                    expr = _initializer_argument(expr)
                elif "initializer" in expr.calls:
                    raise PatternSyntaxError("initializer() must be the whole right-hand side")
                st = RewriteStatement(outs, cond, kind, expr=expr)
            if st.kind != "op" and (len(outs) != 1 or outs[0] is None or any(cond)):
                raise PatternSyntaxError("a computed value, initializer or alias has exactly one name")
        except PatternSyntaxError as exc:
            exc.line_offset = offset
            raise
        st.line = first_line + offset
        st.source = text
        stmts.append(st)
    if not stmts:
        raise PatternSyntaxError("`rewrite` has no statements")
    return stmts
