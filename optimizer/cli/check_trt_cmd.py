"""``onnx-fuse check-trt MODEL``: will TensorRT's ONNX parser accept every node? Exit 0 yes, 1 no."""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "check-trt", help="check that TensorRT can parse a model (no TensorRT needed)",
        description="Check every node against TensorRT's ONNX parser support data and the "
                    "onnx_fuse plugin contracts. Prints offenders with reasons; exits 0 when "
                    "the model is supported, 1 when not.")
    p.add_argument("model", help=".onnx model (external data is not loaded)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more detail; tracebacks")
    return p


def run(args) -> int:
    import json

    from rich.console import Console
    from rich.markup import escape

    from onnx_fuse.report import print_table
    from onnx_fuse.plugins.check_trt import check_model

    result = check_model(args.model)
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
        return 0 if result.supported else 1
    out = Console(highlight=False, soft_wrap=True)
    head = (f"{args.model}: {result.nodes} nodes ({result.plugin_nodes} onnx_fuse plugin), "
            f"checked against {result.library} {result.version} ONNX parser data")
    out.print(escape(head))
    for note in result.notes:
        out.print(f"note: {escape(note)}")
    if result.supported:
        out.print("[bold green]SUPPORTED[/bold green]: every node parses")
        return 0
    print_table(out, "", ("node", "op", "graph", "reason"),
                [(i.node, i.op, i.graph or "main", i.reason) for i in result.issues])
    out.print(f"[bold red]NOT SUPPORTED[/bold red]: {len(result.issues)} offending "
              f"node(s)/tensor(s)")
    return 1
