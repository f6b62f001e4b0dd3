"""``onnx-fuse demo``: optimize the embedded BERT-style model, verify it and print the report.

The one-command smoke test of an installation: it needs no input file and no network.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from onnx_fuse.cli.arg_types import demo_layers
from onnx_fuse.cli.optimize_cmd import add_common_optimize_flags, check_outputs


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="optimize a built-in BERT-style model and print the report")
    p.add_argument("-o", "--output", help="also save the optimized demo model here")
    p.add_argument("--layers", type=demo_layers, default=2, help="encoder layers, 1..64 (default 2)")
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
        # The installation's save/load round trip, in a scratch folder that is then removed.
        from onnx_fuse.model_io import load_model

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "demo.opt.onnx"
            written = result.save(path)
            size = sum(p.stat().st_size for p in written)
            nodes = sum(1 for _ in load_model(path).graph)
            print(f"round trip: the optimized model saved ({size} bytes) to a temporary folder and "
                  f"loaded back ({nodes} nodes); nothing kept (-o FILE keeps it)")
    return code
