"""Match results and the tracer: failures are data, not log lines.

A ``MatchResult`` says, for one rule at one candidate anchor node, whether it matched and if not
how far it got: the furthest partial match (pattern statement -> graph node), the failed step
(the statement or constraint being checked), the reason, and the culprit node or value.

The ``Tracer`` keeps the furthest failure seen while the matcher backtracks: the one with the
most pattern nodes matched, later stages (constraints, escapes, checks, rewrite) winning ties.
"""

from __future__ import annotations

import dataclasses
import enum


class MatchStatus(enum.Enum):
    MATCHED = "matched"
    NO_MATCH = "no match"            # structure: op type, input, attribute, output index
    CHECK_FAILED = "check failed"    # a `where` constraint, a check, an escaping intermediate
    REWRITE_FAILED = "rewrite rejected"  # the replacement failed validation
    SKIPPED = "skipped"              # rule gated off (target, level, opset)


# Stages of a failure, in the order the matcher reaches them (the tracer prefers later ones).
STAGE_STRUCTURE = 0
STAGE_CONSTRAINT = 1
STAGE_ESCAPE = 2
STAGE_CHECK = 3
STAGE_REWRITE = 4

_STATUS_OF_STAGE = {STAGE_STRUCTURE: MatchStatus.NO_MATCH, STAGE_CONSTRAINT: MatchStatus.CHECK_FAILED,
                    STAGE_ESCAPE: MatchStatus.CHECK_FAILED, STAGE_CHECK: MatchStatus.CHECK_FAILED,
                    STAGE_REWRITE: MatchStatus.REWRITE_FAILED}


@dataclasses.dataclass
class MatchResult:
    rule: str
    anchor: str                                   # anchor node name
    status: MatchStatus
    reason: str = ""
    step: str = ""                                # the statement or constraint that failed
    culprit: str = ""                             # node or value blamed
    matched: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (statement, node)

    @property
    def ok(self) -> bool:
        return self.status is MatchStatus.MATCHED

    def to_dict(self) -> dict:
        return {"rule": self.rule, "anchor": self.anchor, "status": self.status.value,
                "reason": self.reason, "step": self.step, "culprit": self.culprit,
                "matched": [{"statement": s, "node": n} for s, n in self.matched]}

    def format(self) -> str:
        lines = [f"{self.anchor}: {self.status.value}"]
        for s, n in self.matched:
            lines.append(f"    matched  {s:<40}  <- {n}")
        if self.status is not MatchStatus.MATCHED:
            if self.step:
                lines.append(f"    failed   {self.step}")
            if self.reason:
                lines.append(f"    reason   {self.reason}")
            if self.culprit:
                lines.append(f"    culprit  {self.culprit}")
        return "\n".join(lines)


class Tracer:
    """Records the furthest failure of one matching attempt."""

    def __init__(self) -> None:
        self.best: tuple[int, int] | None = None
        self.reason = ""
        self.step = ""
        self.culprit = ""
        self.matched: list[tuple[str, str]] = []

    def record(self, depth: int, stage: int, reason: str, step: str, culprit: str,
               matched: list[tuple[str, str]]) -> None:
        key = (depth, stage)
        if self.best is None or key > self.best:
            self.best = key
            self.reason, self.step, self.culprit, self.matched = reason, step, culprit, matched

    def result(self, rule: str, anchor: str) -> MatchResult:
        if self.best is None:
            return MatchResult(rule, anchor, MatchStatus.NO_MATCH, "no candidate")
        return MatchResult(rule, anchor, _STATUS_OF_STAGE[self.best[1]], self.reason, self.step,
                           self.culprit, self.matched)


def describe_value(v) -> str:
    if v is None:
        return "<missing input>"
    prod = v.producer()
    where = f" (output {v.index()} of {prod.op_type} {prod.name!r})" if prod is not None else \
        (" (graph input)" if v.is_graph_input() else (" (initializer)" if v.is_initializer() else ""))
    return f"value {v.name!r}{where}"


def describe_node(n) -> str:
    dom = f"{n.domain}::" if n.domain else ""
    return f"node {n.name!r} ({dom}{n.op_type})"
