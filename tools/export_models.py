"""Export the test architectures offline into tests/data/models/ (committed; nothing is downloaded
at test time).

Architectures (transformers, random weights from a fixed seed, tiny configs: 2 layers, hidden 64,
vocab 128, 128 positions):

  bert   BertModel                          encoder, padding mask, erf GELU, LayerNorm
  gpt2   GPT2LMHeadModel, use_cache=False   decoder, causal mask, gelu_new (tanh), Conv1D weights
  llama  LlamaForCausalLM, use_cache=False  decoder, GQA (4 q heads / 2 kv heads), RMSNorm, RoPE

Each is exported with the dynamo exporter (torch.onnx.export(dynamo=True)) for the attention
implementations that give different graphs ("sdpa", the transformers-5 default, and "eager"),
and with the TorchScript exporter (dynamo=False) where it works (BERT only under transformers 5;
GPT-2 and LLaMA fail on aten::diff). Weights are embedded; every file stays well under 2 MB.
A manifest (manifest.json) records config, exporter, versions, inputs and outputs per file.

    /work/venv/bin/python tools/export_models.py [--out tests/data/models] [--only bert_sdpa_dynamo]
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from pathlib import Path

SEED = 0
BATCH, SEQ = 2, 16

COMMON = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, vocab_size=128,
              max_position_embeddings=128)


def _configs():
    import transformers as tf

    return {
        "bert": (tf.BertConfig, tf.BertModel,
                 dict(COMMON, num_attention_heads=4, type_vocab_size=2)),
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel,
                 dict(n_layer=2, n_embd=64, n_head=4, n_inner=128, vocab_size=128, n_positions=128,
                      use_cache=False)),
        # head size 64: one the FusedAttention kernels take (the others have 16)
        "llama64": (tf.LlamaConfig, tf.LlamaForCausalLM,
                    dict(COMMON, hidden_size=128, num_attention_heads=2, num_key_value_heads=1,
                         use_cache=False, tie_word_embeddings=False)),
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM,
                  dict(COMMON, num_attention_heads=4, num_key_value_heads=2, use_cache=False,
                       tie_word_embeddings=False)),
    }


def _inputs(arch: str):
    """Example inputs: int64 ids, a padding mask whose last row is half padded (BERT) or all ones."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, 128, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    if arch == "bert":
        mask[-1, SEQ // 2:] = 0
        return {"input_ids": ids, "attention_mask": mask,
                "token_type_ids": torch.zeros(BATCH, SEQ, dtype=torch.int64)}
    return {"input_ids": ids, "attention_mask": mask}


def _wrap(model, arch: str):
    """Calls the HF model with named tensor inputs and returns plain tensors (no ModelOutput)."""
    import torch

    if arch == "bert":
        class Bert(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids, attention_mask, token_type_ids):
                out = self.m(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids, return_dict=True)
                return out.last_hidden_state, out.pooler_output

        return Bert()

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                          return_dict=True).logits

    return Decoder()


def _randomize(model) -> None:
    """Give every parameter distinct random values (the HF init leaves biases 0 and norm weights 1,
    which hides bias/gamma bugs in a fusion and lets the exporter share one initializer for all)."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.ndim == 1 and ("norm" in name.lower() or name.endswith(("ln_1.weight", "ln_2.weight",
                                                                        "ln_f.weight"))):
                p.copy_(1.0 + 0.1 * noise if name.endswith("weight") else 0.1 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.1 * noise)


def export_one(arch: str, attn: str, exporter: str, out_dir: Path) -> dict:
    import torch
    import transformers

    cfg_cls, model_cls, kw = _configs()[arch]
    torch.manual_seed(SEED)
    config = cfg_cls(**kw, attn_implementation=attn)
    model = model_cls(config).eval()
    _randomize(model)
    feeds = _inputs(arch)
    names = list(feeds)
    wrapper = _wrap(model, arch).eval()
    outputs = ["last_hidden_state", "pooler_output"] if arch == "bert" else ["logits"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    name = f"{arch}_{attn}_{exporter}"
    path = out_dir / f"{name}.onnx"
    args = tuple(feeds[n] for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("sequence", max=128)
            dyn_shapes = {n: {0: batch, 1: seq} for n in names}
            prog = torch.onnx.export(wrapper, args, input_names=names, output_names=outputs,
                                     dynamic_shapes=dyn_shapes, dynamo=True,
                                     optimize=True, verbose=False)
            prog.save(str(path), external_data=False)
        else:
            torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=outputs,
                              dynamic_axes=dyn, dynamo=False, opset_version=17)
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    with torch.no_grad():
        ref = wrapper(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    # Check the export runs in ORT and matches torch, so tests can trust the files.
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {n: feeds[n].numpy() for n in names})
    max_abs = max(float(np.max(np.abs(g - r.numpy()))) for g, r in zip(got, ref))
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "file": path.name,
        "arch": arch,
        "model_class": model_cls.__name__,
        "attn_implementation": attn,
        "exporter": exporter,
        "opset": opset,
        "bytes": path.stat().st_size,
        "nodes": len(proto.graph.node),
        "config": {k: v for k, v in kw.items()},
        "num_layers": kw.get("num_hidden_layers", kw.get("n_layer")),
        "num_heads": kw.get("num_attention_heads", kw.get("n_head")),
        "num_kv_heads": kw.get("num_key_value_heads", kw.get("num_attention_heads", kw.get("n_head"))),
        "hidden_size": kw.get("hidden_size", kw.get("n_embd")),
        "inputs": {n: {"shape": list(feeds[n].shape), "dtype": str(feeds[n].dtype).replace("torch.", ""),
                       "dims": ["batch", "sequence"]} for n in names},
        "outputs": outputs,
        "seed": SEED,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "ort_vs_torch_max_abs": max_abs,
    }


VARIANTS = [("llama64", "sdpa", "dynamo")] + [(a, i, e) for a in ("bert", "gpt2", "llama") for i in ("sdpa", "eager")
            for e in ("dynamo", "torchscript")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests/data/models"))
    ap.add_argument("--only", nargs="*", help="names such as bert_sdpa_dynamo")
    ns = ap.parse_args(argv)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"models": {}}
    failures = manifest.setdefault("failed", {})
    for arch, attn, exporter in VARIANTS:
        name = f"{arch}_{attn}_{exporter}"
        if ns.only and name not in ns.only:
            continue
        try:
            entry = export_one(arch, attn, exporter, out)
        except Exception as exc:
            msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
            print(f"{name}: FAILED {msg}", file=sys.stderr)
            if "-v" in sys.argv:
                traceback.print_exc()
            failures[name] = msg
            manifest["models"].pop(name, None)
            (out / f"{name}.onnx").unlink(missing_ok=True)
            continue
        failures.pop(name, None)
        manifest["models"][name] = entry
        print(f"{name}: {entry['nodes']} nodes, {entry['bytes'] / 1e6:.2f} MB, opset {entry['opset']}, "
              f"ORT vs torch max abs {entry['ort_vs_torch_max_abs']:.2e}")
    manifest["models"] = dict(sorted(manifest["models"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
