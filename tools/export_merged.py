"""Export Optimum merged decoders: decoder_model.onnx (no past in, presents out) and
decoder_with_past_model.onnx merged by optimum.onnx.merge_decoders into one model whose If on
``use_cache_branch`` holds both (the decoder_model_merged.onnx that Optimum 1.x wrote for every
decoder; optimum-onnx 0.1 writes one model.onnx for decoders and merges only seq2seq decoders,
with the same function). Weights and shape constants shared by the branches are initializers of
the main graph, every layer is in the branches, under the same value names in both.

Same tiny corpus configs and trained-like weights (tools/corpus_specs.py, export_corpus.perturb) as
the optimum style, built in the Optimum venv (tools/optimum_venv.sh) and saved locally (nothing
from the Hub). Writes <out>/<arch>.onnx and <out>/manifest.json (entries as export_corpus makes
them, style "optimum_merged", attention_blocks counting both branches), so that

    python tools/export_merged.py --out /tmp/merged llama gpt2 qwen2 phi3
    python tools/coverage.py --corpus /tmp/merged --columns ort-O3 onnx-O3 trt-O4 -j 1

--head-dim 64 makes them at head size 64 (corpus_specs.head_dim_64, files <arch>_hd64.onnx), the
sizes PagedAttention takes (-O4 trt pages a merged decoder's cache branch: docs/paged_kv.md).
--corpus writes <arch>__optimum_merged__trained.onnx into tests/data/corpus and its entry into the
corpus manifest (export_corpus's lock and format), for the files the corpus holds (CORPUS_ARCHS,
each under CORPUS_MAX_BYTES; llama with a smaller MLP to fit: CORPUS_CONFIG):

    python tools/export_merged.py --corpus llama gpt2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export_corpus as ec  # noqa: E402


#: the merged decoders in the corpus: two branches of every layer make a file about twice its
#: optimum sibling, so they are held under CORPUS_MAX_BYTES (the corpus's small-file bound)
CORPUS_ARCHS = ("llama", "gpt2")
CORPUS_MAX_BYTES = 300_000
#: config changes for the corpus files: llama's merged file is 322 kB at the corpus config, 298 kB
#: with an MLP of 32 (the graph is the same; only the weights shrink)
CORPUS_CONFIG = {"llama": {"intermediate_size": 32}}


def _merged_export(arch: str, out: str, head_dim: str = "16", config: str = "{}") -> None:
    """Runs inside the Optimum venv. ``config``: JSON of changes to the architecture's config."""
    import transformers as tf
    from optimum.exporters.onnx import export
    from optimum.exporters.tasks import TasksManager
    from optimum.onnx import merge_decoders

    ec.SPECS[arch]["config"] = dict(ec.SPECS[arch]["config"], **json.loads(config))
    with tempfile.TemporaryDirectory() as tmpd:
        hf = Path(tmpd, "hf")
        ec._optimum_save(arch, "trained", str(hf), head_dim)
        model = tf.AutoModelForCausalLM.from_pretrained(hf).eval()
        make = TasksManager.get_exporter_config_constructor("onnx", model, task="text-generation-with-past",
                                                           library_name="transformers")
        paths = []
        for past_in in (False, True):   # decoder_model, decoder_with_past_model
            cfg = make(model.config, use_past=True, use_past_in_inputs=past_in)
            paths.append(Path(tmpd, f"decoder{'_with_past' if past_in else ''}_model.onnx"))
            export(model, cfg, paths[-1], opset=cfg.DEFAULT_ONNX_OPSET)
        merge_decoders(paths[0], paths[1], save_path=out, strict=False)


