"""``onnx-fuse run MODEL|PLAN --backend ort|trt [--inputs FILE.npz] [--compare]``."""

from __future__ import annotations

import argparse

from onnx_fuse.cli.arg_types import non_negative_int, tolerance


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run", help="run a model in ONNX Runtime or a plan in TensorRT",
        description="Run MODEL (ONNX Runtime) or PLAN (TensorRT) once and print its outputs. "
                    "--compare checks against a reference with Polygraphy's comparator: --model (or "
                    "MODEL itself) in ORT with graph optimizations off for --backend ort, the "
                    "ONNX model in ORT for --backend trt. Exit 0 (1 when a comparison fails).")
    p.add_argument("source", metavar="MODEL|PLAN", help=".onnx model or TensorRT .plan")
    p.add_argument("--backend", choices=("ort", "trt"), default=None,
                   help="ort (default for .onnx) or trt (default for a plan; a model is built "
                        "first through the engine cache)")
    p.add_argument("--inputs", metavar="FILE.npz", help="input arrays by name (default: random)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="shape for a dynamic input or symbolic dim, e.g. input_ids=2x16, batch=2")
    p.add_argument("--compare", action="store_true", help="compare with the reference")
    p.add_argument("--model", metavar="MODEL.onnx",
                   help="reference model for --compare: for a plan, default the one its sidecar "
                        "names; for --backend ort, e.g. the original of an optimized model "
                        "(default: MODEL itself with graph optimizations off)")
    p.add_argument("--profile", action="extend", nargs="+", default=[],
                   metavar="NAME:MIN,OPT,MAX", help="profiles when a model is built for trt")
    p.add_argument("--rtol", type=tolerance, help="relative tolerance (default per dtype)")
    p.add_argument("--atol", type=tolerance, help="absolute tolerance (default per dtype)")
    p.add_argument("--alias-pools", action="store_true",
                   help="--backend trt: bind each paged-KV pool output (kv_pool_k_out.N) to its "
                        "input's buffer (kv_pool_k.N), the in-place path a server uses "
                        "(default: every output its own buffer)")
    p.add_argument("--save-outputs", metavar="FILE.npz", help="write the outputs")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more detail; tracebacks")
    return p


def run(args) -> int:
    import numpy as np
    from rich.console import Console
    from rich.markup import escape

    from onnx_fuse.plugins.engine_builder import BuildOptions, parse_profiles
    from onnx_fuse.plugins.runner import is_plan, run as run_source
    from onnx_fuse.report import print_table
    from onnx_fuse.verify import parse_shapes

    if args.save_outputs is not None:  # a bad path fails before the run, not after it
        from onnx_fuse.cli.optimize_cmd import check_outputs

        check_outputs(args)
    backend = args.backend or ("trt" if is_plan(args.source) else "ort")
    result = run_source(args.source, backend=backend, inputs=args.inputs, seed=args.seed,
                        shapes=parse_shapes(args.shape), compare=args.compare, model=args.model,
                        rtol=args.rtol, atol=args.atol, alias_pools=args.alias_pools,
                        build_options=BuildOptions(profiles=parse_profiles(args.profile),
                                                   progress=False))
    out = Console(highlight=False, soft_wrap=True)
    for note in result.notes:
        out.print(f"note: {escape(note)}")
    rows = []
    for name, arr in result.outputs.items():
        a = np.asarray(arr)
        num = a.astype(np.float64) if a.size and a.dtype != np.bool_ else None
        stats = (f"{num.mean():.4g}", f"{num.min():.4g}", f"{num.max():.4g}") if num is not None \
            else ("-", "-", "-")
        rows.append((name, "x".join(map(str, a.shape)) or "scalar", str(a.dtype), *stats))
    print_table(out, f"{args.source} on {result.backend} ({result.seconds * 1e3:.2f} ms)",
                ("output", "shape", "dtype", "mean", "min", "max"), rows, right=("mean", "min", "max"))
    if args.save_outputs:
        from onnx_fuse.fileio import output_file, user_write

        with user_write(args.save_outputs, "outputs"), output_file(args.save_outputs) as f:
            np.savez(f, **result.outputs)  # atomic, and to the name given (no .npz appended)
    if result.passed is None:
        return 0
    print_table(out, f"{result.backend} vs {result.reference_name} (polygraphy)",
                ("output", "max abs diff", "atol", "rtol", "result"),
                [(row["name"], f"{row['max_abs']:.3g}", f"{row['atol']:g}", f"{row['rtol']:g}",
                  "PASSED" if row["passed"] else "FAILED") for row in result.comparison])
    out.print("[bold green]PASSED[/bold green]" if result.passed else "[bold red]FAILED[/bold red]")
    return 0 if result.passed else 1
