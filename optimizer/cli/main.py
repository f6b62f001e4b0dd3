"""The ``onnx-fuse`` command: reads flags, calls the API, maps errors to exit codes.

Exit codes: 0 success, 1 internal failure or failed verification, 2 bad input (one line, no
traceback), 130 interrupted. ``-v`` keeps tracebacks of internal failures.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

# Subcommand -> module exposing add_parser(subparsers) and run(args) -> int. Modules import their
# heavy dependencies inside run(), so `onnx-fuse --help` stays fast and works without TensorRT.
COMMANDS = {
    "optimize": "onnx_fuse.cli.optimize_cmd",
    "demo": "onnx_fuse.cli.demo_cmd",
    "rules": "onnx_fuse.cli.rules_cmd",
    "build": "onnx_fuse.cli.build_cmd",
    "check-trt": "onnx_fuse.cli.check_trt_cmd",
    "run": "onnx_fuse.cli.run_cmd",
}


def _parser() -> argparse.ArgumentParser:
    from onnx_fuse import __version__

    parser = argparse.ArgumentParser(prog="onnx-fuse", description="ONNX graph optimizer for "
                                     "transformer and LLM inference.")
    parser.add_argument("--version", action="version", version=f"onnx-fuse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # a command whose module is not part of this build
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from onnx_fuse.errors import OnnxFuseError, UserError

    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    verbose = getattr(args, "verbose", 0)
    try:
        return int(args._run(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OnnxFuseError as exc:
        if verbose:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback; "
              "please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
