"""Hold-out 13 (seventh sweep, part B): corpus exports that another tool rewrote before ours.

Users often run a tool before onnx-fuse. This script takes a few corpus exports and writes, for each
tool, <model>__<tool>.onnx plus a manifest.json that tools/coverage.py reads (the corpus entry with the
file, sha256 and the tool added), usually into /tmp/holdout13:

    slim       onnxslim.slim (a project dependency)
    ort1 ort2  ONNX Runtime's offline optimization (SessionOptions.optimized_model_filepath) at
               ORT_ENABLE_BASIC / ORT_ENABLE_EXTENDED (EXTENDED writes FusedMatMul, Gelu,
               SkipLayerNormalization, Attention... on the CPU provider)
    osopt      onnxscript.optimizer.optimize
    osrewrite  onnxscript.rewriter.rewrite (its default rules)
    optO2 optO3 optO4
               Optimum's ORTOptimizer with AutoOptimizationConfig.O2 / O3 / O4 (in the optimum venv,
               /work/venvs/optimum; O4 converts to float16, keep_io_types); only the model types
               Optimum optimizes (bert, gpt2, bart, vit, clip families)
    fp16       onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)

    python tools/pretool_holdout.py [--out /tmp/holdout13] [--only SUBSTR ...] [--tools slim ort2 ...]
    python tools/coverage.py --corpus /tmp/holdout13 --columns ort-O3 trt-O4 onnx-O3

Other inputs: --inputs takes corpus model names, .onnx files and folders (every .onnx file in it); a
file outside the corpus is described by the manifest.json beside it (export_corpus's, e.g. a hold-out
export folder). --set 50 is hold-out 50's plan (SET50: KV-cache decoders and float16 exports, see
SET50's comment). fp16 is skipped on an input that is float16 already (nothing to convert).

A tool that fails on a model is recorded under the manifest's 'failed' with its one-line reason.
'tool_check' says whether the tool's own output matches the corpus original (onnx_fuse.verify), so a
coverage row that fails can be told apart from a tool that already changed the numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests/data/corpus"
OPTIMUM_VENV = Path(os.environ.get("ONNX_FUSE_OPTIMUM_VENV", "/work/venvs/optimum"))

# several architectures and export styles: dynamo / TorchScript / Optimum; encoders, vision, decoders
# with and without a KV cache (MHA, GQA, partial RoPE)
MODELS = ("bert__dyn_mask__trained", "distilbert__torchscript__trained", "bart_encoder__optimum__trained",
          "vit__static_nomask__trained", "clip_vision__dyn_mask__trained", "gpt2__dyn_mask__trained",
          "llama__kv__trained", "mistral__torchscript__trained", "gpt_neox__kv__trained")
TOOLS = ("slim", "ort1", "ort2", "osopt", "osrewrite", "optO2", "optO3", "optO4", "fp16")
# hold-out 50 (session 45): the pre-tools on KV-cache decoders and float16 exports. The corpus's kv files of
# qwen3 / gemma2 (float16) and whisper_decoder / deepseek_v3 (MLA) / glm (GQA, partial rotary) (float32), and
# the float16 kv exports of `export_corpus.py --holdout 50 --dtype float16 --out /tmp/h50/half` with Dia's
# decoder cache (`--holdout 50 --out /tmp/h50/out`); Optimum's O2-O4 left out (none of these model types).
SET50 = {"inputs": ("qwen3__kv__trained16", "gemma2__kv__trained16", "whisper_decoder__kv__trained",
                    "deepseek_v3__kv__trained", "glm__kv__trained", "/tmp/h50/out", "/tmp/h50/half"),
         "tools": ("slim", "ort1", "ort2", "osopt", "osrewrite", "fp16"), "out": "/tmp/h50/pretool"}


def _slim(src: str, dst: str, entry: dict) -> None:
    import onnx
    import onnxslim

    onnx.save(onnxslim.slim(onnx.load(src)), dst)


def _ort(level: str):
    def run(src: str, dst: str, entry: dict) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        so.optimized_model_filepath = dst
        so.log_severity_level = 3
        ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return run


def _osopt(src: str, dst: str, entry: dict) -> None:
    import onnx
    import onnxscript.optimizer

    onnx.save(onnxscript.optimizer.optimize(onnx.load(src)), dst)


def _osrewrite(src: str, dst: str, entry: dict) -> None:
    import onnx
    import onnxscript.rewriter

    onnx.save(onnxscript.rewriter.rewrite(onnx.load(src)), dst)


def _fp16(src: str, dst: str, entry: dict) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(src), keep_io_types=True), dst)


OPTIMUM_SCRIPT = """
import sys, json, pathlib, shutil, tempfile, transformers
from optimum.onnxruntime import ORTOptimizer
from optimum.onnxruntime.configuration import AutoOptimizationConfig
src, dst, level, cls, cfg, model_type = sys.argv[1:7]
config = getattr(transformers, cls)(**json.loads(cfg))
config.model_type = model_type
with tempfile.TemporaryDirectory() as tmp:
    opt = ORTOptimizer([pathlib.Path(src)], config=config)
    opt.optimize(AutoOptimizationConfig.with_optimization_level(level), save_dir=tmp, file_suffix="")
    shutil.copyfile(pathlib.Path(tmp) / pathlib.Path(src).name, dst)
