"""Reading rule files: safe YAML with line numbers and limits, then validation per rule.

YAML is composed with PyYAML's safe loader into a node tree (no Python objects are ever
constructed from tags) and converted by hand, which keeps the line of every key and refuses:
files over 1 MiB, more than 20000 nodes after alias expansion, aliases nested deeper than 8,
recursive aliases, nesting deeper than 64 levels, non-string keys, duplicate keys, and every tag
other than YAML's plain str/int/float/bool/null/seq/map (``!!python/object/apply:...`` is named
and refused, never silently dropped). Every problem is a RuleError with
``file:line``; ``load_file`` collects one error per bad rule so `rules check` can print them all.

Built-in packs are the ``rules/<family>/*.yaml`` files of the ``onnx_fuse.rules`` package, found
with importlib.resources and read in sorted path order.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from onnx_fuse.rewrite._fragments import Fragment, build_fragment
from onnx_fuse.rewrite._rule import Rule, RuleError, RuleSet, build_rule

MAX_FILE_BYTES = 1 << 20
MAX_NODES = 20000
MAX_ALIAS_DEPTH = 8
MAX_DEPTH = 64

_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null"))
_COLLECTION_TAGS = frozenset({"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"})

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


class _Data:
    """Conversion state: node count, nodes seen (for alias detection), a scalar constructor."""

    def __init__(self) -> None:
        self.count = 0
        self.seen: set[int] = set()
        self.loader = yaml.SafeLoader("")


class Mapping(dict):
    """A dict that remembers its own line, each key's line, and block-scalar styles."""

    line: int = 0
    lines: dict
    styles: dict


def _tag_name(tag: str) -> str:
    """``!!python/object/apply:os.system`` as the author wrote it, not the expanded URI."""
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag


def _convert(node: yaml.Node, state: _Data, stack: tuple[int, ...], alias_depth: int, file: str) -> Any:
    state.count += 1
    if len(stack) >= MAX_DEPTH:
        raise RuleError(f"YAML nested deeper than {MAX_DEPTH} levels; refusing",
                        node.start_mark.line + 1, file)
    allowed = _SCALAR_TAGS if isinstance(node, yaml.ScalarNode) else _COLLECTION_TAGS
    if node.tag not in allowed:
        raise RuleError(f"unsupported YAML tag {_tag_name(node.tag)!r}; rule files hold plain "
                        "strings, numbers, booleans, lists and mappings only",
                        node.start_mark.line + 1, file)
    if state.count > MAX_NODES:
        raise RuleError(f"more than {MAX_NODES} YAML nodes (after alias expansion); refusing",
                        node.start_mark.line + 1, file)
    if id(node) in stack:
        raise RuleError("recursive YAML alias", node.start_mark.line + 1, file)
    seen = state.seen
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if id(node) in seen:      # a node reached twice is an alias use
            alias_depth += 1
            if alias_depth > MAX_ALIAS_DEPTH:
                raise RuleError(f"YAML aliases nested deeper than {MAX_ALIAS_DEPTH}; refusing",
                                node.start_mark.line + 1, file)
        seen.add(id(node))
    stack = stack + (id(node),)
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        value = state.loader.construct_object(node, deep=True)
        if isinstance(value, str) and not node.style and _FLOAT_RE.match(value):
            return float(value)  # YAML 1.1 reads `1e-3` as a string; rule authors mean a number
        return value
    if isinstance(node, yaml.SequenceNode):
        return [_convert(n, state, stack, alias_depth, file) for n in node.value]
    if isinstance(node, yaml.MappingNode):
        out = Mapping()
        out.line = line
        out.lines = {}
        out.styles = {}
        merged: list[Mapping] = []
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.tag == "tag:yaml.org,2002:merge":
                # `<<: *shared` (or a list of them): keys written here win over merged ones
                sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
                for src in sources:
                    got = _convert(src, state, stack, alias_depth, file)
                    if not isinstance(got, Mapping):
                        raise RuleError("`<<` merges mappings only", knode.start_mark.line + 1, file)
                    merged.append(got)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                raise RuleError("mapping keys must be plain strings", knode.start_mark.line + 1, file)
            key = state.loader.construct_object(knode)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                raise RuleError(f"duplicate key {key!r}", knode.start_mark.line + 1, file)
            out[key] = _convert(vnode, state, stack, alias_depth, file)
            out.lines[key] = knode.start_mark.line + 1
            if isinstance(vnode, yaml.ScalarNode):
                out.styles[key] = vnode.style or ""
            if isinstance(vnode, yaml.SequenceNode):
                for i, item in enumerate(vnode.value):
                    out.lines[f"{key}[{i}]"] = item.start_mark.line + 1
        for src in merged:
            for key, value in src.items():
                if key not in out:
                    out[key] = value
                    for lk, ln in src.lines.items():
                        if lk == key or lk.startswith(f"{key}["):
                            out.lines[lk] = ln
                    if key in src.styles:
                        out.styles[key] = src.styles[key]
        return out
    raise RuleError(f"unsupported YAML node {type(node).__name__}", line, file)


