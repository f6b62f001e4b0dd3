"""Regression re-run of the hold-out sets: export them, measure them at a revision, compare two runs.

    python tools/holdout_regress.py snapshot REV DIR
    python tools/holdout_regress.py export --sets 49 48 47 [--root /tmp/hold] [--stop-at 01:00] [--snapshot DIR]
    python tools/holdout_regress.py run --label b50 --sets 49 48 47 [--root /tmp/hold] [--snapshot DIR] [--parts out half]
    python tools/holdout_regress.py compare b50 h50 [--root /tmp/hold] [--quiet-leaner]

export: each set's plan (tools/export_corpus.py --holdout N) into ROOT/N/out and, where the set has a
half-precision plan (holdout_specs.HALF*; set 43's is bfloat16), into ROOT/N/half; export_corpus --missing
skips what the part's manifest.json already lists (made or failed) and records failures as it always does.
Each part's log, with a time stamp per line, goes to ROOT/N/<part>.log. --stop-at HH:MM (UTC): start no part
after it.
run: tools/coverage.py --columns ort-O3 onnx-O3 trt-O4 -j 1 over each exported part into
ROOT/results/<label>_<set>_<part>.json; --snapshot DIR runs DIR/tools/coverage.py with PYTHONPATH=DIR/PKG
(a git-archive snapshot laid out as in the helpers' notes), so any revision can be measured on the same exports;
a part whose export is still running (export_corpus's .claim files) is left out and the exit status is 1.
snapshot: `git archive REV` into DIR with DIR/PKG/onnx_fuse linking optimizer/, plugins/, rules/ (a DIR that is
an earlier snapshot is replaced).
compare: cell by cell (set x part x file x column) of two labels' JSONs: regression (a category count fused
fewer, more nodes, verify lost, a crash or a file gone), leaner (fewer nodes or more fused, nothing worse),
equal (the same op histogram), other (same counts and node total, another histogram). Exit status 1 on any
regression.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
from coverage import count_ops  # noqa: E402

COLUMNS = ("ort-O3", "onnx-O3", "trt-O4")
HALF_DTYPE = {11: "bfloat16", 43: "bfloat16"}  # BF16_ARCHS6B, HALF31: bf16 plans; the other sets: float16
CATEGORIES = ("attn", "norm", "rope", "gelu")


def parts(set_no: int) -> list[tuple[str, str]]:
    """[(part, dtype)]: 'out' float32 always, 'half' where the set plans half-precision files."""
    import export_corpus as ec

    out = [("out", "float32")]
    dtype = HALF_DTYPE.get(set_no, "float16")
    if set_no not in ec.HOLDOUT_SETS:
        raise SystemExit(f"error: no hold-out set {set_no}; known: {', '.join(map(str, sorted(ec.HOLDOUT_SETS)))}")
    saved = dict(ec.SPECS)  # plan_holdout reads export_corpus.SPECS, which main() extends as here
    try:
        for earlier in ec.HALF_FROM.get(set_no, ()):
            ec.SPECS.update(ec.HOLDOUT_SETS[earlier])
        ec.SPECS.update(ec.HOLDOUT_SETS[set_no])
        if any(True for _ in ec.plan_holdout(list(ec.SPECS), None, set_no, dtype)):
            out.append(("half", dtype))
    finally:
        ec.SPECS.clear()
        ec.SPECS.update(saved)
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")


def _past(stop_at: str | None) -> bool:
    return bool(stop_at) and datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M") >= stop_at


def _env(snapshot: str | None) -> dict:
    env = dict(os.environ)
    if snapshot:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(snapshot) / "PKG"), env.get("PYTHONPATH")) if p)
    return env


def _tools(snapshot: str | None) -> Path:
    return Path(snapshot) / "tools" if snapshot else TOOLS


def _stream(cmd: list[str], log: Path, env: dict) -> int:
    """Run cmd, its output into log with a UTC time stamp per line (a file's export time is the gap)."""
    with log.open("a") as fh:
        fh.write(f"[{_now()}] $ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in proc.stdout:
            fh.write(f"[{_now()}] {line}")
            fh.flush()
        code = proc.wait()
        fh.write(f"[{_now()}] exit {code}\n")
    return code


def cmd_snapshot(ns) -> int:
    """git archive REV into DIR, with DIR/PKG/onnx_fuse mapping the package as setuptools' package-dir does."""
    dest = Path(ns.dir)
    if dest.exists() and any(dest.iterdir()):
        if not (dest / "PKG" / "onnx_fuse").is_dir():
            print(f"error: {dest} exists and is not a snapshot; give an empty or new folder", file=sys.stderr)
            return 2
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(TOOLS.parent), "archive", ns.rev], capture_output=True)
    if archive.returncode:
        print(f"error: git archive {ns.rev}: {archive.stderr.decode().strip()}", file=sys.stderr)
        return 2
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    pkg = dest / "PKG" / "onnx_fuse"
    pkg.mkdir(parents=True)
    for f in (dest / "optimizer").iterdir():
        (pkg / f.name).symlink_to(f)
    for name in ("plugins", "rules"):
        (pkg / name).symlink_to(dest / name)
    rev = subprocess.run(["git", "-C", str(TOOLS.parent), "rev-parse", "--short", ns.rev], capture_output=True,
                         text=True).stdout.strip()
    print(f"{dest}: {rev} (run with --snapshot {dest})")
    return 0


