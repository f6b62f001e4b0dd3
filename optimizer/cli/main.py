"""The ``onnx-fuse`` command: reads flags, calls the API, maps errors to exit codes.

Exit codes: 0 success, 1 internal failure or failed verification, 2 bad input (one line, no
traceback), 130 interrupted. ``-v`` keeps tracebacks of internal failures.

A reader that leaves early (``onnx-fuse optimize ... | head -1``) does not stop the command: what
it prints afterwards goes nowhere, the work (writing the model) is still done, and the exit code
is the command's own, with nothing said about the pipe, as ``cp``-style tools behave when their
output is not what matters.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback


class PipeSafeStdout:
    """sys.stdout that discards output once the reader has closed the pipe.

    On the first EPIPE, file descriptor 1 is pointed at /dev/null, so the interpreter's final
    flush succeeds too (no "Exception ignored ... BrokenPipeError" at exit).
    """

    def __init__(self, stream) -> None:
        self._stream = stream
        self.broken = False

    def _guard(self, fn, *args):
        if self.broken:
            return None
        try:
            return fn(*args)
        except OSError as exc:  # BrokenPipeError, or EPIPE raised as a plain OSError
            if not isinstance(exc, BrokenPipeError) and exc.errno != errno.EPIPE:
                raise
            self.broken = True
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):
                pass  # not a real file descriptor (captured in tests): dropping output suffices
            return None

    def write(self, text: str) -> int:
        self._guard(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)

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


class OneLineParser(argparse.ArgumentParser):
    """Bad flags get the same one line as every other bad input (exit 2), not argparse's usage
    block; subcommand parsers inherit the class, so each names its own --help."""

    def error(self, message: str):
        self.exit(2, f"error: {message}; see `{self.prog} --help`\n")


def _parser() -> argparse.ArgumentParser:
    from onnx_fuse import __version__

    parser = OneLineParser(prog="onnx-fuse", description="ONNX graph optimizer for "
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
    saved_stdout = sys.stdout
    sys.stdout = PipeSafeStdout(saved_stdout)
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()
        return code
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
    finally:
        sys.stdout = saved_stdout


if __name__ == "__main__":
    sys.exit(main())
