"""Fragments: named, reusable pieces of `match` or `rewrite` text, expanded where a rule uses them.

    fragments:
      - name: key-padding-rows
        doc: broadcast a one-row key-padding bias [B,1,1,T] to one row per query [B,1,S,T]
        inputs: [mask, q]            # the fragment's parameters, in call order
        outputs: [mb]                # what the call statement binds
        rewrite: |                   # or `match: |` (then `where:` may constrain its names)
          ...

A rule uses it as one statement, ``mb = @key-padding-rows(mask, q3)``. Expansion is textual and
happens before parsing: parameters become the call's arguments, outputs the call's names, and
every other name the fragment binds gets the prefix ``<first output>__`` so two uses never
collide. A match fragment's `where` entries (constraints and checks) are renamed the same way and
joined to the rule's own `where`. Errors inside an expanded statement point at the call's line.

A fragment's body may call other fragments (of its own kind); calls expand inside out, so each
level's private names carry the prefixes of every call above them. A fragment that calls itself,
directly or through others, is an error at the outermost call.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from onnx_fuse.rewrite._pattern import (PatternSyntaxError, _split_assign, _split_top, iter_lines,
                                        parse_match, parse_rewrite)

_CALL_RE = re.compile(r"^(?P<lhs>[^=]+?)\s*=\s*@(?P<name>[a-z0-9]+(?:-[a-z0-9]+)*)\s*\((?P<args>.*)\)\s*$", re.S)
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FRAGMENT_KEYS = {"name", "doc", "inputs", "outputs", "match", "rewrite", "where"}
_MAX_DEPTH = 8  # deeper nesting is surely a mistake, and keeps error chains readable


@dataclasses.dataclass
class Fragment:
    name: str
    kind: str                      # "match" | "rewrite"
    inputs: list[str]
    outputs: list[str]
    body: str
    where: Mapping[str, Any]
    names: frozenset[str]          # every value / capture / computed name the body binds or reads
    file: str = ""
    line: int = 0


def _call_of(stmt: str) -> re.Match | None:
    return _CALL_RE.match(stmt) if "@" in stmt else None


def _body_names(kind: str, body: str) -> set[str]:
    """Every name ``body`` binds or reads; a nested call contributes its outputs and arguments."""
    names: set[str] = set()
    plain: list[str] = []
    for _, text in iter_lines(body):
        m = _call_of(text)
        if m is None:
            plain.append(text)
            continue
        names.update(n for n in _split_top(m.group("lhs"), ",") if n != "_")
        names.update(_WORD_RE.findall(m.group("args")))
    body = "\n".join(plain)
    if not plain:
        return names
    if kind == "match":
        for st in parse_match(body, 1):
            names.update(o for o in st.outputs if o)
            for alt in st.alternatives:
                names.update(i for i in alt.inputs if i)
                if alt.passthrough:
                    names.add(alt.passthrough)
                names.update(a.capture for a in alt.attrs.values() if a.capture)
    else:
        for st in parse_rewrite(body, 1):
            names.update(o for o in st.outputs if o)
            if st.op is not None:
                names.update(i for i in st.op.inputs if i)
                for e in st.op.attrs.values():
                    names.update(e.names)
                if st.op.type_hint is not None:
                    names.update(st.op.type_hint[1])
            if st.expr is not None:
                names.update(st.expr.names)
            if st.alias:
                names.add(st.alias)
    return names


def build_fragment(data: Mapping, *, file: str, line: int) -> Fragment:
    from onnx_fuse.rewrite._rule import RuleError  # _rule imports this module

    lines = getattr(data, "lines", {})
    for key in data:
        if key not in _FRAGMENT_KEYS:
            raise RuleError(f"fragment: unknown key `{key}` (allowed: {', '.join(sorted(_FRAGMENT_KEYS))})",
                            lines.get(key, line), file)
    name = data.get("name")
    if not isinstance(name, str) or not re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", name):
        raise RuleError("a fragment needs a kebab-case `name`", lines.get("name", line), file)
    kinds = [k for k in ("match", "rewrite") if k in data]
    if len(kinds) != 1 or not isinstance(data[kinds[0]], str):
        raise RuleError(f"fragment {name!r} needs exactly one of `match: |` or `rewrite: |`", line, file)
    kind = kinds[0]
    ios = {}
    for key in ("inputs", "outputs"):
        v = data.get(key)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or (key == "outputs" and not v):
            raise RuleError(f"fragment {name!r}: `{key}` must be a list of names", lines.get(key, line), file)
        ios[key] = v
    where = data.get("where", {})
    if where and kind != "match":
        raise RuleError(f"fragment {name!r}: `where` is for match fragments", lines.get("where", line), file)
    if not isinstance(where, Mapping):
        raise RuleError(f"fragment {name!r}: `where` must be a mapping", lines.get("where", line), file)
    try:
        names = _body_names(kind, data[kind])
    except PatternSyntaxError as exc:
        raise RuleError(f"fragment {name!r}: {exc}", lines.get(kind, line) + 1 + exc.line_offset, file) from None
    for n in (*ios["inputs"], *ios["outputs"]):
        if n not in names:
            raise RuleError(f"fragment {name!r}: {n!r} is not used in its body", lines.get(kind, line), file)
    return Fragment(name, kind, ios["inputs"], ios["outputs"], data[kind], where, frozenset(names), file, line)


def rename_text(text: str, mapping: Mapping[str, str]) -> str:
    """Rename value names in one statement or expression; op names (``X(``), attribute keys
    (``k=``), domains (``d::``) and quoted strings stay."""
    out: list[str] = []
    i = 0
    quote = None
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == quote:
                quote = None
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            out.append(ch)
            i += 1
            continue
        m = _WORD_RE.match(text, i)
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.")):
            word = m.group(0)
            rest = text[m.end():]
            is_call = rest.lstrip().startswith("(") or rest.startswith("::")
            is_kwarg = re.match(r"\s*=(?!=)", rest) is not None and _inside_call(text, i)
            out.append(word if is_call or is_kwarg or word not in mapping else mapping[word])
            i = m.end()
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _inside_call(text: str, pos: int) -> bool:
    depth = 0
    quote = None
    for ch in text[:pos]:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
    return depth > 0


def _resolved(frag: Fragment, fragments: Mapping[str, Fragment], stack: tuple[str, ...]):
    """``frag``'s body with its own calls expanded: (text, names, where, checks), where and checks
    in the body's namespace (checks as (text, renaming) pairs)."""
    own_checks = []
    where = {}
    for key, spec in frag.where.items():
        if key == "check":
            own_checks = [spec] if isinstance(spec, str) else list(spec)
        else:
            where[key] = spec
    checks = [(c, {}) for c in own_checks]
    if not any(_call_of(t) for _, t in iter_lines(frag.body)):
        return frag.body, frag.names, where, checks
    try:
        text, _, inner_where, inner_checks = expand(frag.body, frag.kind, fragments, _stack=stack)
    except PatternSyntaxError as exc:
        raise PatternSyntaxError(f"in @{frag.name}: {exc}", 0) from None
    for key, (spec, _) in inner_where.items():
        where.setdefault(key, spec)
    checks.extend((c, m) for c, _, m in inner_checks)
    return text, frozenset(_body_names(frag.kind, text)), where, checks


def expand(block: str, kind: str, fragments: Mapping[str, Fragment],
           _stack: tuple[str, ...] = ()) -> tuple[str, list[int], dict, list]:
    """Expand every ``outs = @name(args)`` statement of ``block`` (nested calls too).

    Returns the new block text, the original line offset of each of its lines, the renamed `where`
    constraints of the match fragments used, and their checks as (text, call offset, renaming),
    renamed by the caller once the message is split off."""
    out_lines: list[str] = []
    offsets: list[int] = []
    where: dict = {}
    checks: list = []
    uses = 0
    for offset, raw in enumerate(block.splitlines()):
        stmt = next((t for _, t in iter_lines(raw)), "")
        m = _CALL_RE.match(stmt) if "@" in stmt else None
        if m is None:
            if "@" in stmt and "=" in stmt and re.search(r"=\s*@", stmt):
                raise PatternSyntaxError(f"bad fragment call {stmt!r}; write `out = @name(arg, ...)`", offset)
            out_lines.append(raw)
            offsets.append(offset)
            continue
        name = m.group("name")
        frag = fragments.get(name)
        if frag is None:
            known = ", ".join(sorted(fragments)) or "none"
            raise PatternSyntaxError(f"unknown fragment @{name} (known: {known})", offset)
        if frag.kind != kind:
            raise PatternSyntaxError(f"@{name} is a {frag.kind} fragment, used in `{kind}`", offset)
        if name in _stack:
            chain = " -> ".join(f"@{n}" for n in (*_stack, name))
            raise PatternSyntaxError(f"fragment @{name} calls itself ({chain})", offset)
        if len(_stack) >= _MAX_DEPTH:
            raise PatternSyntaxError(f"fragment calls nested deeper than {_MAX_DEPTH} at @{name}", offset)
        try:
            body, names, fwhere, fchecks = _resolved(frag, fragments, (*_stack, name))
        except PatternSyntaxError as exc:
            exc.line_offset = offset
            raise
        try:
            outs = _split_top(m.group("lhs"), ",")
            args = _split_top(m.group("args"), ",") if m.group("args").strip() else []
        except PatternSyntaxError as exc:
            exc.line_offset = offset
            raise
        if len(args) != len(frag.inputs) or len(outs) != len(frag.outputs):
            raise PatternSyntaxError(f"@{name} takes {len(frag.inputs)} input(s) and gives "
                                     f"{len(frag.outputs)} output(s); the call has {len(args)} and "
                                     f"{len(outs)}", offset)
        uses += 1
        prefix = f"{outs[0] if outs[0] != '_' else f'f{uses}'}__"
        mapping = {n: f"{prefix}{n}" for n in names}
        mapping.update(zip(frag.inputs, args))
        for o, new in zip(frag.outputs, outs):
            mapping[o] = f"{prefix}{o}" if new == "_" else new
        for _, text in iter_lines(body):
            lhs, rhs = _split_assign(text)
            out_lines.append(f"{rename_text(lhs, mapping)} = {rename_text(rhs, mapping)}")
            offsets.append(offset)
        for key, spec in fwhere.items():
            where[mapping.get(key, key)] = (spec, offset)
        for c, inner in fchecks:
            # an inner check was renamed into this fragment's names; compose with this call's renaming
            composed = {n: mapping.get(v, v) for n, v in inner.items()} if inner else mapping
            checks.append((c, offset, composed))
    return "\n".join(out_lines), offsets, where, checks
