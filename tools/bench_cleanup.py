"""Cleanup (O1) on a BERT-base sized model: onnx-fuse vs onnxscript's optimizer vs onnxslim.

The model is transformers' BertModel with the bert-base config (12 layers, hidden 768, ~110 M
parameters, ~420 MB of float32 weights) and random weights (biases too, so no Add of zeros is
removable), exported offline with the torch dynamo exporter into a temp folder. Two exports:
``raw`` (``optimize=False``: every Shape/Concat/Transpose the exporter emits) and ``default``
(what ``torch.onnx.export(dynamo=True)`` gives users; about 530 nodes).

Each tool does the same job, load -> cleanup -> save (weights external, beside the output), in one
process, interleaved round by round; the table shows medians and ratios to onnx-fuse.

    /work/venv/bin/python tools/bench_cleanup.py [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def export_bert(folder: Path, optimize: bool) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    ids = torch.randint(0, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    path = folder / f"bert_{'default' if optimize else 'raw'}.onnx"
    prog = torch.onnx.export(model, (ids, mask), dynamo=True, optimize=optimize,
                             input_names=["input_ids", "attention_mask"],
                             dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                             "attention_mask": {0: batch, 1: seq}})
    prog.save(str(path), external_data=True)
    return path


def count_nodes(path: Path) -> int:
    import onnx

    return len(onnx.load_model(path, load_external_data=False).graph.node)


def run_onnx_fuse(src: Path, out: Path) -> dict:
    import onnx_fuse

    t0 = time.perf_counter()
    result = onnx_fuse.optimize(src, level=1)
    t1 = time.perf_counter()
    result.save(out)
    t2 = time.perf_counter()
    return {"load": result.report.seconds["load"], "optimize": t1 - t0 - result.report.seconds["load"],
            "save": t2 - t1, "total": t2 - t0}


def run_onnxscript(src: Path, out: Path) -> dict:
    import onnx_ir as ir
    import onnxscript.optimizer

    t0 = time.perf_counter()
    model = ir.load(src)
    t1 = time.perf_counter()
    onnxscript.optimizer.optimize(model)
    t2 = time.perf_counter()
    ir.save(model, out, external_data=out.name + ".data")
    t3 = time.perf_counter()
    return {"load": t1 - t0, "optimize": t2 - t1, "save": t3 - t2, "total": t3 - t0}


def run_onnxslim(src: Path, out: Path) -> dict:
    import contextlib
    import io

    import onnxslim

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its own summary table
        onnxslim.slim(str(src), output_model=str(out), save_as_external_data=True)
    t1 = time.perf_counter()
    return {"load": float("nan"), "optimize": float("nan"), "save": float("nan"), "total": t1 - t0}


TOOLS = {"onnx-fuse O1": run_onnx_fuse, "onnxscript optimize": run_onnxscript,
         "onnxslim": run_onnxslim}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", help="export the models into this folder and reuse them")
    parser.add_argument("--skip", action="append", default=[], help="tool to skip")
    args = parser.parse_args(argv)
    # Import everything up front so import time is not charged to the first tool.
    import onnx_fuse.api  # noqa: F401
    import onnxscript.optimizer  # noqa: F401
    import onnxslim  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        models = {}
        for kind, opt in (("default", True), ("raw", False)):
            path = folder / f"bert_{kind}.onnx"
            if not path.exists():
                t = time.perf_counter()
                export_bert(folder, opt)
                print(f"exported {path.name} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
            models[kind] = path
        rows = []
        for kind, src in models.items():
            times: dict[str, list[dict]] = {t: [] for t in TOOLS if t not in args.skip}
            nodes_after: dict[str, int] = {}
            for r in range(args.rounds):
                for name in times:
                    out_dir = Path(tmp) / f"out_{kind}_{name.split()[0]}_{r}"
                    out_dir.mkdir()
                    out = out_dir / "model.onnx"
                    times[name].append(TOOLS[name](src, out))
                    nodes_after[name] = count_nodes(out)
            base = statistics.median(t["total"] for t in times["onnx-fuse O1"])
            for name, ts in times.items():
                med = {k: statistics.median(t[k] for t in ts) for k in ts[0]}
                rows.append((kind, count_nodes(src), name, nodes_after[name], med, med["total"] / base))
    print("| model | nodes in | tool | nodes out | load s | cleanup s | save s | total s | total vs onnx-fuse |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, n_in, name, n_out, med, ratio in rows:
        cells = [f"{med[k]:.2f}" if med[k] == med[k] else "n/a" for k in ("load", "optimize", "save")]
        print(f"| bert-base {kind} | {n_in} | {name} | {n_out} | {' | '.join(cells)} | "
              f"{med['total']:.2f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
