"""The optimization report: what each pass and rule did, node counts, timings, verdict.

One data structure, two renderings: tables for people and a JSON dict for --report. Tables are
drawn with rich on a terminal; anywhere else (a pipe, a file) they are plain lines at full width,
never cut or wrapped, so grep finds every name.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
from rich.markup import escape

from onnx_fuse.passes._infra import PassRecord


def print_table(console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *,
                right: Sequence[str] = ()) -> None:
    """A table on ``console``: rich on a terminal, else a title line, a header line and one
    plain line per row, columns padded to their widest cell and separated by two spaces.

    Cells are plain text (never rich markup)."""
    if console.is_terminal:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(title) if title else None)
        for col in columns:
            table.add_column(col, justify="right" if col in right else "left", overflow="fold")
        for row in rows:
            table.add_row(*(Text(str(c)) for c in row))
        console.print(table)
        return
    cells = [list(columns)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(columns))]
    lines = [f"{title}:"] if title else []
    for r in cells:
        parts = [c.rjust(w) if col in right else c.ljust(w) for c, w, col in zip(r, widths, columns)]
        lines.append("  ".join(parts).rstrip())
    console.file.write("\n".join(lines) + "\n")
    console.file.flush()


def op_histogram(model: ir.Model) -> collections.Counter[str]:
    """Count ops (``domain::Op`` outside the default domain) over the graph and its subgraphs."""
    hist: collections.Counter[str] = collections.Counter()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        hist[key] += 1
    return hist


@dataclasses.dataclass
class Report:
    level: int
    target: str
    nodes_before: int = 0
    nodes_after: int = 0
    ops_before: dict[str, int] = dataclasses.field(default_factory=dict)
    ops_after: dict[str, int] = dataclasses.field(default_factory=dict)
    passes: list[PassRecord] = dataclasses.field(default_factory=list)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    verify: dict[str, Any] | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def rule_fires(self) -> dict[str, int]:
        """Fires per rule, summed over all runs of the rewrite passes."""
        fires: collections.Counter[str] = collections.Counter()
        for record in self.passes:
            if record.name == "rewrite":
                fires.update(record.stats)
        return dict(sorted(fires.items()))

    @property
    def op_delta(self) -> dict[str, int]:
        keys = set(self.ops_before) | set(self.ops_after)
        delta = {k: self.ops_after.get(k, 0) - self.ops_before.get(k, 0) for k in keys}
        return {k: v for k, v in sorted(delta.items()) if v}

    @property
    def passed(self) -> bool:
        """False only when verification ran and failed (exit 1); see ``status``."""
        return self.verify is None or bool(self.verify.get("passed"))

    @property
    def status(self) -> str:
        """PASSED or FAILED when verification ran; NOT VERIFIED when it did not."""
        if self.verify is None or self.verify.get("skipped"):
            return "NOT VERIFIED"
        return "PASSED" if self.passed else "FAILED"

    @property
    def status_reason(self) -> str:
        if self.verify is None:
            return "verification not requested (--verify / verify=True)"
        if self.verify.get("skipped"):
            return self.verify["skipped"]
        return "" if self.passed else self.verify_failure

    @property
    def verify_failure(self) -> str:
        """One line: why verification failed ("" when it did not)."""
        if self.verify is None or self.passed:
            return ""
        from onnx_fuse.verify import failure_summary

        return failure_summary(self.verify)

    def pass_summary(self) -> list[dict[str, Any]]:
        """Pass records merged by name: runs, changes, seconds, node delta and stats."""
        merged: dict[str, dict[str, Any]] = {}
        for r in self.passes:
            m = merged.setdefault(r.name, {"pass": r.name, "runs": 0, "changed": 0, "seconds": 0.0,
                                           "nodes_removed": 0, "stats": collections.Counter()})
            m["runs"] += 1
            m["changed"] += int(r.modified)
            m["seconds"] += r.seconds
            m["nodes_removed"] += r.nodes_before - r.nodes_after
            m["stats"].update(r.stats)
        for m in merged.values():
            m["stats"] = dict(sorted(m["stats"].items()))
            m["seconds"] = round(m["seconds"], 6)
        return list(merged.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "target": self.target,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "ops_before": dict(sorted(self.ops_before.items())),
            "ops_after": dict(sorted(self.ops_after.items())),
            "op_delta": self.op_delta,
            "passes": self.pass_summary(),
            "rule_fires": self.rule_fires,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
            "verify": self.verify,
            "warnings": self.warnings,
            "status": self.status,
            "status_reason": self.status_reason,
        }

    def write_json(self, path: str | os.PathLike) -> None:
        """Write like cp (fileio.output_file): atomically for a regular file (a half-written
        report is as bad as a half-written model), through a FIFO or /dev/stdout."""
        from onnx_fuse.fileio import user_write, write_json

        with user_write(path, "report"):
            write_json(path, self.to_dict(), indent=2)

    def render(self, console=None, *, verbose: bool = False) -> None:
        from rich.console import Console

        console = console or Console()
        print_table(console, f"onnx-fuse  O{self.level}  target={self.target}", ("item", "value"), [
            ("nodes", f"{self.nodes_before} -> {self.nodes_after}"),
            ("time", " ".join(f"{k} {v:.3f}s" for k, v in self.seconds.items()))])
        if self.op_delta:
            print_table(console, "op histogram delta", ("op", "before", "after", "delta"),
                        [(op, str(self.ops_before.get(op, 0)), str(self.ops_after.get(op, 0)), f"{d:+d}")
                         for op, d in self.op_delta.items()], right=("before", "after", "delta"))
        rows = []
        for m in self.pass_summary():
            if m["pass"] == "rewrite" and not verbose:
                details = f"{sum(m['stats'].values())} fires (see rules)"
            else:
                details = ", ".join(f"{k}={v}" for k, v in m["stats"].items())
            rows.append((m["pass"], str(m["runs"]), str(m["changed"]), str(m["nodes_removed"]),
                         f"{m['seconds']:.3f}", details))
        print_table(console, "passes", ("pass", "runs", "changed", "nodes removed", "seconds", "details"),
                    rows, right=("runs", "changed", "nodes removed", "seconds"))
        if self.rule_fires:
            print_table(console, "rules fired", ("rule", "fires"),
                        [(name, str(n)) for name, n in self.rule_fires.items()], right=("fires",))
        for w in self.warnings:
            console.print(f"[yellow]warning:[/yellow] {escape(w)}", soft_wrap=True)
        if self.verify is not None and self.verify.get("outputs"):
            print_table(console, f"verify (atol={self.verify['atol']}, rtol={self.verify['rtol']})",
                        ("output", "max abs", "max rel", "mean abs", "ok"),
                        [(o["name"], f"{o['max_abs']:.3g}", f"{o['max_rel']:.3g}", f"{o['mean_abs']:.3g}",
                          "yes" if o["passed"] else "NO") for o in self.verify["outputs"]],
                        right=("max abs", "max rel", "mean abs", "ok"))
        if self.verify is not None:
            for note in self.verify.get("notes", []):
                console.print(f"note: {escape(note)}", soft_wrap=True)
            rw = self.verify.get("rewrites")
            if rw:
                console.print(f"rewrites checked one by one: {rw['checked']} checked, "
                              f"{rw['unchecked']} unchecked, {rw['rolled_back']} rolled back",
                              soft_wrap=True)
                for why, n in (rw.get("unchecked_reasons", {}).items() if verbose else ()):
                    console.print(f"  unchecked x{n}: {escape(why)}", soft_wrap=True)
        style = {"PASSED": "bold green", "FAILED": "bold red"}.get(self.status, "bold yellow")
        reason = f": {escape(self.status_reason)}" if self.status_reason else ""
        console.print(f"[{style}]{self.status}[/{style}]{reason}", soft_wrap=True)
