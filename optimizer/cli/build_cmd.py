"""``onnx-fuse build MODEL -o model.plan``: a TensorRT engine with profiles, sidecar and cache."""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "build", help="build a TensorRT engine (plan) from an ONNX model",
        description="Build a serialized TensorRT engine with optimization profiles. Writes "
                    "PLAN and PLAN.json (builder, GPU, profiles, plugins, hashes, build time); "
                    "an engine cache skips rebuilding identical engines.")
    p.add_argument("model", help="input .onnx model")
    p.add_argument("-o", "--output", required=True, help="output plan file, e.g. model.plan")
    p.add_argument("--profile", action="extend", nargs="+", default=[],
                   metavar="NAME:MIN,OPT,MAX",
                   help="shape range of one input, dims joined by x, e.g. "
                        "input_ids:1x1,4x128,8x512 (NAME:SHAPE fixes it). Naming an input again "
                        "starts the next optimization profile")
    p.add_argument("--timing-cache", metavar="FILE",
                   help="timing cache to read and update (TensorRT only; a no-op in TensorRT-RTX)")
    p.add_argument("--opt-level", type=int, choices=range(6), metavar="0-5",
                   help="builder optimization level (TensorRT default 3)")
    p.add_argument("--workspace", metavar="SIZE", help="workspace memory limit, e.g. 4G, 512M")
    p.add_argument("--version-compatible", action="store_true",
                   help="engine runs on later TensorRT versions (lean runtime)")
    p.add_argument("--hardware-compatible", action="store_true",
                   help="engine runs on every Ampere-or-newer GPU")
    p.add_argument("--no-plugins", action="store_true",
                   help="refuse models that need onnx_fuse plugins instead of registering them")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="engine cache folder (default $ONNX_FUSE_CACHE_DIR/engines or "
                        "~/.cache/onnx-fuse/engines)")
    p.add_argument("--no-cache", action="store_true", help="always build; do not touch the cache")
    p.add_argument("--backend", choices=("tensorrt", "rtx"),
                   help="force full TensorRT or TensorRT-RTX (default: TensorRT if importable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more detail; tracebacks")
    return p


def run(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from onnx_fuse.plugins.engine_builder import (BuildOptions, build_engine, parse_profiles,
                                                  parse_size)

    err = Console(stderr=True, highlight=False)
    options = BuildOptions(
        profiles=parse_profiles(args.profile),
        opt_level=args.opt_level,
        workspace=parse_size(args.workspace),
        version_compatible=args.version_compatible,
        hardware_compatible=args.hardware_compatible,
        plugins=not args.no_plugins,
        timing_cache=args.timing_cache,
        cache_dir="" if args.no_cache else args.cache_dir,
        progress=not args.quiet and err.is_terminal,
        backend=args.backend,
    )
    result = build_engine(args.model, args.output, options,
                          on_note=lambda m: err.print(f"note: {escape(m)}"))
    meta = result.meta
    how = "cache hit" if result.cache_hit else f"built in {meta['build_seconds']:.2f} s"
    print(f"{result.plan} ({meta['plan_bytes']:,} bytes, {how}) with "
          f"{meta['builder']['library']} {meta['builder']['version']}, GPU {meta['gpu']}; "
          f"sidecar {result.sidecar}")
    return 0
