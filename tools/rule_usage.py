"""Which built-in rules fire on which exports: the rule-generality audit.

A rule that only one export needs is a smell: it matches the subgraph one exporter happened to write,
not an idiom. From tools/coverage.py JSON files (the corpus's, and any hold-out set's), this counts, for
every built-in rule, the files and the architectures it fired on (in any of our columns, or the ones
--columns names) and lists

  - rules that fired on one architecture only (candidates to fold into a more general rule, or to back
    with a second export that needs them),
  - built-in rules that fired on none of the given files (reached only by unit tests, or dead).

    python tools/rule_usage.py out/cov.json [/tmp/holdout17/cov.json ...] [--columns ort-O3 trt-O4]
                               [--markdown docs/rule_usage.md] [--json out/rule_usage.json]

Rows are keyed by file name: a file that appears in several JSON files counts once (the last one read).
Bad input (a missing or unreadable file, JSON that is not a coverage run) is a one-line error and exit 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class UsageError(Exception):
    """Input this tool cannot read; the message is the one line printed."""


def load_rows(paths: list[str]) -> dict[str, dict]:
    """Coverage rows by file name from each JSON file (tools/coverage.py --json)."""
    rows: dict[str, dict] = {}
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except OSError as exc:
            raise UsageError(f"cannot read {p}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p} is not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise UsageError(f"{p} is not a tools/coverage.py --json file (no 'rows' list)")
        for row in data["rows"]:
            if isinstance(row, dict) and "file" in row:
                rows[row["file"]] = row
    return rows


def arch_of(row: dict) -> str:
    """The row's architecture (the manifest's, else the file name before its first '__')."""
    return row.get("arch") or row["file"].split("__")[0]


def usage(rows: dict[str, dict], columns: list[str] | None = None) -> dict[str, dict[str, set[str]]]:
    """rule -> {"files": {...}, "archs": {...}, "columns": {...}} over the rows' columns with rule fires."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: {"files": set(), "archs": set(), "columns": set()})
    for name, row in rows.items():
        for col, cell in (row.get("columns") or {}).items():
            if columns and col not in columns:
                continue
            fires = cell.get("rule_fires") if isinstance(cell, dict) else None
            for rule, n in (fires or {}).items():
                if n:
                    u = out[rule]
                    u["files"].add(name)
                    u["archs"].add(arch_of(row))
                    u["columns"].add(col)
    return dict(out)


def builtin_rules() -> dict[str, str]:
    """Every built-in rule's name -> its rules/ file (relative to the repository)."""
    from onnx_fuse.rewrite._loader import load_builtin

    rules, _ = load_builtin()
    out = {}
    for r in rules:
        f = Path(r.file)
        try:
            f = f.resolve().relative_to(ROOT)
        except ValueError:
            pass
        out[r.name] = str(f)
    return out


def audit(rows: dict[str, dict], known: dict[str, str], columns: list[str] | None = None) -> dict:
    """The audit's facts: per-rule usage, single-architecture rules and never-fired built-ins."""
    use = usage(rows, columns)
    per_rule = {r: {"files": len(u["files"]), "archs": sorted(u["archs"]), "columns": sorted(u["columns"]),
                    "file": known.get(r, "")} for r, u in sorted(use.items())}
    single = {r: v for r, v in per_rule.items() if len(v["archs"]) == 1 and r in known}
    never = {r: f for r, f in sorted(known.items()) if r not in use}
    return {"files": len(rows), "archs": len({arch_of(r) for r in rows.values()}), "columns": columns or "all",
            "rules": per_rule, "single_arch": single, "never_fired": never}


def markdown(facts: dict, sources: list[str], note: str = "") -> str:
    """The audit as a Markdown page (``note``: a line on where the JSON files came from)."""
    lines = ["# Rule usage: which built-in rules the exports need", "",
             f"Made with `python tools/rule_usage.py {' '.join(sources)}` on "
             f"{datetime.date.today().isoformat()}: {facts['files']} files of {facts['archs']} architectures, "
             f"columns {facts['columns'] if isinstance(facts['columns'], str) else ', '.join(facts['columns'])}.",
             *(["", note] if note else []), "", "## Fired on one architecture only", "",
             "| rule | rules file | files | architecture | columns |", "|---|---|---|---|---|"]
    for r, v in facts["single_arch"].items():
        lines.append(f"| `{r}` | {v['file']} | {v['files']} | {v['archs'][0]} | {', '.join(v['columns'])} |")
    lines += ["", "## Built-in rules that fired on none of these files", "", "| rule | rules file |", "|---|---|"]
    lines += [f"| `{r}` | {f} |" for r, f in facts["never_fired"].items()]
    lines += ["", "## Every rule that fired", "", "| rule | files | architectures |", "|---|---|---|"]
    lines += [f"| `{r}` | {v['files']} | {len(v['archs'])} |" for r, v in facts["rules"].items()]
    return "\n".join(lines) + "\n"


def _write(path: str, text: str) -> None:
    """Atomic write: a temporary file beside the target, then a rename."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text)
    tmp.replace(target)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("coverage_json", nargs="+", help="tools/coverage.py --json output files")
    ap.add_argument("--columns", nargs="+", default=None, help="only these columns (default: every one with rule fires)")
    ap.add_argument("--markdown", default=None, help="write the audit as Markdown here")
    ap.add_argument("--json", dest="json_out", default=None, help="write the audit's facts as JSON here")
    ap.add_argument("--note", default="", help="a line for the Markdown page: where the JSON files came from")
    a = ap.parse_args(argv)
    try:
        rows = load_rows(a.coverage_json)
        if not rows:
            raise UsageError("no coverage rows in " + ", ".join(a.coverage_json))
        facts = audit(rows, builtin_rules(), a.columns)
    except UsageError as exc:
        print(f"rule_usage: error: {exc}", file=sys.stderr)
        return 2
    if a.markdown:  # the files first: a reader that closes stdout early (| head) must not cost them
        _write(a.markdown, markdown(facts, [Path(p).name for p in a.coverage_json], a.note))
    if a.json_out:
        _write(a.json_out, json.dumps(facts, indent=1, default=sorted) + "\n")
    lines = [f"{facts['files']} files, {facts['archs']} architectures; {len(facts['rules'])} rules fired, "
             f"{len(facts['single_arch'])} on one architecture only, {len(facts['never_fired'])} built-ins never"]
    lines += [f"  one architecture: {r:40s} {v['archs'][0]} ({v['files']} files)" for r, v in facts["single_arch"].items()]
    lines += [f"  never fired:      {r:40s} {f}" for r, f in facts["never_fired"].items()]
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- keep the interpreter's exit flush quiet
    return 0


if __name__ == "__main__":
    sys.exit(main())