def cmd_export(ns) -> int:
    root = Path(ns.root)
    for set_no in ns.sets:
        for part, dtype in parts(set_no):
            if _past(ns.stop_at):
                print(f"[{_now()}] past {ns.stop_at}: set {set_no} {part} and later not started", flush=True)
                return 0
            out = root / str(set_no) / part
            out.mkdir(parents=True, exist_ok=True)
            cmd = ["nice", "-n", "5", sys.executable, str(_tools(ns.snapshot) / "export_corpus.py"),
                   "--holdout", str(set_no), "--dtype", dtype, "--missing", "--out", str(out)]
            t0 = datetime.datetime.now()
            code = _stream(cmd, root / str(set_no) / f"{part}.log", _env(ns.snapshot))
            mpath = out / "manifest.json"
            m = json.loads(mpath.read_text()) if mpath.exists() else {}
            print(f"[{_now()}] set {set_no} {part} ({dtype}): {len(m.get('files', {}))} made, "
                  f"{len(m.get('failed', {}))} failed, {(datetime.datetime.now() - t0).seconds} s, exit {code}",
                  flush=True)
    return 0


def cmd_run(ns) -> int:
    root = Path(ns.root)
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    status = 0
    for set_no in ns.sets:
        for part in ns.parts:
            corpus = root / str(set_no) / part
            if not (corpus / "manifest.json").exists() or not json.loads((corpus / "manifest.json").read_text())["files"]:
                continue
            if any(corpus.glob(".*.claim")):  # export_corpus --missing is making a file there
                print(f"[{_now()}] set {set_no} {part}: an export is running there, not measured", flush=True)
                status = 1
                continue
            dest = results / f"{ns.label}_{set_no}_{part}.json"
            cmd = ["nice", "-n", "5", sys.executable, str(_tools(ns.snapshot) / "coverage.py"), "--corpus", str(corpus),
                   "--columns", *ns.columns, "-j", "1", "--json", str(dest), "--label", ns.label]
            code = _stream(cmd, results / f"{ns.label}_{set_no}_{part}.log", _env(ns.snapshot))
            print(f"[{_now()}] {ns.label} set {set_no} {part}: exit {code} -> {dest}", flush=True)
            status = status or code
    return status


# ---- compare ---------------------------------------------------------------------------------------

def _cells(path: Path) -> dict[tuple[str, str], dict | None]:
    """{(file, column): result} of a coverage.py JSON; None where the file or the column crashed."""
    data = json.loads(path.read_text())
    cells = {}
    for row in data["rows"]:
        for col, res in row.get("columns", {}).items():
            cells[(row["file"], col)] = res if "counts" in res else None
        if "error" in row:
            for col in COLUMNS:
                cells[(row["file"], col)] = None
    return cells


def compare_cell(old: dict | None, new: dict | None) -> tuple[str, str]:
    """('regression' | 'leaner' | 'equal' | 'other', why) for one cell."""
    if new is None:
        return ("equal", "crashed on both") if old is None else ("regression", "crashed")
    if old is None:
        return "leaner", "ran (crashed before)"
    oc, nc = count_ops(old["ops"]), count_ops(new["ops"])
    on, nn = sum(old["ops"].values()), sum(new["ops"].values())
    worse = [f"{c} {oc[c]} -> {nc[c]}" for c in CATEGORIES if nc[c] < oc[c]]
    if nn > on:
        worse.append(f"nodes {on} -> {nn}")
    if old["verify"]["passed"] is True and new["verify"]["passed"] is not True:
        worse.append(f"verify lost ({new['verify'].get('reason')})")
    if worse:
        return "regression", ", ".join(worse) + _delta(old["ops"], new["ops"])
    better = [f"{c} {oc[c]} -> {nc[c]}" for c in CATEGORIES if nc[c] > oc[c]]
    if nn < on:
        better.append(f"nodes {on} -> {nn}")
    if new["verify"]["passed"] is True and old["verify"]["passed"] is not True:
        better.append("verified now")
    if better:
        return "leaner", ", ".join(better) + _delta(old["ops"], new["ops"])
    if old["ops"] == new["ops"]:
        return "equal", ""
    return "other", f"nodes {nn}" + _delta(old["ops"], new["ops"])