def parse_yaml(text: str, file: str) -> Any:
    if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
        raise RuleError(f"rule file larger than {MAX_FILE_BYTES} bytes; refusing", 0, file)
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise RuleError(f"YAML syntax: {exc.problem or exc.context}", (mark.line + 1) if mark else 0, file) from None
    except yaml.YAMLError as exc:
        raise RuleError(f"YAML: {exc}", 0, file) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise RuleError(f"YAML nested too deeply (over {MAX_DEPTH} levels); refusing", 0, file) from None
    if root is None:
        return None
    return _convert(root, _Data(), (), 0, file)


def _file_parts(data: Any, file: str) -> tuple[Any, int, list, list[RuleError]]:
    """(rule items, their line, fragment items, errors) of a parsed rule file."""
    if isinstance(data, Mapping):
        extra = sorted(set(data) - {"rules", "fragments"})
        if extra or "rules" not in data and "fragments" not in data:
            return None, data.line, [], [RuleError(
                f"a rule file holds `rules: [...]` (and optionally `fragments: [...]`); unexpected "
                f"key(s) {extra}", data.lines.get(extra[0], data.line) if extra else data.line, file)]
        frags = data.get("fragments", [])
        if not isinstance(frags, list):
            return None, data.line, [], [RuleError("`fragments` must be a list", data.lines.get("fragments", 1), file)]
        return data.get("rules", []), data.lines.get("rules", 1), frags, []
    return data, 1, [], []


def parse_fragments(text: str, file: str) -> tuple[dict[str, Fragment], list[RuleError]]:
    """The fragments a rule file defines (for other files that use them)."""
    try:
        data = parse_yaml(text, file)
    except RuleError:
        return {}, []   # load_text reports it
    _, _, items, errors = _file_parts(data, file)
    return _build_fragments(items, file, errors)


def _build_fragments(items: list, file: str, errors: list[RuleError]) -> tuple[dict[str, Fragment], list[RuleError]]:
    found: dict[str, Fragment] = {}
    for item in items:
        if not isinstance(item, Mapping):
            errors.append(RuleError("each fragment must be a mapping", 0, file))
            continue
        try:
            frag = build_fragment(item, file=file, line=item.line)
        except RuleError as exc:
            exc.file = file
            errors.append(exc)
            continue
        if frag.name in found:
            errors.append(RuleError(f"fragment {frag.name!r} is defined twice", item.line, file))
            continue
        found[frag.name] = frag
    return found, errors


def load_text(text: str, file: str = "<rules>", *, builtin: bool = False,
              fragments: dict[str, Fragment] | None = None) -> tuple[list[Rule], list[RuleError]]:
    """Parse every rule in ``text``; return the good rules and one error per bad rule.
    ``fragments`` are those defined elsewhere (the built-in ones) that this file may use."""
    try:
        data = parse_yaml(text, file)
    except RuleError as exc:
        return [], [exc]
    items, list_line, frag_items, errors = _file_parts(data, file)
    if errors:
        return [], errors
    own, errors = _build_fragments(frag_items, file, [])
    if errors:
        return [], errors
    fragments = {**(fragments or {}), **own}
    if not isinstance(items, list):
        return [], [RuleError("expected a list of rules", list_line, file)]
    src_lines = text.splitlines()
    rules: list[Rule] = []
    names: dict[str, int] = {}
    starts = [it.line if isinstance(it, Mapping) else 0 for it in items]
    for idx, item in enumerate(items):
        if not isinstance(item, Mapping):
            errors.append(RuleError("each rule must be a mapping", list_line, file))
            continue
        end = next((s for s in starts[idx + 1:] if s), len(src_lines) + 1)
        source = "\n".join(src_lines[item.line - 1: end - 1]).rstrip()
        where = item.get("where")
        where_lines = where.lines if isinstance(where, Mapping) else {}
        try:
            rule = build_rule(item, line=item.line, lines=item.lines, styles=item.styles,
                              where_lines=where_lines, file=file, source=_dedent_item(source),
                              fragments=fragments)
        except RuleError as exc:
            exc.file = file
            if not exc.line:
                exc.line = item.line
            errors.append(exc)
            continue
        rule.builtin = builtin
        if rule.name in names:
            errors.append(RuleError(f"rule {rule.name!r} is defined twice in this file (first at "
                                    f"line {names[rule.name]})", item.lines.get("name", item.line), file))
            continue
        names[rule.name] = item.line
        rules.append(rule)
    return rules, errors


def _dedent_item(source: str) -> str:
    lines = source.splitlines()
    if not lines:
        return source
    first = lines[0]
    stripped = first.lstrip()
    if stripped.startswith("- "):
        indent = len(first) - len(stripped) + 2
        lines[0] = " " * indent + stripped[2:]
    import textwrap
    return textwrap.dedent("\n".join(lines))


