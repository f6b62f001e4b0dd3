"""The declarative rule engine: YAML fusion rules matched and rewritten on onnx-ir graphs.

    rule_set = load_rule_set(target="ort", max_level=3, user_files=["my.yaml"])
    RewritePass(rule_set)(model)          # stats[rule name] = fires
    explain(model, rule_set, "gelu-erf")  # why a rule did or did not fire

The language is documented in docs/rules.md. Modules: _loader (safe YAML, validation), _pattern
(statement parsing), _expr (safe expressions), _rule (Rule, RuleSet), _matcher, _rewriter
(RewritePass), _result (MatchResult, tracer), _explain.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from onnx_fuse.errors import UserError
from onnx_fuse.rewrite._explain import explain
from onnx_fuse.rewrite._loader import load_file, load_rules, load_text
from onnx_fuse.rewrite._matcher import Match, Matcher
from onnx_fuse.rewrite._result import MatchResult, MatchStatus
from onnx_fuse.rewrite._rewriter import RULE_TAG, RewritePass
from onnx_fuse.rewrite._rule import TARGETS, Rule, RuleError, RuleSet

__all__ = ["RULE_TAG", "TARGETS", "Match", "MatchResult", "MatchStatus", "Matcher", "RewritePass",
           "Rule", "RuleError", "RuleSet", "explain", "load_file", "load_rule_set", "load_rules",
           "load_text"]


def load_rule_set(*, target: str | None = None, max_level: int | None = None,
                  user_files: Sequence[str | os.PathLike] = (), disable: Iterable[str] = (),
                  builtin: bool = True) -> RuleSet:
    """Built-in rules plus ``user_files`` (overriding by name), minus ``disable``, selected for
    ``target`` and ``max_level``. Any bad rule raises UserError ``file:line: what is wrong``."""
    if target is not None and target not in TARGETS:
        raise UserError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    rule_set, errors, _ = load_rules(user_files=user_files, builtin=builtin, disable=disable)
    if errors:
        more = f" (and {len(errors) - 1} more; run `onnx-fuse rules check`)" if len(errors) > 1 else ""
        raise UserError(f"{errors[0]}{more}")
    return rule_set.select(target=target, max_level=max_level)