def _delta(old: dict, new: dict) -> str:
    d = {k: new.get(k, 0) - old.get(k, 0) for k in sorted(set(old) | set(new))}
    d = {k: v for k, v in d.items() if v}
    return " (" + ", ".join(f"{k} {v:+d}" for k, v in d.items()) + ")" if d else ""


def compare(root: Path, old: str, new: str, quiet_leaner: bool = False, out=sys.stdout) -> int:
    results = root / "results"
    olds = {p.name[len(old) + 1:-5]: p for p in results.glob(f"{old}_*.json")}
    news = {p.name[len(new) + 1:-5]: p for p in results.glob(f"{new}_*.json")}
    if not olds:
        print(f"error: no {results}/{old}_*.json", file=sys.stderr)
        return 2
    table, regressions = [], 0
    for key in sorted(olds, key=lambda k: (-int(k.split("_")[0]), k)):
        if key not in news:
            print(f"{key}: no {new} run (not compared)", file=out)
            continue
        oc, nc = _cells(olds[key]), _cells(news[key])
        counts = dict.fromkeys(("equal", "leaner", "other", "regression"), 0)
        for cell in sorted(oc):
            kind, why = compare_cell(oc[cell], nc[cell]) if cell in nc else ("regression", f"not in {new}")
            counts[kind] += 1
            if kind == "regression" or (kind == "leaner" and not quiet_leaner) or kind == "other":
                print(f"{kind.upper():10} {key} {cell[0]} {cell[1]}: {why}", file=out)
        extra = sorted({f for f, _ in nc} - {f for f, _ in oc})
        if extra:
            print(f"{key}: {len(extra)} file(s) only in {new}: {', '.join(extra)}", file=out)
        files = len({f for f, _ in oc})
        table.append(f"| {key.replace('_', ' ')} | {files} | {sum(counts.values())} | {counts['equal']} | "
                     f"{counts['leaner']} | {counts['other']} | {counts['regression']} |")
        regressions += counts["regression"]
    print(f"\n{old} -> {new}\n\n| set | files | cells | equal | leaner | other | regressions |\n"
          "|---|---|---|---|---|---|---|\n" + "\n".join(table), file=out)
    for key in sorted(set(news) - set(olds)):
        print(f"{key}: no {old} run (not compared)", file=out)
    return 1 if regressions else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="export each set's plan into ROOT/N/{out,half}")
    ex.add_argument("--sets", type=int, nargs="+", required=True)
    ex.add_argument("--stop-at", help="HH:MM UTC: start no part after it")
    rn = sub.add_parser("run", help="coverage.py over each exported part into ROOT/results/LABEL_N_PART.json")
    rn.add_argument("--label", required=True)
    rn.add_argument("--sets", type=int, nargs="+", required=True)
    rn.add_argument("--columns", nargs="+", default=list(COLUMNS), choices=COLUMNS)
    rn.add_argument("--parts", nargs="+", default=["out", "half"], choices=["out", "half"])
    for p in (ex, rn):
        p.add_argument("--snapshot", help="a git-archive snapshot (DIR/tools, DIR/PKG/onnx_fuse) to run instead")
    sn = sub.add_parser("snapshot", help="git archive REV into DIR for --snapshot (DIR/PKG/onnx_fuse)")
    sn.add_argument("rev")
    sn.add_argument("dir")
    cp = sub.add_parser("compare", help="cell by cell OLD vs NEW; exit 1 on any regression")
    cp.add_argument("old")
    cp.add_argument("new")
    cp.add_argument("--quiet-leaner", action="store_true", help="do not list the leaner cells")
    for p in (ex, rn, cp):
        p.add_argument("--root", default="/tmp/hold")
    ns = ap.parse_args(argv)
    if getattr(ns, "snapshot", None):
        if not (Path(ns.snapshot) / "PKG" / "onnx_fuse").is_dir():
            print(f"error: {ns.snapshot}/PKG/onnx_fuse not found (see the snapshot recipe)", file=sys.stderr)
            return 2
        sys.path.insert(0, str(_tools(ns.snapshot)))  # the snapshot's plans (export_corpus / holdout_specs)
    if ns.cmd == "snapshot":
        return cmd_snapshot(ns)
    if ns.cmd == "export":
        return cmd_export(ns)
    if ns.cmd == "run":
        return cmd_run(ns)
    return compare(Path(ns.root), ns.old, ns.new, ns.quiet_leaner)


if __name__ == "__main__":
    sys.exit(main())
