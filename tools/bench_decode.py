"""Decode-step benchmark of a KV-cache decoder: the dynamo export vs onnx-fuse vs onnxruntime-genai.

A LLaMA-like decoder (4 layers, hidden 1024, 16 query heads / 4 kv heads of 64, intermediate
2816, vocab 32000; random weights from a fixed seed with norm scales perturbed around 1) is saved
with save_pretrained (nothing downloaded) and turned into three ONNX models of the same weights:

  original  torch.onnx.export(dynamo=True) with a KV cache: input_ids, attention_mask (past + new),
            past_key_values.N.key/value in; logits, present.N.key/value out (float32)
  fused     onnx_fuse.optimize(original, level=3, target="ort", verify=True)
  genai     onnxruntime-genai's model builder (-p fp32 -e cpu), run in its own venv
            (default /work/venvs/genai; the builder needs a tokenizer in the folder, so a small
            word-level one is saved next to the weights)

All three run in plain onnxruntime.InferenceSession (CPU, default graph optimizations, the same
thread count), one new token per step, interleaved round-robin per (batch, past) point; the median
ms per step is printed with its ratio to the original, and the median CPU time of the process per
step (``*_cpu_ms``: on a shared machine the wall time moves with other jobs, the CPU time much
less; use --threads 1 for it to be the step's own work). The logits of fused and genai are checked
against the original's on the same inputs first. --profile PAST adds an ORT profile (time per op
type) of each model at that past length, batch 1.

    python tools/bench_decode.py [--work DIR] [--past 128 512 2048] [--batch 1 4] [--reps 15]
                                 [--threads 2] [--genai-python /work/venvs/genai/bin/python]
                                 [--profile 128 2048] [--extra NAME=MODEL.onnx ...]

--extra adds more candidates of the same weights to the same round-robin (e.g. the onnx-fuse
output of an older commit, to measure a change before/after in one run); each gets its ratio to
the original and to genai.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

SEED = 0
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 4, 1024, 16, 4, 64
INTERMEDIATE, VOCAB, MAX_POS = 2816, 32000, 4096
MODELS = ("original", "fused", "genai")


def build_hf(hf_dir: Path) -> None:
    """LlamaForCausalLM with seeded random weights and a word-level tokenizer, saved to hf_dir."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    torch.manual_seed(SEED)
    config = tf.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                            vocab_size=VOCAB, max_position_embeddings=MAX_POS, use_cache=True,
                            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    model = tf.LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():  # trained-like: no norm scale is exactly one
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                      eos_token="</s>")
    tmp = hf_dir.with_name(hf_dir.name + ".tmp")
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
    tmp.rename(hf_dir)


def export_original(hf_dir: Path, path: Path) -> None:
    """Dynamo export with the cache as graph inputs/outputs (the repo's `kv` style)."""
    import torch
    import transformers as tf
    from transformers.cache_utils import DynamicCache

    model = tf.LlamaForCausalLM.from_pretrained(hf_dir, attn_implementation="sdpa").eval()

    class WithCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, *past):
            cache = DynamicCache(config=model.config)
            for i in range(LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                         use_cache=True, return_dict=True)
            present = []
            for layer in out.past_key_values.layers[:LAYERS]:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    feeds = _feeds(2, 2, 5, torch_tensors=True)  # >1 everywhere so the dims stay dynamic
    names = list(feeds)
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("sequence", max=MAX_POS)
    past, total = torch.export.Dim("past_sequence", max=MAX_POS), torch.export.Dim("total_sequence",
                                                                                   max=2 * MAX_POS)
    dyn = ({0: batch, 1: seq}, {0: batch, 1: total}, tuple({0: batch, 2: past} for _ in names[2:]))
    tmp = path.with_name(f".{path.name}.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(WithCache().eval(), tuple(feeds[n] for n in names), input_names=names,
                                 output_names=outputs, dynamic_shapes=dyn, dynamo=True, verbose=False)
        prog.save(str(tmp), external_data=False)
    os.replace(tmp, path)


