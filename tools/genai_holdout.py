"""Hold-out 17 (tenth sweep, part A): decoders written by onnxruntime-genai's model builder.

The model builder (``python -m onnxruntime_genai.models.builder``) is how many LLM ONNX files are made
today. Its graphs hold ONNX Runtime contrib ops from the start: GroupQueryAttention over a packed QKV
MatMul with the KV cache, seqlens_k / total_sequence_length and (do_rotary) the cos/sin caches,
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, MatMulNBits (int4). This script makes
tiny random-weight Hugging Face checkpoints (save_pretrained of a small config, every norm weight
perturbed so no norm is a no-op, a word-level tokenizer the builder's processing step accepts), runs
the builder on each for a few precision / execution-provider pairs in the builder's venv, and writes
<arch>__genai_<precision>_<ep>.onnx (weights inlined: one file) plus a manifest.json that
tools/coverage.py reads, usually into /tmp/holdout17:

    tools/genai_holdout.py [--out /tmp/holdout17] [--only llama qwen2 ...] [--variants fp32_cpu int4_cpu ...]
    python tools/coverage.py --corpus /tmp/holdout17 --columns ort-O3 onnx-O3 trt-O4 -j 1

The builder's venv (ONNX_FUSE_GENAI_VENV, default /work/venvs/genai):
    python3 -m venv /work/venvs/genai && /work/venvs/genai/bin/pip install torch==2.13.0 \\
        onnxruntime-genai transformers onnx onnx_ir tokenizers
(seen: onnxruntime-genai 0.18.0, transformers 5.25.0). A build the builder refuses, or a model ONNX
Runtime's CPU provider cannot load and run (the cuda forms hold CUDA-only ops), is recorded under the
manifest's 'failed' with its one-line reason.

The sizes avoid one trap of the builder: it takes any Linear with vocab_size outputs for the LM head,
so the vocabulary differs from every projection width.
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

GENAI_VENV = Path(os.environ.get("ONNX_FUSE_GENAI_VENV", "/work/venvs/genai"))

VOCAB, HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 200, 64, 128, 2, 4, 2, 16
BASE = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
            max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
# arch -> (transformers model_type, config overrides, features)
ARCHS = {
    "llama": ("llama", {}, ["gqa", "rope-full", "rmsnorm", "swiglu"]),
    "mistral": ("mistral", {"sliding_window": None}, ["gqa", "rope-full", "rmsnorm", "swiglu"]),
    "qwen2": ("qwen2", {}, ["gqa", "rope-full", "rmsnorm", "swiglu", "qkv-bias"]),
    "qwen3": ("qwen3", {}, ["gqa", "rope-full", "rmsnorm", "swiglu", "qk-norm"]),
    "phi3": ("phi3", {"original_max_position_embeddings": 128}, ["gqa", "rope-full", "rmsnorm", "swiglu"]),
    # head 32, rotary 16: ORT's GroupQueryAttention wants the half rotary width a multiple of 8
    "phi": ("phi", {"partial_rotary_factor": 0.5, "head_dim": None, "hidden_size": 128, "intermediate_size": 256}, ["gqa", "rope-partial", "layernorm", "gelu"]),
    "gemma": ("gemma", {}, ["gqa", "rope-full", "rmsnorm", "geglu"]),
    "gemma2": ("gemma2", {"sliding_window": 64, "query_pre_attn_scalar": 16}, ["gqa", "rope-full", "rmsnorm",
                                                                                "softcap", "geglu"]),
    "olmo": ("olmo", {}, ["gqa", "rope-full", "layernorm", "swiglu"]),
    "granite": ("granite", {"attention_multiplier": 0.2, "residual_multiplier": 0.5, "embedding_multiplier": 2.0,
                            "logits_scaling": 4.0}, ["gqa", "rope-full", "rmsnorm", "swiglu"]),
}
VARIANTS = ("fp32_cpu", "fp16_cpu", "int4_cpu", "fp16_cuda", "int4_cuda")
EXAMPLE_DIMS = {"batch_size": 2, "sequence_length": 8, "past_sequence_length": 5, "total_sequence_length": 13,
                "kv_cache_dim": HEAD_DIM}

# runs in the builder's venv: argv = [jobs json]; each job makes its checkpoint (once per arch) and
# runs the builder's command line in this process (imports once); a failing job prints its reason
BUILD_SCRIPT = r"""
import json, runpy, sys, traceback, os
import torch, transformers
from tokenizers import Tokenizer, models, pre_tokenizers

