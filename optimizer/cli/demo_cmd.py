"""``onnx-fuse demo``: optimize the embedded BERT-style model, verify it and print the report.

The one-command smoke test of an installation: it needs no input file and no network.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from onnx_fuse.cli.optimize_cmd import add_common_optimize_flags, check_outputs


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="optimize a built-in BERT-style model and print the report")
    p.add_argument("-o", "--output", help="also save the optimized demo model here")
    p.add_argument("--layers", type=int, default=2, help="encoder layers (default 2)")
    add_common_optimize_flags(p)
    p.set_defaults(verify=True)
    return p


def run(args) -> int:
    from onnx_fuse.cli.optimize_cmd import run_and_report
    from onnx_fuse.demo_model import build_demo_model

    args.verify = True  # the demo always checks its numbers
    check_outputs(args)
    model = build_demo_model(layers=args.layers)
    result, code = run_and_report(args, model, progress_label="optimizing the demo encoder")
    if args.output and code == 0:
        result.save(args.output)
    elif code == 0:
        with tempfile.TemporaryDirectory() as tmp:
            written = result.save(Path(tmp) / "demo.opt.onnx")
            print(f"saved and reloaded {written[-1].name} ({written[-1].stat().st_size} bytes)")
    return code