def optimize(original: Path, path: Path) -> dict:
    import onnx_fuse

    t0 = time.perf_counter()
    res = onnx_fuse.optimize(str(original), level=3, target="ort", verify=True)
    seconds = time.perf_counter() - t0
    rep = res.report
    if not rep.passed:
        raise SystemExit(f"onnx-fuse verification failed: {rep.verify_failure}")
    res.save(path, external_data=False)
    return {"seconds": round(seconds, 1), "nodes_before": rep.nodes_before, "nodes_after": rep.nodes_after,
            "verify": "PASSED"}


def build_genai(hf_dir: Path, out: Path, python: str) -> None:
    tmp = out.with_name(out.name + ".tmp")
    cmd = [python, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(tmp),
           "-p", "fp32", "-e", "cpu", "-c", str(out.with_name("genai_cache"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if proc.returncode != 0:
        raise SystemExit(f"genai builder failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-3000:]}")
    tmp.rename(out)


def _feeds(batch: int, seq: int, past: int, torch_tensors: bool = False, seed: int = SEED + 1) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(3, VOCAB, (batch, seq), dtype=np.int64),
             "attention_mask": np.ones((batch, past + seq), dtype=np.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal(
                (batch, KV_HEADS, past, HEAD_DIM), dtype=np.float32)
    if torch_tensors:
        import torch

        return {k: torch.from_numpy(v) for k, v in feeds.items()}
    return feeds


def _session(path: Path, threads: int, profile: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _model_feeds(sess, feeds: dict, past: int) -> dict:
    """The common feeds in the names and types one model's graph asks for (genai: position_ids)."""
    import numpy as np

    out = {}
    for inp in sess.get_inputs():
        if inp.name in feeds:
            v = feeds[inp.name]
        elif inp.name == "position_ids":
            b, s = feeds["input_ids"].shape
            v = np.broadcast_to(np.arange(past, past + s, dtype=np.int64), (b, s)).copy()
        else:
            raise SystemExit(f"no feed for input {inp.name} {inp.type} {inp.shape}")
        if inp.type == "tensor(int32)":
            v = v.astype(np.int32)
        out[inp.name] = v
    return out


def check_logits(sessions: dict) -> dict:
    import numpy as np

    worst = {}
    for b, p in ((1, 7), (4, 33), (2, 300)):
        feeds = _feeds(b, 1, p, seed=SEED + 11)
        ref = sessions["original"].run(["logits"], _model_feeds(sessions["original"], feeds, p))[0]
        for name in sessions:
            if name == "original":
                continue
            got = sessions[name].run(["logits"], _model_feeds(sessions[name], feeds, p))[0]
            diff = float(np.max(np.abs(got.reshape(ref.shape) - ref)))
            worst[name] = max(worst.get(name, 0.0), diff)
    return worst


def bench(sessions: dict, batches, pasts, reps: int) -> list[dict]:
    rows = []
    for b in batches:
        for p in pasts:
            feeds = _feeds(b, 1, p)
            mf = {n: _model_feeds(s, feeds, p) for n, s in sessions.items()}
            for n, s in sessions.items():  # warm-up
                for _ in range(3):
                    s.run(None, mf[n])
            names = list(sessions)
            times = {n: [] for n in names}
            cpu = {n: [] for n in names}
            for r in range(reps):  # round-robin; the first model of a round rotates
                for n in names[r % len(names):] + names[:r % len(names)]:
                    c0, t0 = time.process_time(), time.perf_counter()
                    sessions[n].run(None, mf[n])
                    times[n].append((time.perf_counter() - t0) * 1e3)
                    cpu[n].append((time.process_time() - c0) * 1e3)
            med = {n: statistics.median(t) for n, t in times.items()}
            row = {"batch": b, "past": p, **{f"{n}_ms": round(v, 2) for n, v in med.items()},
                   **{f"{n}_x": round(med[n] / med["original"], 3) for n in med if n != "original"}}
            # CPU time of this process per step: what a step costs when other jobs share the cores
            # (with --threads 1 it is the work itself; with more, ORT's spinning workers add to it)
            row |= {f"{n}_cpu_ms": round(statistics.median(c), 2) for n, c in cpu.items()}
            if "genai" in med:
                for n in med:
                    if n not in ("original", "genai"):
                        row[f"{n}_vs_genai"] = round(med[n] / med["genai"], 3)
                        row[f"{n}_cpu_vs_genai"] = round(row[f"{n}_cpu_ms"] / row["genai_cpu_ms"], 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def profile(paths: dict, past: int, threads: int, runs: int, work: Path) -> dict:
    """Kernel time per op type and step, median over `runs` steps at batch 1 (ORT's profiler)."""
    out = {}
    for name, path in paths.items():
        sess = _session(path, threads, profile=str(work / f"prof_{name}_{past}"))
        feeds = _model_feeds(sess, _feeds(1, 1, past), past)
        for _ in range(2 + runs):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
        per_op: dict[str, float] = {}
        run_events = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
        cutoff = run_events[2]["ts"]  # the two warm-up steps are left out
        runs_seen = [e["dur"] for e in run_events[2:]]
        for e in events:
            if (e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
                    and e["ts"] >= cutoff):
                op = e["args"].get("op_name", "?")
                per_op[op] = per_op.get(op, 0.0) + e["dur"]
        n = len(runs_seen)
        top = sorted(per_op.items(), key=lambda kv: -kv[1])
        out[name] = {"past": past, "step_ms": round(statistics.median(runs_seen) / 1e3, 2),
                     "kernels_ms": round(sum(per_op.values()) / n / 1e3, 2),
                     "ops_ms_per_step": {op: round(us / n / 1e3, 3) for op, us in top[:16]}}
        print(json.dumps({name: out[name]}), flush=True)
    return out


def op_counts(path: Path) -> dict:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    counts: dict[str, int] = {}
    for node in m.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/onnx-fuse/bench_decode"))
    ap.add_argument("--past", type=int, nargs="+", default=[128, 512, 2048])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--genai-python", default="/work/venvs/genai/bin/python")
    ap.add_argument("--profile", type=int, nargs="*", default=[], metavar="PAST",
                    help="also profile op types at these past lengths (batch 1)")
    ap.add_argument("--profile-runs", type=int, default=10)
    ap.add_argument("--reoptimize", action="store_true",
                    help="run onnx-fuse again even if WORK/fused.onnx exists (it is cached otherwise)")
    ap.add_argument("--extra", nargs="*", default=[], metavar="NAME=MODEL",
                    help="more candidate models (same weights and interface) in the same round-robin")
    ns = ap.parse_args(argv)
    extra = {}
    for item in ns.extra:
        name, _, path = item.partition("=")
        if not name or not path or name in (*MODELS, *extra) or not Path(path).is_file():
            print(f"bench_decode: --extra wants NAME=MODEL.onnx with a new name and an existing file, "
                  f"got {item!r}", file=sys.stderr)
            return 2
        extra[name] = Path(path)
    bad = [p for p in ns.past + ns.profile if not 0 < p < MAX_POS]
    if bad or min(ns.batch) < 1 or ns.reps < 1:
        print(f"bench_decode: past lengths must be in 1..{MAX_POS - 1}, batch and reps >= 1", file=sys.stderr)
        return 2
    work = Path(ns.work)
    work.mkdir(parents=True, exist_ok=True)
    hf_dir = work / "hf"
    paths = {"original": work / "original.onnx", "fused": work / "fused.onnx",
             "genai": work / "genai" / "model.onnx"}
    if not hf_dir.exists():
        build_hf(hf_dir)
    if not paths["original"].exists():
        export_original(hf_dir, paths["original"])
    if ns.reoptimize or not paths["fused"].exists():
        print(json.dumps({"optimize": optimize(paths["original"], paths["fused"])}), flush=True)
    if not paths["genai"].exists():
        if not Path(ns.genai_python).exists():
            print(f"{ns.genai_python} missing: genai model skipped", file=sys.stderr)
            del paths["genai"]
        else:
            build_genai(hf_dir, paths["genai"].parent, ns.genai_python)
    paths.update(extra)
    for name, path in paths.items():  # the whole op histogram: what one graph has beyond another
        c = op_counts(path)
        print(json.dumps({"ops": name, "nodes": sum(c.values()),
                          **dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))}), flush=True)
    sessions = {n: _session(p, ns.threads) for n, p in paths.items()}
    print(json.dumps({"max_abs_logits_vs_original": check_logits(sessions)}), flush=True)
    bench(sessions, ns.batch, ns.past, ns.reps)
    del sessions
    for past in ns.profile:
        profile(paths, past, ns.threads, ns.profile_runs, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