def checkpoint(path, model_type, cfg):
    if os.path.exists(os.path.join(path, "config.json")):
        return
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(17)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():   # trained-like: every norm weight and bias away from its no-op value
        for name, p in model.named_parameters():
            if "norm" in name or "layernorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    vocab = {f"t{i}": i for i in range(cfg["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2", pad_token="t0",
                                         unk_token="t0").save_pretrained(path)

for job in json.loads(sys.argv[1]):
    try:
        if os.path.exists(os.path.join(job["out"], "model.onnx")):   # built before (--work kept)
            print("JOB", json.dumps({"name": job["name"], "ok": True}), flush=True)
            continue
        checkpoint(job["hf"], job["model_type"], job["config"])
        sys.argv = ["builder", "-i", job["hf"], "-o", job["out"], "-p", job["precision"], "-e", job["ep"],
                    "-c", job["cache"]]
        runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")
        print("JOB", json.dumps({"name": job["name"], "ok": True}), flush=True)
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
        print("JOB", json.dumps({"name": job["name"], "ok": False, "reason": (text[-1] if text else repr(exc))[:300]}),
              flush=True)
"""


def _config(arch: str) -> dict:
    model_type, over, _ = ARCHS[arch]
    cfg = dict(BASE, **over)
    return {k: v for k, v in cfg.items() if v is not None}


def _io(proto) -> tuple[list[dict], list[dict]]:
    import onnx

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    def dt(vi):
        return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
    inits = {t.name for t in proto.graph.initializer}
    return ([{"name": v.name, "dtype": dt(v), "dims": dims(v)} for v in proto.graph.input if v.name not in inits],
            [{"name": v.name, "dtype": dt(v), "dims": dims(v)} for v in proto.graph.output])


def _manifest_dims(ios: list[dict], variant: str, head_dim: int) -> list[dict]:
    """The builder's symbolic dims as the manifest's example feeds size them: its head size
    'kv_cache_dim' is the head dim (verify's random sizes cannot know it: the file never says), the
    mask and present length past + new, and batch 1: ONNX Runtime 1.32's CPU GroupQueryAttention
    refuses a batch over 1 with several new tokens and a past. The fp16 cpu form (MultiHeadAttention,
    its own causal mask subgraph) runs in ORT 1.32 only without a past (prefill): past 0 there. A
    sliding layer's windowed cache (gemma2) is as long as the others' here (past < window)."""
    past = 0 if variant == "fp16_cpu" else "past_sequence_length"
    named = {"kv_cache_dim": head_dim, "batch_size": 1, "past_sequence_length": past, "past_sliding_length": past,
             "total_sequence_length": "sequence_length" if past == 0 else "past_sequence_length + sequence_length"}
    return [dict(io, dims=[named.get(d, d) for d in io["dims"]]) for io in ios]


def _runs(path: str, entry: dict) -> str | None:
    """None where ONNX Runtime's CPU provider loads and runs the model on the manifest's example
    inputs (tools/coverage.py falls back to them), else why not."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from export_corpus import feeds_from_manifest

    from onnx_fuse.verify import verify

    try:
        res = verify(path, path, inputs=feeds_from_manifest(entry, VOCAB))
        return None if res.get("passed") else "does not match itself on random inputs"
    except Exception as exc:  # noqa: BLE001 -- recorded, not fatal
        text = str(exc).strip()
        return f"{type(exc).__name__}: {text.splitlines()[0][:240] if text else ''}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/holdout17")
    ap.add_argument("--work", default=None, help="checkpoints and raw builder outputs (default: OUT/_work)")
    ap.add_argument("--only", nargs="*", help="architectures whose name contains one of these")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--head-dim", type=int, default=HEAD_DIM,
                    help="attention head size (hidden = 4 heads of it; 64 is what trt-paged-kv pages; phi keeps its own)")
    ns = ap.parse_args(argv)
    if ns.head_dim != HEAD_DIM:
        if ns.head_dim <= 0 or ns.head_dim % 16:
            print("genai_holdout: --head-dim must be a positive multiple of 16 (ORT's rotary half width)", file=sys.stderr)
            return 2
        BASE.update(hidden_size=HEADS * ns.head_dim, head_dim=ns.head_dim, intermediate_size=2 * HEADS * ns.head_dim)
        EXAMPLE_DIMS["kv_cache_dim"] = ns.head_dim
    import onnx

    out = Path(ns.out)
    work = Path(ns.work) if ns.work else out / "_work"
    out.mkdir(parents=True, exist_ok=True)
    archs = [a for a in ARCHS if not ns.only or any(s in a for s in ns.only)]
    jobs = []
    for arch in archs:
        for variant in ns.variants:
            precision, ep = variant.split("_")
            jobs.append({"name": f"{arch}__genai_{variant}", "hf": str(work / "hf" / arch), "model_type": ARCHS[arch][0],
                         "config": _config(arch), "out": str(work / "build" / f"{arch}__{variant}"),
                         "precision": precision, "ep": ep, "cache": str(work / "cache")})
    proc = subprocess.run([str(GENAI_VENV / "bin/python"), "-c", BUILD_SCRIPT, json.dumps(jobs)],
                          capture_output=True, text=True)
    results = {r["name"]: r for r in (json.loads(ln[4:]) for ln in proc.stdout.splitlines() if ln.startswith("JOB "))}
    mpath = out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {
        "about": "Made by tools/genai_holdout.py: onnxruntime-genai model builder outputs of tiny random-weight "
                 "checkpoints; file names <arch>__genai_<precision>_<ep>.onnx.",
        "example_dims": EXAMPLE_DIMS, "files": {}, "failed": {}}
    for job in jobs:
        name = job["name"] + ".onnx"
        res = results.get(job["name"]) or {"ok": False, "reason": f"builder process exit {proc.returncode}: "
                                           + ([ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [""])[0][:240]}
        src = Path(job["out"]) / "model.onnx"
        reason = None if res["ok"] and src.exists() else res.get("reason", "the builder wrote no model.onnx")
        if reason is None:
            proto = onnx.load(str(src))   # external data next to it: inlined (tiny weights, one file)
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
            os.close(fd)
            os.chmod(tmp, 0o644)
            onnx.save(proto, tmp)
            inputs, outputs = _io(proto)
            arch, variant = job["name"].split("__genai_")
            hd = job["config"]["hidden_size"] // HEADS
            reason = _runs(tmp, {"kind": "decoder", "style": "genai", "inputs": _manifest_dims(inputs, variant, hd)})
            if reason is None:
                os.replace(tmp, out / name)
            else:
                Path(tmp).unlink()
        if reason is not None:
            manifest["failed"][name] = reason
            manifest["files"].pop(name, None)
            print(f"{name}: FAILED {reason}", flush=True)
            continue
        precision, ep = job["precision"], job["ep"]
        data = (out / name).read_bytes()
        ops = sorted({f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node})
        manifest["failed"].pop(name, None)
        manifest["files"][name] = {
            "file": name, "arch": arch, "kind": "decoder", "style": f"genai_{precision}_{ep}", "weights": "trained",
            "model_type": ARCHS[arch][0], "ort_model_type": "gpt2", "config": job["config"],
            "num_layers": LAYERS, "num_heads": HEADS, "num_kv_heads": KV_HEADS, "hidden_size": job["config"]["hidden_size"],
            "vocab_size": VOCAB, "features": [*ARCHS[arch][2], "kv-cache", "genai-builder"],
            "precision": precision, "execution_provider": ep, "builder_ops": ops,
            "opset_imports": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
            "inputs": _manifest_dims(inputs, variant, hd),
            "outputs": _manifest_dims(outputs, variant, hd), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        print(f"{name}: {len(data)} bytes, contrib ops {[o for o in ops if '::' in o]}", flush=True)
    tmp = mpath.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, mpath)
    return 0


if __name__ == "__main__":
    sys.exit(main())
