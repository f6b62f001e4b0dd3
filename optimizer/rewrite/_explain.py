"""`explain`: why a rule did or did not fire at each candidate anchor, without changing the model.

A rule of a later stage (lower, simplify) is explained on a copy of the model rewritten by the
earlier stages' rules, since it matches what they produce (canonical ops, layout glue).
For every candidate anchor (or one named node) the rule's matcher runs with a ``Tracer``; a full
match is then planned and validated exactly as the pass would (but not committed), so the answer
is one of matched / no match / check failed / rewrite rejected, with the furthest partial match,
the failed step and the culprit (see ``_result.MatchResult``).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.errors import UserError
from onnx_fuse.rewrite._matcher import GraphFacts, Matcher, norm_domain
from onnx_fuse.rewrite._result import STAGE_REWRITE, MatchResult, MatchStatus, Tracer
from onnx_fuse.rewrite._rewriter import NoProgress, Rewriter, RewriteRejected
from onnx_fuse.rewrite._rule import STAGES, Rule, RuleSet


def explain(model: ir.Model, rules: RuleSet | Rule, rule_name: str | None = None, *,
            node: str | None = None) -> list[MatchResult]:
    """MatchResults of ``rule_name`` at each candidate anchor of ``model`` (or at node ``node``)."""
    if isinstance(rules, Rule):
        rule = rules
    else:
        if rule_name is None:
            raise UserError("explain needs a rule name")
        found = rules.get(rule_name)
        if found is None:
            close = [n for n in rules.names() if rule_name in n or n in rule_name]
            hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
            raise UserError(f"no rule named {rule_name!r}{hint}; see `onnx-fuse rules list`")
        rule = found
        if rule.stage != STAGES[0]:
            model = _after_earlier_stages(model, rules, rule)
    rewriter = Rewriter(model)
    if not rule.opset_ok(rewriter.opset):
        return [MatchResult(rule.name, "*", MatchStatus.SKIPPED,
                            f"model opset {rewriter.opset} is outside the rule's range "
                            f"[{rule.opset_min}, {rule.opset_max}]")]
    matcher = Matcher(rule)
    keys = set(rule.anchor_keys)
    results: list[MatchResult] = []
    found_node = False
    for graph in model.graphs():
        facts = GraphFacts(graph, rewriter.opset)
        for pos, n in enumerate(graph):
            label = n.name or f"#{pos} {n.op_type}"
            if node is not None and n.name != node:
                continue
            key = (norm_domain(n.domain), n.op_type)
            if key not in keys:
                if node is not None:
                    found_node = True
                    want = " | ".join(f"{d + '::' if d else ''}{o}" for d, o in rule.anchor_keys)
                    results.append(MatchResult(rule.name, label, MatchStatus.NO_MATCH,
                                               f"the rule's pattern ends in {want}, this node is a "
                                               f"{n.op_type}", rule.anchor.source, f"node {n.name!r}"))
                continue
            found_node = True
            tracer = Tracer()
            m = matcher.match(n, facts, tracer)
            if m is None:
                results.append(tracer.result(rule.name, label))
                continue
            matched = [(rule.match[i].source, m.nodes[i].name or f"<unnamed {m.nodes[i].op_type}>") for i in sorted(m.nodes)]
            try:
                rewriter.plan(m, facts)
            except NoProgress:
                results.append(MatchResult(rule.name, label, MatchStatus.NO_MATCH,
                                           "the rewrite would reproduce the matched nodes (no progress)",
                                           "rewrite", "", matched))
                continue
            except RewriteRejected as exc:
                tracer.record(len(m.nodes), STAGE_REWRITE, str(exc), "rewrite", "", matched)
                results.append(tracer.result(rule.name, label))
                continue
            results.append(MatchResult(rule.name, label, MatchStatus.MATCHED, matched=matched))
    if node is not None and not found_node:
        raise UserError(f"no node named {node!r} in the model")
    return results


def _after_earlier_stages(model: ir.Model, rules: RuleSet, rule: Rule) -> ir.Model:
    """A lowering matches canonical ops, a simplification the glue lowerings leave: explain them on
    a copy of the model that the earlier stages of ``rules`` have rewritten, as the pass does."""
    from onnx_fuse.rewrite._rewriter import RewritePass

    upto = STAGES.index(rule.stage)
    earlier = RuleSet(r for r in rules.ordered() if STAGES.index(r.stage) < upto)
    copy = ir.serde.deserialize_model(ir.serde.serialize_model(model))
    RewritePass(earlier, stages=STAGES[:upto])(copy)
    return copy
