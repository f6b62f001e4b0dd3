"""``onnx-fuse optimize IN -o OUT``: optimize a model, print the report, optionally verify."""

from __future__ import annotations

import argparse
import os

from onnx_fuse.cli.arg_types import non_negative_int

from onnx_fuse.levels import DEFAULT_TARGET, TARGETS


def add_common_optimize_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-O", dest="level", type=int, choices=range(5), default=3, metavar="0..4",
                   help="optimization level (default 3: cleanup, norms/GELU/RoPE, attention)")
    p.add_argument("--target", choices=TARGETS, default=DEFAULT_TARGET,
                   help="which ops to emit: ONNX Runtime contrib ops, standard ONNX, or TensorRT "
                        "plus onnx-fuse plugins (default ort)")
    p.add_argument("--rules", action="append", default=[], metavar="FILE",
                   help="extra YAML rule file; may override a built-in rule by name (repeatable)")
    p.add_argument("--disable", action="append", default=[], metavar="NAME",
                   help="skip the rule or pass with this name (repeatable)")
    p.add_argument("--precision", choices=("fp16", "bf16"), default=None,
                   help="convert weights and compute to fp16/bf16, keeping fp32 islands for norms, "
                        "softmax and shape math; graph inputs/outputs keep their dtype, except "
                        "the paged KV pools (-O4 --target trt), which become fp16/bf16 "
                        "(default: leave float32)")
    p.add_argument("--opset", type=int, default=None, metavar="N",
                   help="highest default-domain opset of the output: the model is raised to N at "
                        "most when a fused op needs it (default 23); below 23 attention becomes "
                        "plain MatMul / Softmax ops instead of Attention-23. A model above N is refused")
    p.add_argument("--verify", action="store_true",
                   help="run original and optimized in ONNX Runtime and compare outputs")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs for --verify (default: random)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed for random verify inputs")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="concrete shape for an input or symbolic dim, e.g. input_ids=2x16 or batch=2")
    p.add_argument("--report", metavar="FILE.json", help="write the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the verdict")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more detail; tracebacks")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("optimize", help="optimize an ONNX model",
                       description="Optimize an ONNX model and write the result atomically.")
    p.add_argument("input", help="input .onnx model (never modified)")
    p.add_argument("-o", "--output", required=True, help="output .onnx path")
    p.add_argument("--external-data", choices=("auto", "yes", "no"), default="auto",
                   help="store weights beside the output in OUTPUT.data (auto: when the input had "
                        "external data or the model is over 2 GB)")
    p.add_argument("--force", action="store_true",
                   help="write the output even when --verify fails (the exit code stays 1)")
    p.add_argument("--kv-cache-dtype", choices=("fp8",), default=None,
                   help="with -O4 --target trt: make the paged KV pools float8e4m3fn (e4m3) with "
                        "float32 per-kv-head scale inputs kv_scale_{k,v}.N; decode-only graphs "
                        "(query length fixed at 1, or bound by --shape sequence=1); --verify compares it at e4m3's tolerance "
                        "(default: the pools keep the model's float type)")
    p.add_argument("--float32-plugins", action="store_true",
                   help="with -O4 --target trt and no --precision: make the plugin ops on float32 "
                        "anyway, to check that form with --verify at float32 tolerance (the NumPy "
                        "reference runs it; TensorRT cannot build it: the kernels take fp16 / bf16). "
                        "Without it float32 attention keeps TensorRT's own ops")
    add_common_optimize_flags(p)
    return p


def run_and_report(args, source, *, progress_label: str) -> tuple[object, int]:
    """Shared by optimize and demo: run with a progress display, print and write the report."""
    from rich.console import Console

    from onnx_fuse.api import optimize
    from onnx_fuse.verify import parse_shapes

    console = Console(stderr=True, quiet=args.quiet)
    shapes = parse_shapes(args.shape)
    with console.status(f"[bold]{progress_label}[/bold]") as status:
        def on_record(record):
            status.update(f"[bold]{progress_label}[/bold]: {record.name} "
                          f"({record.nodes_after} nodes)")

        result = optimize(source, level=args.level, target=args.target, rules=args.rules,
                          disable=args.disable, verify=args.verify, verify_inputs=args.inputs,
                          shapes=shapes, seed=args.seed, on_record=on_record,
                          precision=args.precision,
                          kv_cache_dtype=getattr(args, "kv_cache_dtype", None),
                          float32_plugins=getattr(args, "float32_plugins", False),
                          opset=getattr(args, "opset", None))
    out = Console(quiet=False, highlight=False, soft_wrap=True)
    if args.quiet:
        out.print(result.report.status)
    else:
        result.report.render(out, verbose=bool(args.verbose))
    if args.report:
        result.report.write_json(args.report)
    return result, (0 if result.report.passed else 1)