def export_merged(arch: str, path: Path, head_dim: int = 16, config: dict | None = None) -> dict:
    """``config``: changes to the architecture's config (made here and in the venv alike)."""
    config = config or {}
    ec.SPECS[arch]["config"] = dict(ec.SPECS[arch]["config"], **config)
    py = ec.OPTIMUM_VENV / "bin/python"
    if not py.exists():
        raise RuntimeError(f"no optimum venv at {ec.OPTIMUM_VENV} (run tools/optimum_venv.sh)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    env.pop("VIRTUAL_ENV", None)
    tmp = path.with_name(f".{path.name}.tmp")
    run = subprocess.run([str(py), __file__, "_merged_export", arch, str(tmp), str(head_dim),
                          json.dumps(config)], env=env,
                         capture_output=True, text=True, timeout=900)
    if run.returncode or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise RuntimeError("merged export in the optimum venv: " + ec._last_error(run.stderr))
    ec._strip(tmp)
    os.replace(tmp, path)
    versions = subprocess.run([str(py), "-c", "import importlib.metadata as m, json; print(json.dumps("
                               "{p: m.version(p) for p in ('optimum-onnx', 'optimum', 'transformers',"
                               " 'torch', 'onnx')}))"], capture_output=True, text=True, env=env).stdout
    check, ec.ort_check = ec.ort_check, lambda *_: None   # run below, once the mask is described
    try:
        entry = ec.make_entry(arch, "optimum", "trained", path, {
            "hf_class": ec.SPECS[arch]["model_class"],
            "exporter": {"name": "optimum.exporters.onnx.export + optimum.onnx.merge_decoders",
                         "task": "text-generation-with-past", "file": "decoder_model_merged.onnx",
                         "versions": json.loads(versions or "{}")}})
    finally:
        ec.ort_check = check
    # merge_decoders declares the mask as the no-cache decoder's [batch, sequence_length]; the
    # manifest's feeds (use_cache_branch true) need it over the past too
    for inp in entry["inputs"]:
        if inp["name"] == "attention_mask":
            inp["dims"] = [inp["dims"][0], "past_sequence_length + sequence_length"]
    entry["style"] = "optimum_merged"
    entry["features"] = entry["features"] + ["if-branches"]
    entry["attention_blocks"] = 2 * entry.get("attention_blocks", entry["num_layers"])   # both branches
    entry["ort_check"] = ec.ort_check(path, entry)
    return entry


def _to_corpus(archs) -> int:
    """Each arch's merged decoder into the corpus under its corpus name, its entry into the
    corpus manifest; a file of CORPUS_MAX_BYTES or more is not kept (the manifest untouched)."""
    mpath = ec.OUT / "manifest.json"
    failed = 0
    for arch in archs:
        stem = f"{arch}__optimum_merged__trained"
        path = ec.OUT / f"{stem}.onnx"
        try:
            entry = export_merged(arch, path, 16, CORPUS_CONFIG.get(arch))
        except Exception as exc:  # noqa: BLE001 -- recorded in the manifest's failed list, as export_corpus does
            print(f"{stem}: FAILED {ec._one_line(exc)}", flush=True)
            ec._record(mpath, stem, None, ec._one_line(exc))
            failed += 1
            continue
        if entry["bytes"] >= CORPUS_MAX_BYTES:
            path.unlink()
            print(f"error: {stem}.onnx is {entry['bytes']} bytes, not under {CORPUS_MAX_BYTES}: not kept "
                  "(make its config smaller: CORPUS_CONFIG)", file=sys.stderr)
            failed += 1
            continue
        ec._record(mpath, stem, entry, None)
        print(f"{stem}.onnx: {entry['bytes']} bytes", flush=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_merged_export"]:
        _merged_export(*argv[1:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archs", nargs="+", help="decoder architectures of tools/corpus_specs.py")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path)
    where.add_argument("--corpus", action="store_true",
                       help=f"into {ec.OUT.relative_to(ec.ROOT)} and its manifest ({', '.join(CORPUS_ARCHS)})")
    ap.add_argument("--head-dim", type=int, default=16, choices=[16, 64],
                    help="64: corpus_specs.head_dim_64 (hidden 128, 2 query heads), files <arch>_hd64.onnx, "
                         "for PagedAttention's head sizes (trt -O4)")
    ns = ap.parse_args(argv)
    bad = [a for a in ns.archs if a not in ec.SPECS or ec.SPECS[a]["kind"] != "decoder"
           or ns.head_dim == 64 and a not in ec.KV64_ARCHS]
    if bad:
        print(f"error: not a decoder of tools/corpus_specs.py: {', '.join(bad)}", file=sys.stderr)
        return 2
    if ns.corpus:
        if ns.head_dim != 16 or set(ns.archs) - set(CORPUS_ARCHS):
            print(f"error: --corpus makes the corpus's merged decoders ({', '.join(CORPUS_ARCHS)}) at head "
                  "size 16 only", file=sys.stderr)
            return 2
        return _to_corpus(ns.archs)
    ec.use_head_dim(ns.head_dim, ns.archs)   # the manifest's config as the venv builds it
    ns.out.mkdir(parents=True, exist_ok=True)
    mpath = ns.out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {"files": {}, "failed": {}}
    for arch in ns.archs:
        name = f"{arch}{'_hd64' if ns.head_dim == 64 else ''}.onnx"
        try:
            manifest["files"][name] = export_merged(arch, ns.out / name, ns.head_dim)
            manifest.setdefault("failed", {}).pop(name, None)
            print(f"{name}: {manifest['files'][name]['bytes']} bytes", flush=True)
        except Exception as exc:  # noqa: BLE001 -- one architecture's failure is recorded, not fatal
            manifest["files"].pop(name, None)
            manifest.setdefault("failed", {})[name] = ec._one_line(exc)
            print(f"{name}: FAILED {ec._one_line(exc)}", flush=True)
        tmp = mpath.with_name(".manifest.json.tmp")
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, mpath)
    return 1 if manifest.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
