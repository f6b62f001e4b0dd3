"""Full optimization (-O3) time on a deep decoder: onnx-fuse per target vs onnxscript vs ORT's tool.

The model is transformers' LlamaForCausalLM with ``--layers`` decoder layers of a small width (hidden
64, 4 query / 2 kv heads, head 16, vocab 128: the graph of a deep LLM at a fraction of its weight
bytes, so the time measured is the optimizer's work per node, not weight copying), norm scales
perturbed (trained-like), exported offline with the torch dynamo exporter (dynamic batch and
sequence, attention mask, no cache) into a temp folder or ``--model`` given.

Candidates, each in its own process per round (imports, load and optimization all counted, as a
user's command would pay them; the CPU column is the child's user + system time):
  fuse-ort / fuse-onnx / fuse-trt  ``onnx_fuse.optimize(path, level=3, target=...)``, no verify
  onnxscript                        ``onnxscript.optimizer.optimize`` then ``ort_fusions.optimize_for_ort``
  ort-tools                         ``onnxruntime.transformers.optimizer.optimize_model`` (model_type gpt2,
                                    heads / hidden given, opt_level 0)
Rounds alternate the order; the table shows medians, ratios to fuse-ort, and what each fused
(attention-like ops, norm ops) so a fast tool that fuses nothing is visible as such. A second table
splits onnx-fuse's CPU time: loading the rule set, optimize() and its five costliest passes, save.

    python tools/bench_optimize_time.py [--layers 32] [--rounds 3] [--model PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CANDIDATES = ("fuse-ort", "fuse-onnx", "fuse-trt", "onnxscript", "ort-tools")
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedAttention", "AttentionKV"}
NORM_OPS = {"LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
            "SkipSimplifiedLayerNormalization"}


def export_llama(path: Path, layers: int) -> Path:
    import torch
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
                                   max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    ids = torch.randint(0, 128, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    prog = torch.onnx.export(Logits(model), (ids, mask), dynamo=True, input_names=["input_ids", "attention_mask"],
                             dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    prog.save(str(path), external_data=True)
    return path


def _child(which: str, src: str, out: str) -> None:
    """One candidate in this (fresh) process; prints a JSON line of what it produced."""
    t0 = time.perf_counter()
    phases: dict = {}
    if which.startswith("fuse-"):
        import onnx_fuse
        from onnx_fuse.rewrite import load_rule_set

        c0 = time.process_time()
        load_rule_set(target=which[5:])   # cached: optimize() below reuses it
        phases["rules"] = time.process_time() - c0
        passes: dict = {}
        mark = [time.process_time()]

        def on_record(record) -> None:   # the CPU since the previous record is this pass's
            now = time.process_time()
            passes[record.name] = passes.get(record.name, 0.0) + now - mark[0]
            mark[0] = now

        c0 = mark[0] = time.process_time()
        result = onnx_fuse.optimize(src, level=3, target=which[5:], on_record=on_record)
        phases["optimize"] = time.process_time() - c0
        phases["passes"] = passes
        c0 = time.process_time()
        result.save(out)
        phases["save"] = time.process_time() - c0
    elif which == "onnxscript":
        import onnx_ir as ir
        import onnxscript.optimizer
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        model = ir.load(src)
        onnxscript.optimizer.optimize(model)
        model, _ = optimize_for_ort(model)
        ir.save(model, out, external_data=os.path.basename(out) + ".data")
    elif which == "ort-tools":
        from onnxruntime.transformers import optimizer

        opt = optimizer.optimize_model(src, model_type="gpt2", num_heads=4, hidden_size=64, opt_level=0)
        opt.save_model_to_file(out, use_external_data_format=True)
    else:
        raise SystemExit(f"unknown candidate {which}")
    print(json.dumps({"wall": time.perf_counter() - t0, "phases": phases,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


def count_ops(path: Path) -> dict:
    import onnx

    nodes = onnx.load_model(path, load_external_data=False).graph.node
    return {"nodes": len(nodes), "attention": sum(n.op_type in ATTENTION_OPS for n in nodes),
            "norm": sum(n.op_type in NORM_OPS for n in nodes)}


def run_one(which: str, src: Path, folder: Path) -> dict:
    out = folder / f"{which}.onnx"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", which, str(src), str(out)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:120]}
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "rss_mb": child["rss_mb"], "phases": child.get("phases", {}), **count_ops(out)}


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", type=Path, help="an exported model instead of the Llama export")
    ap.add_argument("--keep", type=Path, help="folder to keep the export and the outputs in")
    ap.add_argument("--only", nargs="+", choices=CANDIDATES, default=list(CANDIDATES))
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.layers < 1:
        ap.error("--rounds and --layers take a positive number")
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        src = a.model or folder / f"llama{a.layers}.onnx"
        if a.model is None and not src.exists():
            t0 = time.perf_counter()
            export_llama(src, a.layers)
            print(f"exported {src.name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        print(f"model: {src.name}, {count_ops(src)['nodes']} nodes", file=sys.stderr)
        runs = {c: [] for c in a.only}
        for r in range(a.rounds):
            order = a.only if r % 2 == 0 else list(reversed(a.only))
            for c in order:
                runs[c].append(run_one(c, src, folder))
                print(f"round {r + 1} {c}: {runs[c][-1]}", file=sys.stderr)
    base = None
    print("| candidate | wall s | CPU s | CPU vs fuse-ort | peak RSS MB | nodes | attention ops | norm ops |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c, rs in runs.items():
        failed = [x["error"] for x in rs if "error" in x]
        if failed:
            print(f"| {c} | failed: {failed[0]} | | | | | | |")
            continue
        wall = statistics.median(x["wall"] for x in rs)
        cpu = statistics.median(x["cpu"] for x in rs)
        if c == "fuse-ort":
            base = cpu
        ratio = f"{cpu / base:.2f}x" if base else "-"
        last = rs[-1]
        print(f"| {c} | {wall:.1f} | {cpu:.1f} | {ratio} | {max(x['rss_mb'] for x in rs)} | {last['nodes']} "
              f"| {last['attention']} | {last['norm']} |")
    print_phases(runs)
    return 0


def print_phases(runs: dict) -> None:
    """onnx-fuse's CPU seconds by phase and its costliest passes (medians over the rounds)."""
    rows = {c: [x["phases"] for x in rs if x.get("phases")] for c, rs in runs.items()}
    rows = {c: ps for c, ps in rows.items() if ps and len(ps) == len(runs[c])}
    if not rows:
        return
    print("\n| onnx-fuse target | rule set load CPU s | optimize CPU s | save CPU s | costliest passes (CPU s) |")
    print("|---|---:|---:|---:|---|")
    for c, ps in rows.items():
        names = {n for p in ps for n in p["passes"]}
        per_pass = {n: statistics.median(p["passes"].get(n, 0.0) for p in ps) for n in names}
        top = sorted(per_pass.items(), key=lambda kv: -kv[1])[:5]
        med = {k: statistics.median(p[k] for p in ps) for k in ("rules", "optimize", "save")}
        print(f"| {c[5:]} | {med['rules']:.2f} | {med['optimize']:.2f} | {med['save']:.2f} | "
              + ", ".join(f"{n} {v:.2f}" for n, v in top) + " |")


if __name__ == "__main__":
    sys.exit(main())