def load_file(path: str | os.PathLike) -> tuple[list[Rule], list[RuleError]]:
    if not os.fspath(path):   # Path("") is ".", which would be "a folder"
        return [], [RuleError("the rule file path is empty", 0, "''")]
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):   # a FIFO or device would block or never end
            what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            return [], [RuleError(f"rule file is {what}; refusing", 0, str(p))]
        size = st.st_size
        if size > MAX_FILE_BYTES:
            return [], [RuleError(f"rule file larger than {MAX_FILE_BYTES} bytes; refusing", 0, str(p))]
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], [RuleError("no such rule file", 0, str(p))]
    except (OSError, UnicodeDecodeError) as exc:
        return [], [RuleError(f"cannot read rule file: {exc}", 0, str(p))]
    return load_text(text, str(p), fragments=builtin_fragments())


_FRAGMENT_CACHE: dict[tuple[tuple[str, str], ...], dict[str, Fragment]] = {}


def builtin_fragments() -> dict[str, Fragment]:
    """Fragments defined by the built-in packs; every rule file (built-in or user) may use them."""
    files = tuple(builtin_files())
    if files not in _FRAGMENT_CACHE:
        _FRAGMENT_CACHE.clear()
        _FRAGMENT_CACHE[files] = _collect_fragments(files, [])
    return _FRAGMENT_CACHE[files]


def _collect_fragments(files, errors: list[RuleError]) -> dict[str, Fragment]:
    """Fragments across files; a name defined twice is an error (per-file errors are reported
    by load_text when the file itself is loaded)."""
    fragments: dict[str, Fragment] = {}
    for path, text in files:
        for name, frag in parse_fragments(text, path)[0].items():
            if name in fragments:
                errors.append(RuleError(f"fragment {name!r} is also defined in {fragments[name].file}",
                                        frag.line, path))
            fragments[name] = frag
    return fragments


def builtin_files() -> list[tuple[str, str]]:
    """(display path, text) of every built-in rule file, in sorted path order."""
    root = importlib.resources.files("onnx_fuse.rules")
    found: list[tuple[str, str]] = []

    def walk(node, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                if not child.name.startswith((".", "_")):
                    walk(child, rel + "/")
            elif child.name.endswith((".yaml", ".yml")):
                found.append((f"rules/{rel}", child.read_text(encoding="utf-8")))

    walk(root, "")
    return found


# Parsed built-ins keyed by the files' texts: every optimize() call (and every InferenceSession)
# needs them, parsing takes ~0.2 s, and rules are not mutated once loaded. An edited file has a
# new text, so it is parsed again.
_BUILTIN_CACHE: dict[tuple[tuple[str, str], ...], tuple[list[Rule], list[RuleError]]] = {}


def load_builtin() -> tuple[list[Rule], list[RuleError]]:
    files = tuple(builtin_files())
    cached = _BUILTIN_CACHE.get(files)
    if cached is None:
        cached = _parse_builtin(files)
        _BUILTIN_CACHE.clear()
        _BUILTIN_CACHE[files] = cached
    return list(cached[0]), list(cached[1])


def _parse_builtin(files) -> tuple[list[Rule], list[RuleError]]:
    rules: list[Rule] = []
    errors: list[RuleError] = []
    seen: dict[str, str] = {}
    fragments = _collect_fragments(files, errors)
    for path, text in files:
        got, errs = load_text(text, path, builtin=True, fragments=fragments)
        errors += errs
        for r in got:
            if r.name in seen:
                errors.append(RuleError(f"built-in rule {r.name!r} is also defined in {seen[r.name]}",
                                        r.line, path))
                continue
            seen[r.name] = path
            rules.append(r)
    return rules, errors


def load_rules(*, user_files: Sequence[str | os.PathLike] = (), builtin: bool = True,
               disable: Iterable[str] = ()) -> tuple[RuleSet, list[RuleError], list[str]]:
    """All rules: built-ins, then user files (a user rule replaces a built-in of the same name).

    Returns the rule set, every error, and notes on overrides.
    """
    rule_set = RuleSet()
    errors: list[RuleError] = []
    notes: list[str] = []
    if builtin:
        rules, errs = load_builtin()
        errors += errs
        for r in rules:
            rule_set.add(r)
    user_seen: dict[str, str] = {}
    for f in user_files:
        rules, errs = load_file(f)
        errors += errs
        for r in rules:
            if r.name in user_seen:
                errors.append(RuleError(f"rule {r.name!r} is also defined in {user_seen[r.name]}", r.line, r.file))
                continue
            user_seen[r.name] = r.file
            old = rule_set.add(r)
            if old is not None:
                notes.append(f"{r.file}:{r.line}: rule {r.name!r} overrides the one in {old.file}")
    for name in disable:
        rule_set.remove(name)
    return rule_set, errors, notes