"""


def _optimum(level: str):
    def run(src: str, dst: str, entry: dict) -> None:
        model_type = "clip" if entry["arch"].startswith("clip") else entry["model_type"]  # Optimum's name
        proc = subprocess.run([str(OPTIMUM_VENV / "bin/python"), "-c", OPTIMUM_SCRIPT, src, dst, level,
                               entry["config_class"], json.dumps(entry["config"]), model_type],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode:
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            raise RuntimeError(f"optimum: {tail[0][:300]}")
    return run


RUNNERS = {"slim": _slim, "ort1": _ort("ORT_ENABLE_BASIC"), "ort2": _ort("ORT_ENABLE_EXTENDED"),
           "osopt": _osopt, "osrewrite": _osrewrite, "optO2": _optimum("O2"), "optO3": _optimum("O3"),
           "optO4": _optimum("O4"), "fp16": _fp16}


def _tool_check(original: str, tooled: str) -> dict:
    """Does the tool's output match the corpus original? (fp16 outputs: float16 tolerances)."""
    from onnx_fuse.verify import failure_summary, verify

    try:
        res = verify(original, tooled)
        if not res.get("passed"):
            half = verify(original, tooled, precision="fp16")
            if half.get("passed"):
                return {"passed": True, "precision": "fp16"}
            return {"passed": False, "reason": failure_summary(res)}
        return {"passed": True}
    except Exception as exc:  # noqa: BLE001 -- recorded, not fatal
        return {"passed": None, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def source_path(model: str) -> Path:
    """A corpus model name (no .onnx) or an .onnx file path -> the file."""
    return Path(model) if model.endswith(".onnx") else CORPUS / f"{model}.onnx"


def expand_inputs(inputs) -> list[str]:
    """--inputs: corpus model names, .onnx files and folders (their .onnx files, sorted) -> models for
    write_derived; a file or folder that does not exist, or lacks a manifest.json, is an error."""
    models = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            models += sorted(str(p) for p in path.glob("*.onnx"))
        elif item.endswith(".onnx") or (CORPUS / f"{item}.onnx").exists():
            models.append(item)
        else:
            raise SystemExit(f"error: {item}: not a corpus model, .onnx file or folder")
    for model in models:
        path = source_path(model)
        if not path.exists() or not (path.parent / "manifest.json").exists():
            raise SystemExit(f"error: {path}: missing, or no manifest.json beside it")
        if path.parent != CORPUS and path.name not in json.loads((path.parent / "manifest.json").read_text())["files"]:
            raise SystemExit(f"error: {path}: not in {path.parent / 'manifest.json'}")
    return models


def write_derived(out: Path, models, steps, runners, *, kind: str, about: str, check) -> None:
    """Write ``<model>__<step>.onnx`` for every corpus model x step into ``out`` and keep its
    manifest.json (entries merged into an existing one). ``runners[step](src, tmp, entry)`` writes
    the derived model; ``check(src, dst, entry)`` returns a dict stored as ``tool_check`` (with
    ``"runs": False`` the file is dropped as a failure), plus optional ``extra`` entry fields. A
    step that raises is a recorded failure; files and the manifest are written atomically. Shared
    by this script and tools/quant_holdout.py (``kind`` names the step field: pretool / quant)."""
    out.mkdir(parents=True, exist_ok=True)
    corpus = json.loads((CORPUS / "manifest.json").read_text())
    mpath = out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {
        "about": about, "example_dims": corpus["example_dims"], "files": {}, "failed": {}}
    manifests = {CORPUS: corpus}

    def failed(name: str, reason: str) -> None:
        manifest["failed"][name] = reason
        manifest["files"].pop(name, None)
        print(f"{name}: FAILED {reason}", flush=True)

    for model in models:
        path = source_path(model)
        if path.parent not in manifests:
            manifests[path.parent] = json.loads((path.parent / "manifest.json").read_text())
        entry = manifests[path.parent]["files"][path.name]
        src, model = str(path), path.stem
        source = path.name if path.parent == CORPUS else src
        for step in steps:
            if step == "fp16" and entry.get("dtype") == "float16":
                continue  # the float16 converter has nothing to convert
            name = f"{model}__{step}.onnx"
            dst = out / name
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
            os.close(fd)
            os.chmod(tmp, 0o644)   # mkstemp's 0600 would survive the rename
            try:
                runners[step](src, tmp, entry)
                os.replace(tmp, dst)
            except Exception as exc:  # noqa: BLE001 -- a step that fails is a recorded row
                Path(tmp).unlink(missing_ok=True)
                text = str(exc).strip()
                failed(name, f"{type(exc).__name__}: {text.splitlines()[-1][:300] if text else ''}")
                continue
            result = check(src, str(dst), entry)
            if result.get("runs") is False:  # wrote a model ORT refuses: not an input to measure
                dst.unlink()
                failed(name, f"derived model does not run: {result['reason']}")
                continue
            extra = result.pop("extra", {})
            manifest["failed"].pop(name, None)
            data = dst.read_bytes()
            manifest["files"][name] = dict(entry, file=name, source=source, **{kind: step},
                                           sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                                           **extra, tool_check=result)
            print(f"{name}: {len(data)} bytes, vs original: {result}", flush=True)
    tmp = mpath.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, mpath)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="default /tmp/holdout13 (--set 50: /tmp/h50/pretool)")
    ap.add_argument("--only", nargs="*", help="models whose name contains one of these")
    ap.add_argument("--tools", nargs="*", default=None, choices=TOOLS, help="default: all (--set 50: SET50's)")
    ap.add_argument("--inputs", nargs="*", help="corpus model names, .onnx files or folders (default: MODELS)")
    ap.add_argument("--set", type=int, choices=[13, 50], default=13,
                    help="13: MODELS x TOOLS (the default); 50: SET50 (KV-cache decoders, float16 exports)")
    ns = ap.parse_args(argv)
    plan = SET50 if ns.set == 50 else {"inputs": MODELS, "tools": TOOLS, "out": "/tmp/holdout13"}
    models = expand_inputs(ns.inputs or plan["inputs"])
    models = [m for m in models if not ns.only or any(s in Path(m).name for s in ns.only)]
    ns.tools = ns.tools or list(plan["tools"])
    ns.out = ns.out or plan["out"]
    write_derived(Path(ns.out), models, ns.tools, RUNNERS, kind="pretool",
                  about="Made by tools/pretool_holdout.py: exports rewritten by another tool first; "
                        "file names <model>__<tool>.onnx (source: the input file).",
                  check=lambda src, dst, entry: _tool_check(src, dst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
