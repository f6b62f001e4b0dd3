"""``onnx-fuse rules``: list, show, check and explain fusion rules.

    onnx-fuse rules list [--target T] [--level N] [--rules FILE]
    onnx-fuse rules show NAME [--rules FILE]
    onnx-fuse rules check FILE...           prints every `file:line: problem`; exit 2 on any
    onnx-fuse rules explain MODEL --rule NAME [--target T] [--node NODE] [--rules FILE] [--json]
                                            on the model as optimize's fusion stage sees it
"""

from __future__ import annotations

import argparse
import json
import sys

from onnx_fuse.levels import TARGETS


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("rules", help="list, show, check and explain fusion rules",
                       description="Inspect the YAML fusion rules (built-in and your own).")
    p.add_argument("-v", "--verbose", action="count", default=0, help="tracebacks on internal errors")
    rsub = p.add_subparsers(dest="rules_command", metavar="ACTION")
    lp = rsub.add_parser("list", help="list rules: name, level, targets, priority, doc")
    lp.add_argument("--target", choices=TARGETS, help="only rules for this target")
    lp.add_argument("--level", type=int, choices=range(5), metavar="0..4", help="only rules run at this level")
    lp.add_argument("--rules", action="append", default=[], metavar="FILE", help="extra rule file")
    sp = rsub.add_parser("show", help="print one rule's YAML and where it comes from")
    sp.add_argument("name")
    sp.add_argument("--rules", action="append", default=[], metavar="FILE", help="extra rule file")
    cp = rsub.add_parser("check", help="validate rule files; exit 2 on any error")
    cp.add_argument("files", nargs="+", metavar="FILE")
    ep = rsub.add_parser("explain", help="why a rule does or does not match in a model")
    ep.add_argument("model")
    ep.add_argument("--rule", required=True, metavar="NAME")
    ep.add_argument("--target", choices=TARGETS,
                    help="prepare the model as optimize does for this target (default: the rule's first)")
    ep.add_argument("--node", metavar="NODE", help="only this anchor node")
    ep.add_argument("--rules", action="append", default=[], metavar="FILE", help="extra rule file")
    ep.add_argument("--json", action="store_true", help="print the results as JSON")
    ep.add_argument("--raw", action="store_true",
                    help="match the model as loaded (by default it is prepared as optimize prepares it "
                         "for the rules: shape inference, cleanup, the target's passes, and the opset "
                         "upgrade when the rule needs a newer opset)")
    return p


def run(args) -> int:
    action = getattr(args, "rules_command", None)
    if action == "list":
        return _list(args)
    if action == "show":
        return _show(args)
    if action == "check":
        return _check(args)
    if action == "explain":
        return _explain(args)
    print("usage: onnx-fuse rules {list,show,check,explain} ...", file=sys.stderr)
    return 2


def _list(args) -> int:
    from onnx_fuse.rewrite import load_rule_set

    rs = load_rule_set(user_files=args.rules)
    rows = [r for r in rs.ordered() if (args.target is None or args.target in r.targets)
            and (args.level is None or r.level <= args.level)]
    width = max((len(r.name) for r in rows), default=4)
    print(f"{'name':<{width}}  lvl  prio  targets         doc")
    for r in rows:
        print(f"{r.name:<{width}}  {r.level:>3}  {r.priority:>4}  {','.join(r.targets):<14}  {r.doc}")
    print(f"{len(rows)} rule(s)")
    return 0


def _show(args) -> int:
    from onnx_fuse.errors import UserError
    from onnx_fuse.rewrite import load_rule_set

    rs = load_rule_set(user_files=args.rules)
    rule = rs.get(args.name)
    if rule is None:
        raise UserError(f"no rule named {args.name!r}; see `onnx-fuse rules list`")
    print(f"# {rule.file}:{rule.line}{' (built-in)' if rule.builtin else ''}")
    print(rule.source)
    return 0


def _check(args) -> int:
    from onnx_fuse.rewrite import load_file

    total_rules = total_errors = 0
    for f in args.files:
        rules, errors = load_file(f)
        total_rules += len(rules)
        total_errors += len(errors)
        for e in errors:
            print(str(e) if e.file else f"{f}: {e}", file=sys.stderr)
    if total_errors:
        print(f"{total_errors} error(s); {total_rules} rule(s) OK", file=sys.stderr)
        return 2
    print(f"OK: {total_rules} rule(s) in {len(args.files)} file(s)")
    return 0


def _explain(args) -> int:
    from onnx_fuse.api import prepare_for_fusion
    from onnx_fuse.errors import UserError
    from onnx_fuse.model_io import load_model
    from onnx_fuse.rewrite import explain, load_rule_set

    rs = load_rule_set(user_files=args.rules)
    rule = rs.get(args.rule)
    if args.raw or rule is None:  # an unknown rule: explain() names it and suggests close ones
        model = load_model(args.model)
    else:
        target = args.target or rule.targets[0]
        if target not in rule.targets:
            raise UserError(f"rule {rule.name!r} does not run for target {target!r} "
                            f"(its targets: {', '.join(rule.targets)})")
        # the passes before the rules (and the rule's level) as `optimize -O LEVEL --target T` runs them
        model = prepare_for_fusion(args.model, level=max(rule.level, 2), target=target, rules=args.rules)
        if rule.opset_min is not None:
            # optimize raises the opset on demand when a rule like this one fires (targets/onnx.py)
            from onnx_fuse.targets.onnx import UpgradeOpsetPass

            UpgradeOpsetPass(rule.opset_min)(model)
    results = explain(model, rs, args.rule, node=args.node)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
        return 0
    if not results:
        rule = rs.get(args.rule)
        keys = " | ".join(f"{d + '::' if d else ''}{o}" for d, o in rule.anchor_keys) if rule else "?"
        print(f"{args.rule}: no candidate anchors (no {keys} node in the model)")
        return 0
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
        print(r.format())
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    print(f"{args.rule}: {len(results)} candidate(s): {summary}")
    return 0
