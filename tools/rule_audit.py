"""Is a rule subsumed? A pytest plugin that re-runs every onnx_fuse.optimize call of the tests with
each audited rule it fired disabled, and logs what changes (docs/rules.md, "The never-fired
built-ins, audited"):

    AUDIT_RULES=names.txt AUDIT_LOG=audit.jsonl PYTHONPATH=tools \
        python -m pytest -q -p rule_audit -p no:cacheprovider tests/rules/test_x.py ...
    python tools/rule_audit.py audit.jsonl        # one line per rule

AUDIT_RULES: rule names, whitespace-separated. Each line of AUDIT_LOG: the rule, the test, target and
level, the fused attention / norm / RoPE / GELU counts with and without it (tools/coverage.py's
count_ops), whether the op histograms are equal, the node counts, verify of the run without it (ORT,
random inputs) and the rules that fired only without it; or the error of that run. A rule whose
every run keeps its counts and nodes is a deletion candidate; the tests' own assertions are not run
twice (the second optimize result is discarded)."""
import json, os, sys
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
RULES = set(open(os.environ["AUDIT_RULES"]).read().split()) if "AUDIT_RULES" in os.environ else set()
LOG = os.environ.get("AUDIT_LOG", "")
_current = {"id": None}


def pytest_runtest_setup(item):
    _current["id"] = item.nodeid


def pytest_configure(config):
    import onnx_fuse
    import onnx_fuse.api
    from coverage import count_ops
    real = onnx_fuse.api.optimize

    def wrapped(model, **kw):
        res = real(model, **kw)
        fires = set(res.report.rule_fires or {}) & RULES
        for r in sorted(fires):
            kw2 = dict(kw)
            dis = kw2.get("disable") or ()
            dis = [dis] if isinstance(dis, str) else list(dis)
            kw2["disable"] = dis + [r]
            kw2["verify"] = True
            kw2.pop("verify_inputs", None)
            row = {"rule": r, "test": _current["id"], "level": kw.get("level"), "target": kw.get("target")}
            try:
                alt = real(model, **kw2)
                row["counts_before"] = count_ops(res.report.ops_after)
                row["counts_after"] = count_ops(alt.report.ops_after)
                row["same_counts"] = row["counts_before"] == row["counts_after"]
                row["same_ops"] = dict(res.report.ops_after) == dict(alt.report.ops_after)
                row["nodes"] = [res.report.nodes_after, alt.report.nodes_after]
                row["verify"] = (alt.report.verify or {}).get("passed")
                row["fires_after"] = sorted(set(alt.report.rule_fires or {}) - set(res.report.rule_fires or {}))
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            with open(LOG, "a") as f:
                f.write(json.dumps(row) + "\n")
        return res

    onnx_fuse.api.optimize = wrapped
    onnx_fuse.optimize = wrapped


def summarize(path: str) -> list[str]:
    """One line per rule: runs, runs that keep the fused counts, node deltas of those, errors."""
    import collections
    by = collections.defaultdict(list)
    for line in open(path):
        row = json.loads(line)
        by[row["rule"]].append(row)
    out = []
    for rule, rows in sorted(by.items()):
        ok = [r for r in rows if "error" not in r]
        same = [r for r in ok if r["same_counts"]]
        deltas = sorted({r["nodes"][1] - r["nodes"][0] for r in same})
        out.append(f"{rule}: {len(rows)} runs, {len(same)} keep the fused counts without it "
                   f"(node deltas {deltas}), {len(rows) - len(ok)} errors")
    return out


if __name__ == "__main__":
    print("\n".join(summarize(sys.argv[1])))