def check_outputs(args) -> None:
    """Bad output paths are reported before minutes of optimization, not after."""
    from onnx_fuse.errors import UserError
    from onnx_fuse.model_io import check_output_path

    for path, what in ((getattr(args, "output", None), "output model"),
                       (getattr(args, "report", None), "report"),
                       (getattr(args, "save_outputs", None), "outputs")):
        if path is None:   # "" is refused by name, not skipped (--report "") or taken as "."
            continue
        try:
            check_output_path(path, what=what)
        except OSError as exc:  # e.g. a name over the file system's 255 bytes: ENAMETOOLONG
            raise UserError(f"{path}: cannot write the {what} there ({exc.strerror or exc})") from None
    check_clashes(args)


def _same_file(a: str, b: str) -> bool:
    from pathlib import Path

    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)   # a hard link
    except OSError:
        return False


def _weight_files(model: str) -> list[str]:
    """The external-data files ``model`` reads (its skeleton only; none for a plan or a model
    that does not load, which the command then reports itself)."""
    import onnx

    from onnx_fuse.errors import UserError
    from onnx_fuse.external_data import external_info, iter_model_tensors
    from onnx_fuse.model_io import load_proto

    try:
        proto, folder = load_proto(model, check=False, map_weights=True)
    except (UserError, OSError):
        return []
    if folder is None:
        return []
    return sorted({os.path.join(folder, external_info(t).get("location", "")) for t in iter_model_tensors(proto)
                   if t.data_location == onnx.TensorProto.EXTERNAL and external_info(t).get("location")})


def check_clashes(args) -> None:
    """No file the command writes is one it reads (the model, its weights, --rules, --inputs,
    --model) or another it writes: ``--report m.onnx`` replaced the input model with JSON, and
    ``-o x.onnx --report x.onnx`` the output. Special files (/dev/null) may be named twice."""
    from onnx_fuse.errors import UserError
    from onnx_fuse.fileio import is_special_output

    writes = [(p, what) for p, what in ((getattr(args, "output", None), "output model"),
                                        (getattr(args, "report", None), "report"),
                                        (getattr(args, "save_outputs", None), "outputs"))
              if p and not is_special_output(p)]
    if not writes:
        return
    models = [m for m in (getattr(args, "input", None), getattr(args, "source", None),
                          getattr(args, "model", None)) if isinstance(m, str) and m]
    reads = [(m, "the input model") for m in models]
    reads += [(r, "a --rules file") for r in getattr(args, "rules", None) or [] if r]
    if getattr(args, "inputs", None):
        reads.append((args.inputs, "the --inputs file"))
    if any(what != "output model" for _, what in writes):  # save() guards the output model's own
        reads += [(w, "a weights file of the input model") for m in models for w in _weight_files(m)]
    for i, (path, what) in enumerate(writes):
        for other, other_what in [*reads, *((p, f"the {w}") for p, w in writes[:i])]:
            if _same_file(path, other):
                raise UserError(f"{path}: the {what} would overwrite {other_what}; choose another name")


def run(args) -> int:
    import sys
    from pathlib import Path

    from onnx_fuse.errors import UserError

    check_outputs(args)
    if Path(args.output).resolve() == Path(args.input).resolve():
        raise UserError(f"{args.output}: output would overwrite the input model; choose another name")
    result, code = run_and_report(args, args.input, progress_label=f"optimizing {args.input}")
    external = {"auto": None, "yes": True, "no": False}[args.external_data]
    if code == 0 or args.force:
        result.save(args.output, external_data=external, force=args.force)
    if code != 0:
        what = "written anyway (--force)" if args.force else "not written (--force writes it anyway)"
        print(f"error: verification failed ({result.report.verify_failure}); {args.output} {what}",
              file=sys.stderr, flush=True)
    return code
