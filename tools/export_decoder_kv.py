"""Export tiny decoders WITH a KV cache into tests/data/models/{llama,gpt2}_kv_dynamo.onnx.

  llama  LlamaForCausalLM (2 layers, hidden 64, 4 query heads / 2 kv heads, head dim 16, vocab 128):
         GQA, RoPE, RMSNorm
  gpt2   GPT2LMHeadModel (2 layers, hidden 64, 4 heads, head dim 16, vocab 128): MHA, learned
         absolute position embeddings, Conv1D (the attention output is merged to [B*S, H*D])

--head-dim 64 writes {llama,gpt2}64_kv_dynamo.onnx instead: hidden 128, 2 query heads (llama: 1 kv
head), intermediate 64, head dim 64, a size the PagedAttention kernels take (the O4 trt paged
lowering refuses head size 16), under 1 MB each.

Random weights from a fixed seed, use_cache=True, dynamo exporter. Interface (the shape of a
decode step of a Hugging Face style KV-cache export):

  inputs   input_ids int64 [batch, sequence]
           attention_mask int64 [batch, past_sequence + sequence]
           past_key_values.{i}.key / .value float32 [batch, Hkv, past_sequence, 16]
  outputs  logits float32 [batch, sequence, 128]
           present.{i}.key / .value float32 [batch, Hkv, past_sequence + sequence, 16]

Kept separate from tools/export_models.py (the prefill exports, use_cache=False). The export is
checked against torch in ONNX Runtime before it is written; a manifest entry goes to
tests/data/models/<name>.json.

    /work/venv/bin/python tools/export_decoder_kv.py [--out tests/data/models] [--arch llama gpt2]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

SEED = 0
LAYERS, HIDDEN, HEADS, VOCAB = 2, 64, 4, 128
KV_HEADS = {"llama": 2, "gpt2": 4}
HEAD_DIM = HIDDEN // HEADS
INTER = 128


def _set_head_dim(d: int) -> str:
    """Switch the module's sizes to head size ``d`` (16 or 64); returns the file-name infix."""
    global HIDDEN, HEADS, HEAD_DIM, INTER, KV_HEADS
    if d == 64:
        HIDDEN, HEADS, HEAD_DIM, INTER, KV_HEADS = 128, 2, 64, 64, {"llama": 1, "gpt2": 2}
        return "64"
    return ""
BATCH, SEQ, PAST = 2, 2, 5  # example shapes (>1 so the exporter keeps the dims dynamic)


def _model(arch: str):
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    if arch == "llama":
        config = tf.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=INTER,
                                vocab_size=VOCAB, max_position_embeddings=128,
                                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS[arch],
                                use_cache=True, tie_word_embeddings=False, attn_implementation="sdpa")
        model = tf.LlamaForCausalLM(config).eval()
    else:
        config = tf.GPT2Config(n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_inner=INTER,
                               vocab_size=VOCAB, n_positions=128, use_cache=True,
                               attn_implementation="sdpa")
        model = tf.GPT2LMHeadModel(config).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():  # distinct random values everywhere (norm weights around 1)
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm = p.ndim == 1 and ("norm" in name or ".ln_" in name or name.startswith("transformer.ln_f"))
            p.copy_(1.0 + 0.1 * noise if (is_norm and name.endswith("weight")) else 0.1 * noise)
    return config, model


def _wrapper(model):
    import torch
    from transformers.cache_utils import DynamicCache

    class DecoderWithCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, past_k0, past_v0, past_k1, past_v1):
            past = (past_k0, past_v0, past_k1, past_v1)  # LAYERS == 2
            cache = DynamicCache(config=model.config)
            for i in range(LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                         use_cache=True, return_dict=True)
            pkv = out.past_key_values
            present = []
            for i in range(LAYERS):
                layer = pkv.layers[i]
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return DecoderWithCache().eval()


def _feeds(batch: int, seq: int, past: int, kv_heads: int):
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    feeds = {"input_ids": torch.randint(0, VOCAB, (batch, seq), generator=g),
             "attention_mask": torch.ones(batch, past + seq, dtype=torch.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = torch.randn(batch, kv_heads, past, HEAD_DIM,
                                                             generator=g)
    return feeds


def export(arch: str, out_dir: Path, infix: str = "") -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    import transformers

    config, model = _model(arch)
    wrapper = _wrapper(model)
    kv_heads = KV_HEADS[arch]
    name = f"{arch}{infix}_kv_dynamo"
    feeds = _feeds(BATCH, SEQ, PAST, kv_heads)
    names = list(feeds)
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    batch = torch.export.Dim("batch", max=64)
    seq = torch.export.Dim("sequence", max=64)
    past = torch.export.Dim("past_sequence", max=64)
    total = torch.export.Dim("total_sequence", max=128)
    dyn = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: total}}
    dyn.update({n: {0: batch, 2: past} for n in names if n.startswith("past_key_values")})
    path = out_dir / f"{name}.onnx"
    args = tuple(feeds[n] for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(wrapper, args, input_names=names, output_names=outputs,
                                 dynamic_shapes=tuple(dyn.get(n) for n in names), dynamo=True,
                                 optimize=True, verbose=False)
        prog.save(str(path), external_data=False)
    proto = onnx.load(str(path))
    if infix:  # the exporter's per-node stack traces are a third of the file: keep it under 1 MB
        for node in proto.graph.node:
            del node.metadata_props[:]
        onnx.save(proto, str(path))
    onnx.checker.check_model(proto)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    max_abs = 0.0
    for b, s, p in ((BATCH, SEQ, PAST), (1, 1, 9), (2, 1, 4), (3, 3, 2)):  # decode and chunks
        f = _feeds(b, s, p, kv_heads)
        with torch.no_grad():
            ref = wrapper(*(f[n] for n in names))
        got = sess.run(None, {n: f[n].numpy() for n in names})
        max_abs = max(max_abs, *(float(np.max(np.abs(g - r.numpy()))) for g, r in zip(got, ref)))
    if max_abs > 1e-4:
        raise SystemExit(f"export does not match torch: max abs diff {max_abs}")
    entry = {
        "file": path.name, "arch": arch, "model_class": type(model).__name__,
        "attn_implementation": "sdpa", "exporter": "dynamo", "use_cache": True,
        "num_layers": LAYERS, "num_heads": HEADS, "num_kv_heads": kv_heads, "head_dim": HEAD_DIM,
        "hidden_size": HIDDEN, "vocab_size": VOCAB, "inputs": names, "outputs": outputs,
        "bytes": path.stat().st_size, "nodes": len(proto.graph.node), "seed": SEED,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "onnx": onnx.__version__, "ort_vs_torch_max_abs": max_abs,
    }
    (out_dir / f"{name}.json").write_text(json.dumps(entry, indent=2) + "\n")
    return entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests/data/models"))
    ap.add_argument("--arch", nargs="*", default=list(KV_HEADS), choices=list(KV_HEADS))
    ap.add_argument("--head-dim", type=int, default=16, choices=[16, 64])
    ns = ap.parse_args(argv)
    infix = _set_head_dim(ns.head_dim)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    for arch in ns.arch:
        entry = export(arch, out, infix)
        print(json.dumps({k: entry[k] for k in ("file", "bytes", "nodes", "ort_vs_torch_max_abs")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
