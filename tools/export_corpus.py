"""Export the fusion corpus: tiny transformers models in the styles users export, into tests/data/corpus/.

Each file is `<arch>__<style>__<weights>.onnx`; tests/data/corpus/manifest.json records how it was
made (config, class, exporter and versions, opset, inputs/outputs with dims, features, sha256, bytes,
the ONNX Runtime check) and, under "failed", what could not be exported with a one-line reason.

Architectures: tools/corpus_specs.py. Styles:
  dyn_mask       torch.onnx.export(dynamo=True), dynamic batch/sequence, attention_mask where taken
  static_nomask  dynamo, static shapes, no attention_mask
  kv             dynamo, decoders with a KV cache (past_key_values.N.key/value in, present.N.* out)
  optimum        optimum-cli export onnx in /work/venvs/optimum (tools/optimum_venv.sh): models are
                 built there from the same config and saved locally; nothing comes from the Hub
  torchscript    torch.onnx.export(dynamo=False), opset 17, dynamic axes
  torchscript_kv the same, decoders with a KV cache (the kv style's interface)
Seq2seq decoders (kind seq2seq_decoder: T5 / BART / Whisper) take encoder_hidden_states (and an
encoder_attention_mask) instead of running the encoder; their kv style also takes the cross-attention
keys/values (past_key_values.N.encoder.*, as Optimum's decoder_with_past_model.onnx, which is the
file their optimum style keeps) and returns the self-attention cache (present.N.decoder.*).
Weights: "trained" (every constant-initialised parameter, norm scales and biases perturbed; seeded)
for every style; "default" (plain seeded init) for dyn_mask of corpus_specs.DEFAULT_WEIGHTS.
--dtype float16 exports the decoders from the model in float16 (perturbed in fp32, then .half()'d; Optimum:
--dtype fp16), as real LLM exports are made: the weights tag gets a suffix (trained16) so the name stays
`<arch>__<style>__<weights>.onnx`, and the manifest entry records "dtype". HF's code then writes the
Casts an fp32 export lacks (RMSNorm's fp32 upcast, softmax in fp32, the fp16 mask minimum).

Node metadata (the dynamo exporter's stack traces) and doc strings are stripped to keep the
corpus small; the graph is otherwise what the exporter wrote. Every file is loaded and run in ONNX
Runtime (CPU) on inputs built from the manifest, and compared with torch for our own exports.

    python tools/export_corpus.py [--only ARCH ...] [--styles STYLE ...] [--weights W ...] [--list]

--head-dim 64 exports the same architectures at head size 64 (corpus_specs.head_dim_64: hidden 128,
2 query heads), file names `<arch>_hd64__<style>__<weights>.onnx`, into --out (the trt O4 paged-KV
coverage matrix of docs/paged_kv.md; not part of the corpus).

--holdout plans the hold-out set of tools/holdout_specs.py instead (architectures and export styles
the rules were not tuned on: noopt = dynamo optimize=False, latest_opset / kv_latest_opset = opset
23), usually into --out /tmp/holdout; a few of its files are in the corpus (one style each).
--holdout 2 plans the second sweep (holdout_specs.HOLDOUT2: rotary encoders, MoE / hybrid decoders,
windowed and 2-D-rope vision, audio encoders (kind audio: raw input_values), and the corpus
decoders' export forms static_cache (transformers' StaticCache as inputs, index_copy_ writes at
cache_position) and converted_half (fp16 after export, keep_io_types); with --dtype float16 its
fp16 files (HALF_ARCHS2), usually into --out /tmp/holdout2 (docs/holdout.md).
--holdout 3 plans the third sweep (holdout_specs.HOLDOUT3: hybrid linear-attention decoders, differential
and dynamic-mask attention, interleaved M-RoPE, causal / grouped-conv text encoders, 2-D RoPE and
spatial-reduction vision encoders) in the corpus's export styles, usually into --out /tmp/holdout3.
--holdout 4 plans the fourth sweep's part A (holdout_specs.HOLDOUT4): the architectures of sweeps 1-3 that
optimum-onnx exports, in the optimum style only, usually into --out /tmp/holdout4.
--holdout 5 plans the fourth sweep's part B (holdout_specs.HOLDOUT4B): corpus architectures as transformers
4.38 and 4.45 wrote them (styles legacy, legacy_kv, legacy_sdpa, legacy_sdpa_kv: TorchScript, eager or SDPA
attention, tuple caches), each exported by export_torch inside that version's venv (tools/export_venv.sh
--transformers VERSION), usually into --out /tmp/holdout5.
--holdout 6 plans the fifth sweep's part A (holdout_specs.HOLDOUT5A): decoder architectures of transformers
5.24 that no set above has (MLA, attention sinks, partial / per-layer-type rotary, qk- and v-norms, AltUp,
GPT-1 / CTRL / XLM) in the corpus's own styles, usually into --out /tmp/holdout6.
--holdout 8 plans the fifth sweep's part C (holdout_specs.HOLDOUT5C): corpus architectures exported by torch
2.9.1 and 2.14.1 (exporter drift; transformers as in the corpus), each inside that torch's venv
(tools/export_venv.sh --torch VERSION) by the same hand-off, usually into --out /tmp/holdout8.
--holdout 11 plans the sixth sweep's part B (holdout_specs.HOLDOUT6B): corpus architectures exported beside
onnxscript 0.6.0 and 0.6.2 (torch 2.13, transformers 5.24), each inside that onnxscript's venv
(tools/export_venv.sh --onnxscript VERSION) by the same hand-off; with --dtype bfloat16 its bf16
decoders (BF16_ARCHS6B, main venv), usually into --out /tmp/holdout11.
--holdout 7 plans the fifth sweep's part B (holdout_specs.HOLDOUT5B): encoders, vision, audio and seq2seq parts
of transformers 5.24 no earlier set has, in the corpus's styles (kind features: log-mel frames
[batch, frames, bins] in), usually into --out /tmp/holdout7.
--holdout 9 plans the fifth sweep's part D (holdout_specs.HOLDOUT5D): corpus architectures as transformers
4.48 and 4.53 wrote them, part B's styles plus legacy_dynamo / legacy_dynamo_kv (the dynamo exporter), by
the same hand-off (tools/export_venv.sh --transformers VERSION), usually into --out /tmp/holdout9; with
--dtype float16 the float16 exports of its decoders of the earlier sweeps' fp16 architectures (HALF5D), the
dtype handed to the venv.
--holdout 10 plans the sixth sweep's part A (holdout_specs.HOLDOUT6A): decoder architectures of transformers
5.24 that no set above has (MLA without MoE, sparse-attention indexers, recurrent layer loops, per-layer head
sizes, mu-P multipliers, conv / linear-attention hybrids) in the corpus's own styles, usually into
--out /tmp/holdout10.
--holdout 12 plans the seventh sweep's part A (holdout_specs.HOLDOUT7A): encoders, seq2seq parts, speech and
vision towers of transformers 5.24 that no set above has (LongT5, Switch Transformers, T5Gemma, Pix2Struct's
text decoder, Marian / M2M-100 / NLLB-MoE encoders, DeBERTa, SpeechT5, Moonshine, Parakeet, Hiera, SAM,
Idefics3, MLCD, MobileViT) and a static Jamba, usually into --out /tmp/holdout12.
--holdout 14 plans the eighth sweep's part A (holdout_specs.HOLDOUT8A): attention written by hand in PyTorch
(tools/handwritten_models.py: nanoGPT / timm / torch.nn / einsum / reference-Llama idioms, ALiBi, sliding
windows, bucketed relative positions, QK-norm), usually into --out /tmp/holdout14.
--holdout 21 plans the thirteenth sweep (holdout_specs.HOLDOUT13A): corpus architectures exported with the options
people set (holdout_specs.EXPORT_OPTIONS: output_attentions / output_hidden_states outputs, static shapes with a
mask, pruned heads, batch 1, one new token with a cache), usually into --out /tmp/sweep13.
--holdout 22 plans the fourteenth sweep (holdout_specs.HOLDOUT14A): corpus architectures with PEFT adapters exported
unmerged (LoRA, DoRA, IA3, LoKr, LoHa, prompt / P- / prefix tuning; the peft package of the bench extra), usually
into --out /tmp/sweep14.
--holdout 23 plans the fifteenth sweep's part A (holdout_specs.HOLDOUT15A): corpus decoders with the rotary
configurations transformers 5.25 spells in rope_parameters (linear, dynamic NTK, yarn, longrope, llama3, unusual
bases, partial and interleaved rotary, an explicit head_dim), usually into --out /tmp/sweep15a.
--holdout 32 plans the twentieth sweep (holdout_specs.HOLDOUT20): corpus architectures in their corpus styles
exported by torch 2.15.0 (transformers 5.24.0), inside that torch's venv (tools/export_venv.sh --torch 2.15.0) by
the --holdout 8 hand-off or run by that venv's python, usually into --out /tmp/sweep27/h32.
--holdout 33 plans the twenty-first sweep (holdout_specs.HOLDOUT21): hold-out 32's architectures and styles exported
by transformers 5.25.0 (<arch>_tf525; a process with another transformers hands them to /work/venvs/tf525, made by
tools/export_venv.sh --transformers 5.25.0) and 10 architectures no set had, usually into --out /tmp/sweep28/h33.
--holdout 36 plans the twenty-fourth sweep (holdout_specs.HOLDOUT24): encoder / vision / speech families of earlier
sets as transformers 4.45.2 / 4.53.3 wrote them (legacy / legacy_sdpa, by the --holdout 5 hand-off), usually into
--out /tmp/drift32.
--holdout 37 plans the twenty-fifth sweep (holdout_specs.HOLDOUT25): transformers 5.25 families no set had (mBART /
Pegasus encoders, BLIP text, ConvNeXt family, FocalNet, MobileViT V2, Phi-4-multimodal, RWKV, xLSTM, RF-DETR /
LW-DETR, Perceiver), usually into --out /tmp/h37; --dtype float16 the text models of holdout_specs.HALF25.
--holdout 38 plans the twenty-sixth sweep (holdout_specs.HOLDOUT26): transformers 5.25 families earlier sets passed
over (HY-V4-VL text, Inkling 2 Loop, Zamba, Mamba-2, SigLIP 2 / AIMv2 / VideoPrism / SAM 3 Lite text towers,
Nemotron 3.5 ASR, OmniASR, CLAP's audio tower, TimesFM 2.5, SwiftFormer), usually into --out /tmp/h38.
--holdout 39 plans the twenty-seventh sweep (holdout_specs.HOLDOUT27): transformers 5.25 families earlier sets passed
over (Qwen3-Omni / Qwen2.5-Omni talkers, Higgs Audio v2, BLT's global transformer, Granite Speech Plus, PoolFormer,
X-CLIP / OWLv2 vision, Muse Spark audio, BiT, CHMv2), usually into --out /tmp/h39; --dtype float16
holdout_specs.HALF27 (its text models and hold-out 38's, read through holdout_specs.HALF_FROM).
--holdout 40 plans the twenty-eighth sweep (holdout_specs.HOLDOUT28): transformers 5.25 families earlier sets passed
over (Voxtral Realtime's text decoder, T5Gemma 2's and FLAVA's text encoders, the vision towers of Gemma 4, Cohere
Compass, GLM-OCR, Muse Spark, Step 3.7 and Ovis 2, PP-OCRv5's recognizer, EfficientLoFTR, MobileNetV2, RegNet),
usually into --out /tmp/h40; --dtype float16 holdout_specs.HALF28.
--holdout 41 plans the twenty-ninth sweep (holdout_specs.HOLDOUT29): transformers 5.25 families earlier sets passed
over (TextNet, EfficientNet, MobileNetV1, PP-OCRv6's small and tiny recognizers, the vision towers of GLM-5 Next and
Qwen4-Exp, BLIP-2's Q-Former, MetaCLIP 2's text tower), usually into --out /tmp/h41; --dtype float16 holdout_specs.HALF29.
--holdout 43 plans the thirty-first sweep (holdout_specs.HOLDOUT31): hold-outs 38-41's families in the export styles
the corpus has one or two files of (converted_half, latest_opset, kv_latest_opset, noopt, torchscript_kv; the headless
talkers' caches return their last hidden state, _first_output), usually into --out /tmp/h43; --dtype bfloat16
holdout_specs.HALF31 (each decoder in the styles it names).
--holdout 44 plans the thirty-second sweep (holdout_specs.HOLDOUT32): transformers 5.25 model types no set covers
(TimesFM 1.0, T5Gemma 2's decoder, Dots.3 Note's audio encoder, the vision towers of Molmo 2 and MiniMax M3-VL,
LXMERT, BROS, VITS's text encoder), usually into --out /tmp/h44; --dtype float16 holdout_specs.HALF32.
--holdout 45 plans the thirty-third sweep (holdout_specs.HOLDOUT33): the backbones of Gradium Phonon TTS and Pocket
TTS, UDOP's encoder, Janus's VQ image tokenizer, Dia's text encoder, usually into --out /tmp/h45; --dtype float16
holdout_specs.HALF33.
--holdout 46 plans the thirty-fourth sweep (holdout_specs.HOLDOUT34): DeepSeek-OCR 2's vision pipeline (SAM ViT +
hybrid-mask query encoder), Florence-2's DaViT backbone, the patch towers of HY-V4-VL and GLM-Image, Mllama's tiled
vision tower (aspect ratio ids and a tile mask in), usually into
--out /tmp/h46; --dtype float16 holdout_specs.HALF34.
--holdout 47 plans the thirty-fifth sweep (holdout_specs.HOLDOUT35): Muse Glimmer's DFlash drafter (context keys /
values, no mask: spec no_mask), Moshi's depth decoder (per-position weights), BLT's local decoder (cross-attention
to patch states), usually into --out /tmp/h47; --dtype float16 holdout_specs.HALF35.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_specs import DEFAULT_WEIGHTS, KV64_ARCHS, SPECS, head_dim_64  # noqa: E402
from holdout_specs import (BF16_ARCHS6B, HALF5D, HALF9B, HALF23, HALF_ARCHS2, HOLDOUT, HOLDOUT2, HOLDOUT3, HOLDOUT4, HOLDOUT4B,  # noqa: E402
                           HALF25, HALF27, HALF28, HALF29, HALF30, HALF31, HALF32, HALF33, HALF34, HALF35, HALF36, HALF37, HALF38, HALF_FROM, HOLDOUT5C, HOLDOUT6B, EXPORT_FEATURES, EXPORT_OPTIONS,
                           HOLDOUT_SETS, HOLDOUT_STYLES, LEGACY_ATTN, LEGACY_VERSIONS, STATIC_CACHE_LEN,
                           STYLE_ARCHS, STYLE_ARCHS2)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests/data/corpus"
OPTIMUM_VENV = Path(os.environ.get("OPTIMUM_VENV", "/work/venvs/optimum"))
LEGACY_VENVS = Path(os.environ.get("LEGACY_VENVS", "/work/venvs"))  # tf438/, tf445/ (tools/legacy_venv.sh),
# torch291/, torch2141/, torch2130_os060/ (tools/export_venv.sh --torch / --onnxscript)
DTYPES = {"float32": "", "float16": "16", "bfloat16": "bf16"}  # export dtype -> weights-tag suffix (trained16)
OPTIMUM_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# ORT vs torch in the export check: max abs diff (fp16 / bf16: over max(1, max |torch output|); bf16 has
# 8x float16's epsilon)
CHECK_TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 1.6e-1}
STYLES = ("dyn_mask", "static_nomask", "kv", "optimum", "torchscript", "torchscript_kv")
KV_STYLES = ("kv", "torchscript_kv", "kv_latest_opset", "static_cache", "legacy_kv", "legacy_sdpa_kv",
             "legacy_dynamo_kv", "decode_one")
# hold-out styles over a cache style (holdout_specs.PEFT_STYLES' lora_kv, ...) take its inputs and wrapper
KV_STYLES += tuple(s for s, (base, _) in HOLDOUT_STYLES.items() if base in KV_STYLES and s not in KV_STYLES)
SEED = 0
BATCH, SEQ, PAST = 2, 8, 5
AUDIO_SAMPLES = 400  # kind audio: waveform samples (the conv stack of holdout_specs.AUDIO makes 39 frames)
# example sizes for symbolic dims, by the names dynamo (ours) and Optimum give them
DIM_VALUES = {"batch": BATCH, "batch_size": BATCH, "sequence": SEQ, "sequence_length": SEQ,
              "past_sequence": PAST, "past_sequence_length": PAST, "total_sequence": PAST + SEQ,
              "encoder_sequence_length": SEQ, "num_channels": 3, "height": 32, "width": 32,
              "encoder_sequence": SEQ - 2, "decoder_sequence_length": SEQ, "past_decoder_sequence_length": PAST,
              "visual_seq_length": SEQ - 2,  # Optimum's VisualBERT: the visual embeddings' count
              "sequence_len": SEQ}  # the sequence's Dim where a derived dim reads it (_dynamic_shapes)
CROSS = ("seq2seq_decoder",)  # kinds that take encoder_hidden_states (cross-attention)


def _one_line(exc: BaseException) -> str:
    outer = type(exc).__name__
    while exc.__cause__ is not None:  # the exporters wrap the real reason
        exc = exc.__cause__
    if type(exc).__name__ != outer:
        outer = f"{outer} <- {type(exc).__name__}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{outer}: {first[:300]}"


# ---- models ---------------------------------------------------------------------------------

def perturb(model, seed: int = SEED) -> list[str]:
    """Trained-like weights: every bias -> 0.1*randn, every parameter initialised to a constant
    (norm scales, layer scales, zero-init vectors) -> c + 0.1*randn. Returns the names touched."""
    import torch

    g = torch.Generator().manual_seed(seed)
    touched = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.is_floating_point():
                continue
            noise = torch.randn(p.shape, generator=g)
            flat = p.detach().reshape(-1)
            if name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif flat.numel() and bool(torch.all(flat == flat[0])):
                p.copy_(flat[0] + 0.1 * noise)
            else:
                continue
            touched.append(name)
    return touched


@contextlib.contextmanager
def _nan_filled_empty():
    """torch.empty fills floats with NaN while the model is built (torch's deterministic mode), so a parameter its
    init never writes is found, not left as whatever memory held (varying run to run)."""
    import torch
    import torch.utils.deterministic as det

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        det.fill_uninitialized_memory = before[2]


def _init_left_params(model, std: float, seed: int = SEED) -> list[str]:
    """Parameters the model's init left unwritten (NaN after _nan_filled_empty) get normal(0, std): transformers
    initialises some sub-models only inside their parent (Qwen3-Omni's talker built alone: its experts'
    gate_up_proj / down_proj are torch.empty). Returns their names."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    left = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point() and bool(torch.isnan(p).all()):
                p.copy_(std * torch.randn(p.shape, generator=g))
                left.append(name)
    return left


def build_model(arch: str, weights: str, dtype: str = "float32", attn: str | None = None, prune=None, peft=None):
    """The seeded model; weights are perturbed in fp32 and then cast, so a float16 model holds the
    fp32 model's weights rounded (the two exports stay comparable). attn: the attention
    implementation to ask for (legacy styles), else the version's default. prune: {layer: heads} removed
    (prune_heads). peft: holdout_specs.PEFT14's adapter config: the model becomes the PeftModel, adapters
    added before the perturbation (so lora_B, IA3's ones and the norms all move off their init)."""
    import torch
    import transformers as tf

    spec = SPECS[arch]
    torch.manual_seed(SEED)
    if spec.get("handwritten"):  # --holdout 14: tools/handwritten_models.py, configured by a plain dict
        import types

        import handwritten_models

        config, model = types.SimpleNamespace(**spec["config"]), handwritten_models.build(spec)
    else:
        config = getattr(tf, spec["config_class"])(**spec["config"], **({"attn_implementation": attn} if attn else {}))
        with _nan_filled_empty():
            model = _hf_class(spec)(config).eval()
        _init_left_params(model, getattr(config, "initializer_range", 0.02))
        with torch.no_grad():  # spec param_std {name part: std}: weights the class draws from N(0, 1) (Moshi's
            for name, param in model.named_parameters():  # per-codebook MoshiFlexibleLinear) drawn like the rest
                std = next((v for k, v in spec.get("param_std", {}).items() if k in name), None)
                if std is not None:
                    param.normal_(0.0, std)
    if peft:
        model = with_peft(model, spec, peft)
    touched = perturb(model) if weights == "trained" else []
    if prune:
        prune_heads(model, prune)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    return config, model, touched


PEFT_TASKS = {"decoder": "CAUSAL_LM", "seq2seq_decoder": "SEQ_2_SEQ_LM", "encoder": "FEATURE_EXTRACTION"}


def with_peft(model, spec, cfg: dict):
    """The PeftModel over model (--holdout 22): cfg["kind"] names the PeftType, the rest its config's fields;
    the task follows the spec's kind (a vision tower takes none: PeftModel's forward passes everything on)."""
    import peft

    cfg = dict(cfg)
    kind = cfg.pop("kind")
    config_class = {"LORA": peft.LoraConfig, "IA3": peft.IA3Config, "LOKR": peft.LoKrConfig, "LOHA": peft.LoHaConfig,
                    "PROMPT_TUNING": peft.PromptTuningConfig, "P_TUNING": peft.PromptEncoderConfig,
                    "PREFIX_TUNING": peft.PrefixTuningConfig}[kind]
    task = PEFT_TASKS.get(spec["kind"])
    return peft.get_peft_model(model, config_class(task_type=task, **cfg)).eval()


def prune_heads(model, plan: dict) -> None:
    """Remove heads per layer as PreTrainedModel.prune_heads did (transformers 5 dropped it): the query / key /
    value rows and the output projection's columns of those heads. Self-attention modules whose views take -1
    heads: BERT's (query / key / value, the parent's output.dense) and the q_proj / k_proj / v_proj / o_proj
    form (ViT in transformers 5)."""
    import torch

    lin = lambda m, n: isinstance(getattr(m, n, None), torch.nn.Linear)  # noqa: E731
    layers = []  # (attention module, its q / k / v names, the output projection's owner and name)
    for parent in model.modules():
        for child in parent.children():
            for qkv in (("query", "key", "value"), ("query_proj", "key_proj", "value_proj")):  # BERT, DeBERTa
                if all(lin(child, n) for n in qkv) and lin(getattr(parent, "output", None), "dense"):
                    # DeBERTa's relative-position projections are per head too
                    more = tuple(n for n in ("pos_key_proj", "pos_query_proj") if lin(child, n))
                    layers.append((child, qkv + more, parent.output, "dense"))
        for q, k, v, o in (("q_proj", "k_proj", "v_proj", "o_proj"), ("q_lin", "k_lin", "v_lin", "out_lin")):
            if all(lin(parent, n) for n in (q, k, v, o)):
                layers.append((parent, (q, k, v), parent, o))
        if type(getattr(parent, "c_attn", None)).__name__ == "Conv1D":  # GPT-2: packed [in, 3*H*D] Conv1D
            layers.append((parent, None, parent, "c_proj"))
    for layer, heads in plan.items():
        att, qkv, owner, out = layers[layer]
        d = getattr(att, "attention_head_size", None) or att.head_dim
        n = getattr(att, "num_attention_heads", None) or getattr(att, "n_heads", None) or att.num_heads
        keep = torch.tensor([h * d + i for h in range(n) if h not in heads for i in range(d)])
        if qkv is None:
            _prune_conv1d(att, keep, n * d)
            continue
        with torch.no_grad():
            for name in qkv:
                old = getattr(att, name)
                new = torch.nn.Linear(old.in_features, len(keep), bias=old.bias is not None)
                new.weight.copy_(old.weight[keep])
                if old.bias is not None:
                    new.bias.copy_(old.bias[keep])
                setattr(att, name, new)
            old = getattr(owner, out)
            new = torch.nn.Linear(len(keep), old.out_features, bias=old.bias is not None)
            new.weight.copy_(old.weight[:, keep])
            if old.bias is not None:
                new.bias.copy_(old.bias)
            setattr(owner, out, new)
        for name in ("num_attention_heads", "n_heads"):
            if hasattr(att, name):
                setattr(att, name, n - len(heads))
        if hasattr(att, "all_head_size"):
            att.all_head_size = len(keep)


def _prune_conv1d(att, keep, width: int) -> None:
    """GPT-2's pruning: c_attn's q, k and v columns of the kept heads, c_proj's rows; split_size follows."""
    import torch

    cols = torch.cat([keep + i * width for i in range(3)])
    with torch.no_grad():
        att.c_attn.weight = torch.nn.Parameter(att.c_attn.weight[:, cols].clone())
        att.c_attn.bias = torch.nn.Parameter(att.c_attn.bias[cols].clone())
        att.c_attn.nf = len(cols)
        att.c_proj.weight = torch.nn.Parameter(att.c_proj.weight[keep].clone())
        att.c_proj.nx = len(keep)
    att.split_size, att.num_heads = len(keep), len(keep) // att.head_dim


def _hf_class(spec):
    """The model class: transformers' top level, or spec["model_module"] for a tower the top level does not
    export (holdout_specs.HOLDOUT9B: Qwen2-VL's vision transformer)."""
    import importlib

    import transformers as tf

    module = importlib.import_module(spec["model_module"]) if spec.get("model_module") else tf
    return getattr(module, spec["model_class"])


def _cross_cache_model(model) -> bool:
    """A decoder part whose forward takes an EncoderDecoderCache and builds none itself (Dia's decoder: kind
    encoder, the encoder's states an extra input): its self-attention cache goes in beside an empty cross one."""
    import inspect

    params = inspect.signature(model.forward).parameters
    param = params.get("cache", params.get("past_key_values"))
    return param is not None and "EncoderDecoderCache" in str(param.annotation)


def _new_cache(model):
    """An empty cache object for a cache export's forward (_cross_cache_model: an EncoderDecoderCache)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    if _cross_cache_model(model):
        return EncoderDecoderCache(_dynamic_cache(DynamicCache, model.config),
                                   _dynamic_cache(DynamicCache, model.config))
    return DynamicCache(config=model.config)


def _out_cache(out):
    """The self-attention cache of a forward's output (transformers 5.x: `cache` where past_key_values was)."""
    cache = getattr(out, "past_key_values", None)
    cache = getattr(out, "cache", None) if cache is None else cache
    return getattr(cache, "self_attention_cache", cache)


def _past_shapes(model, ids, **extra):
    """[(key_shape, value_shape)] per layer from a real forward with use_cache (no guessing of
    kv heads / head_dim per architecture). extra: inputs the forward needs (Dia's encoder states)."""
    import torch

    if hasattr(model, "past_shapes"):  # handwritten_models: the model knows its cache layout
        return model.past_shapes(ids)
    if _cross_cache_model(model):
        extra["past_key_values"] = _new_cache(model)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, return_dict=True, **extra)
    cache = _out_cache(out)
    if hasattr(cache, "layers"):   # None for a layer the forward skipped (Mllama's cross-attention ones)
        return [(tuple(layer.keys.shape), tuple(layer.values.shape)) if getattr(layer, "keys", None) is not None
                and layer.keys.numel() else None for layer in cache.layers]
    if hasattr(cache, "to_legacy_cache"):  # transformers 4.3x-4.5x DynamicCache
        cache = cache.to_legacy_cache()
    elif hasattr(cache, "key_cache"):  # 4.4x-4.5x HybridCache (Gemma 2): per-layer lists
        cache = list(zip(cache.key_cache, cache.value_cache))
    return [(tuple(k.shape), tuple(v.shape)) for k, v, *_ in cache]


def _first_output(out):
    """A cache export's main output: the logits, or a headless decoder's last hidden state (a *Model class with no LM
    head, holdout_specs.HOLDOUT31's talkers: kind encoder, a causal cache all the same)."""
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


class _Wrap:
    """torch.nn.Module wrappers that take named tensors and return plain tensors."""

    @staticmethod
    def make(spec, model, style, n_layers):
        import torch

        kind, part = spec["kind"], spec["part"]
        opts = EXPORT_OPTIONS.get(style, {})
        if spec.get("handwritten"):
            import handwritten_models

            return handwritten_models.wrapper(spec, model, style in KV_STYLES)
        # transformers 4.47+ (HOLDOUT5D): Llama-style classes take a Cache object only, no tuples; a class
        # without _supports_cache_class (GPT-2, BART 4.48) still takes the tuples
        cache_object = spec.get("cache_object") and getattr(model, "_supports_cache_class", True)
        # SigLIP 2's patch-count check, D-FINE's (holdout_specs.HOLDOUT19): aten._is_all_true has no ONNX lowering
        if kind == "naflex" or spec.get("torch_check_off"):
            os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"

        class Plain(torch.nn.Module):
            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, *args):
                kw = dict(zip(self.names, args), **opts.get("model_kw", {}))
                for name, value in spec.get("call_kw", {}).items():  # constants per row (SigLIP 2's spatial shapes)
                    if name not in kw:
                        row = torch.tensor(value)
                        kw[name] = row.expand(args[0].shape[0], *row.shape[1:])
                if kind == "decoder":
                    out = self.m(**kw, use_cache=False, return_dict=True)
                    main = out.logits
                else:
                    target = self.m.get_encoder() if part == "encoder" else self.m
                    out = target(**kw, return_dict=True)
                    # a tensor (Granite Speech's CTC encoder) or spec["output"] (Mimi's latents)
                    main = out if isinstance(out, torch.Tensor) else getattr(out, spec.get("output",
                                                                                            "last_hidden_state"))
                # EXPORT_OPTIONS' outputs: every layer's attention probabilities / hidden states as well
                return (main, *getattr(out, opts["outputs"])) if "outputs" in opts else main

        class WithCache(torch.nn.Module):
            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, input_ids, attention_mask, *past):
                from transformers.cache_utils import DynamicCache

                cache = DynamicCache(config=model.config)
                for i in range(n_layers):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                             use_cache=True, return_dict=True)
                present = []
                for layer in out.past_key_values.layers[:n_layers]:
                    present += [layer.keys, layer.values]
                return (_first_output(out), *present)

        class LegacyCache(torch.nn.Module):
            """Older transformers (legacy styles): the cache goes in and comes out as a tuple of
            (key, value) per layer, as exports of that era passed it."""

            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, input_ids, attention_mask, *past):
                pkv = tuple((past[2 * i], past[2 * i + 1]) for i in range(n_layers))
                if cache_object:
                    from transformers.cache_utils import DynamicCache

                    pkv = DynamicCache.from_legacy_cache(pkv)
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=pkv,
                             use_cache=True, return_dict=True)
                cache = out.past_key_values
                cache = cache.to_legacy_cache() if hasattr(cache, "to_legacy_cache") else cache
                return (_first_output(out), *(t for layer in cache[:n_layers] for t in layer[:2]))

        if kind in ("vlm", "patches"):
            return _Wrap.multimodal(spec, model)
        if kind in CROSS:
            tuples = bool(spec.get("cache_object")) and not cache_object
            return _Wrap.seq2seq(model, style in KV_STYLES, n_layers, tuples)
        if style == "static_cache":
            return _Wrap.static_cache(model, n_layers)
        if style in KV_STYLES:
            if named_kv(spec):
                return _Wrap.named_cache(model, n_layers, cross_layers(spec))
            return LegacyCache if style in LEGACY_ATTN else WithCache
        return Plain

    @staticmethod
    def named_cache(model, n_layers, cross=()):
        """A decoder with a cache and more than input_ids + attention_mask (holdout_specs.HOLDOUT10C: a VLM's
        language model, inputs_embeds / token_type_ids / M-RoPE position_ids / cross_attention_states): every
        input by name, the past_key_values.* ones into a DynamicCache. cross: the layers whose cache holds the
        image's keys / values (Mllama's cross-attention layers): past_key_values.N.encoder.* in, no present."""
        import torch

        class NamedCache(torch.nn.Module):
            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, *args):
                kw = dict(zip(self.names, args))
                if "cross_attention_mask" in kw:   # Mllama's [B, S, images, tiles] -> its additive mask and row gate
                    from transformers.models.mllama.modeling_mllama import _prepare_cross_attention_mask

                    image = kw[f"past_key_values.{cross[0]}.encoder.key"]
                    kw["cross_attention_mask"], kw["full_text_row_masked_out_mask"] = _prepare_cross_attention_mask(
                        kw["cross_attention_mask"].to(image.dtype), image.shape[2], image.dtype)
                cache = _new_cache(model)
                own = getattr(cache, "self_attention_cache", cache)   # Dia: the cross cache fills in the forward
                for i in range(n_layers):   # filled in layer order
                    pre = f"past_key_values.{i}" + (".encoder" if i in cross else "")
                    own.update(kw.pop(f"{pre}.key"), kw.pop(f"{pre}.value"), i)
                out = self.m(**kw, past_key_values=cache, use_cache=True, return_dict=True)
                present = []
                for i, layer in enumerate(_out_cache(out).layers[:n_layers]):
                    if i not in cross:
                        present += [layer.keys, layer.values]
                return (_first_output(out), *present)

        return NamedCache

    @staticmethod
    def multimodal(spec, model):
        """kind vlm: a whole vision-language model in one graph; the text ids come in and the wrapper puts
        the image's placeholder tokens (image_tokens of them, id image_token_index) in front, so every feed
        (random ids included) holds as many placeholders as the vision tower makes features; its mask and
        its token types (PaliGemma's prefix-LM: type 0 = the bidirectional prefix) cover them as prefix;
        with image_types (Gemma 3) the wrapper writes the types itself, 1 on the image, 0 on the text.
        kind patches: a vision tower over flattened patches [N, C*T*P*P] (Qwen2-VL's), the grid
        (patch_grid: t, h, w) a constant, as one image of a fixed size is."""
        import torch

        vlm = spec.get("vlm", {})
        # the placeholder-count check (torch_compilable_check -> aten._is_all_true) has no ONNX lowering;
        # transformers' own switch for production runs turns it off (the wrapper makes the count right)
        os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"

        class Multimodal(torch.nn.Module):
            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, *args):
                kw = dict(zip(self.names, args))
                if spec["kind"] == "patches":
                    grid = torch.tensor(_grid_rows(spec), dtype=torch.int64)
                    extra = {k: torch.tensor(v) for k, v in spec.get("call_kw", {}).items()}  # VideoLLaMA 3's merge sizes
                    out = self.m(kw["pixel_values"], **{spec.get("grid_arg", "grid_thw"): grid}, **extra,
                                 return_dict=True)
                    return out if isinstance(out, torch.Tensor) else out.last_hidden_state
                ids = kw["input_ids"]
                n = vlm["image_tokens"]
                image = torch.full((ids.shape[0], n), vlm["image_token_index"], dtype=ids.dtype)
                call = dict(input_ids=torch.cat([image, ids], 1), pixel_values=kw["pixel_values"])
                if vlm.get("vla"):  # pi05: a camera axis and its mask, one denoising step of the action chunk
                    call.update(pixel_values=kw["pixel_values"][:, None], noise=kw["noise"], timestep=kw["timestep"],
                                pixel_attention_mask=torch.ones(ids.shape[0], 1, dtype=torch.bool))
                if "attention_mask" in kw:
                    mask = kw["attention_mask"]
                    call["attention_mask"] = torch.cat([torch.ones_like(image, dtype=mask.dtype), mask], 1)
                if "token_type_ids" in kw:
                    types = kw["token_type_ids"]
                    call["token_type_ids"] = torch.cat([torch.zeros_like(image, dtype=types.dtype), types], 1)
                elif vlm.get("image_types"):  # Gemma 3: type 1 marks the image block (bidirectional in it)
                    call["token_type_ids"] = torch.cat([torch.ones_like(image), torch.zeros_like(ids)], 1)
                return self.m(**call, use_cache=False, return_dict=True).logits

        return Multimodal

    @staticmethod
    def static_cache(model, n_layers):
        """transformers' StaticCache as graph inputs: past_key_values.N.* of a fixed length in,
        cache_position (the new tokens' slots) in; the cache's index_copy_ writes them and the whole
        updated cache comes out as present.N.* (the mask spans the fixed length)."""
        import torch

        class StaticKV(torch.nn.Module):
            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, input_ids, cache_position, *past):
                from transformers.cache_utils import StaticCache, StaticLayer

                cache = StaticCache(config=model.config, max_cache_len=past[0].shape[2])
                for i in range(n_layers):  # plain layers (the sliding ones branch on data), filled
                    layer = cache.layers[i] = StaticLayer(past[0].shape[2])
                    layer.lazy_initialization(past[2 * i], past[2 * i + 1])
                    layer.keys, layer.values = past[2 * i].clone(), past[2 * i + 1].clone()
                    layer.cumulative_length = cache_position[0].clone()  # update() adds to it in place
                out = self.m(input_ids=input_ids, past_key_values=cache, cache_position=cache_position,
                             use_cache=True, return_dict=True)
                present = []
                for layer in cache.layers[:n_layers]:
                    present += [layer.keys, layer.values]
                return (out.logits, *present)

        return StaticKV

    @staticmethod
    def seq2seq(model, kv, n_layers, tuples=False):
        """The decoder of an encoder-decoder model: encoder_hidden_states (the encoder's output) in,
        logits (and with kv the self-attention cache) out. With kv the cross-attention keys/values
        come in too (past_key_values.N.encoder.*), as Optimum's decoder_with_past takes them.
        tuples: the cache as (self key, self value, cross key, cross value) per layer (HOLDOUT5D's BART
        4.48, a class without Cache support)."""
        import torch

        class Seq2Seq(torch.nn.Module):
            def __init__(self, names):
                super().__init__()
                self.m, self.names = model, names

            def forward(self, *args):
                from transformers.cache_utils import DynamicCache, EncoderDecoderCache

                from transformers.modeling_outputs import BaseModelOutput

                kw = dict(zip(self.names, args))
                # what the models build from a tuple themselves (T5Gemma takes only this)
                encoded = BaseModelOutput(last_hidden_state=kw["encoder_hidden_states"])
                call = dict(decoder_input_ids=kw["input_ids"], encoder_outputs=encoded,
                            return_dict=True, use_cache=kv)
                if "encoder_attention_mask" in kw:
                    call["attention_mask"] = kw["encoder_attention_mask"]
                    encoded.attention_mask = kw["encoder_attention_mask"]  # Cohere ASR reads it off the encoder output
                if kv and tuples:
                    call["past_key_values"] = tuple(tuple(kw[f"past_key_values.{i}.{part}.{t}"] for part in (
                        "decoder", "encoder") for t in ("key", "value")) for i in range(n_layers))
                    out = self.m(**call)
                    return (out.logits, *(t for layer in out.past_key_values[:n_layers] for t in layer[:2]))
                if kv:
                    own, cross = (_dynamic_cache(DynamicCache, model.config) for _ in range(2))
                    for i in range(n_layers):  # filled before EncoderDecoderCache marks cross as computed
                        for cache, part in ((own, "decoder"), (cross, "encoder")):
                            pre = f"past_key_values.{i}.{part}"
                            cache.update(kw[f"{pre}.key"], kw[f"{pre}.value"], i)
                    call["past_key_values"] = EncoderDecoderCache(own, cross)
                out = self.m(**call)
                if not kv:
                    return out.logits
                own = out.past_key_values.self_attention_cache
                if hasattr(own, "layers"):
                    present = [t for layer in own.layers[:n_layers] for t in (layer.keys, layer.values)]
                else:  # transformers before 4.56: per-layer lists
                    present = [t for i in range(n_layers) for t in (own.key_cache[i], own.value_cache[i])]
                return (out.logits, *present)

        return Seq2Seq


def _dynamic_cache(cls, config):
    """An empty DynamicCache; before transformers 4.56 it takes no config."""
    try:
        return cls(config=config)
    except TypeError:
        return cls()


def cross_layers(spec) -> tuple[int, ...]:
    """The layers whose cache an extra "cross_cache" input fills (Mllama's cross-attention layers)."""
    if not any(what == "cross_cache" for what, *_ in spec.get("extra_inputs", {}).values()):
        return ()
    return tuple(spec["config"].get("cross_attention_layers", ()))


def named_kv(spec) -> bool:
    """A decoder whose cache export takes more than (input_ids, attention_mask, *past): _Wrap.named_cache."""
    return spec["kind"] not in CROSS and bool(spec.get("embeds") or spec.get("extra_inputs"))


def example_inputs(arch: str, style: str, model=None, batch=BATCH, seq=SEQ, past=PAST, seed=SEED):
    """Named example tensors (torch) and their dims (symbolic name or int) for a style; float
    inputs (past keys/values, encoder states) take the model's dtype."""
    feeds, dims = _example_inputs(arch, base_style(style), model, batch, seq, past, seed)
    # spec fixed_dims {style: dims}: a model whose trace bakes a size (Moshi's depth decoder: one weight per position)
    fixed = EXPORT_OPTIONS.get(style, {}).get("fixed") or SPECS[arch].get("fixed_dims", {}).get(style)
    if fixed:  # holdout_specs.EXPORT_OPTIONS: dims pinned to the example's size
        dims = {n: [feeds[n].shape[i] if isinstance(d, str) and (fixed == "all" or d in fixed) else d
                    for i, d in enumerate(ds)] for n, ds in dims.items()}
    dtype = next(model.parameters()).dtype if model is not None else None
    if dtype is not None:
        feeds = {n: t.to(dtype) if t.is_floating_point() else t for n, t in feeds.items()}
    return feeds, dims


def base_style(style: str) -> str:
    """The corpus style whose inputs and wrapper a hold-out style uses (holdout_specs.HOLDOUT_STYLES)."""
    return HOLDOUT_STYLES[style][0] if style in HOLDOUT_STYLES else style


def _example_inputs(arch, style, model, batch, seq, past, seed):
    import torch

    spec = SPECS[arch]
    cfg = spec["config"]
    kind = spec["kind"]
    g = torch.Generator().manual_seed(seed + 1)
    static = style == "static_nomask"
    vocab = cfg.get("vocab_size", 128)
    feeds, dims = {}, {}
    if kind == "patches":  # flattened patches of one image (static: the grid is a constant of the wrapper)
        n = sum(t * h * w for t, h, w in _grid_rows(spec))  # several images: packed along the rows
        feeds["pixel_values"] = torch.randn(n, spec["patch_features"], generator=g)
        dims["pixel_values"] = [n, spec["patch_features"]]
        return feeds, dims
    if kind == "vlm":  # text ids below the image token (the wrapper adds the placeholders), an image per row
        return _vlm_inputs(spec, g, static, batch, seq)
    if kind == "vision":  # image_size: one side or [height, width] (Hiera); frames: a video [B, T, C, H, W]
        size, ch = spec.get("image_size", cfg.get("image_size")), spec.get("num_channels", cfg.get("num_channels", 3))
        h, w = size if isinstance(size, (list, tuple)) else (size, size)
        name = spec.get("pixel_input", "pixel_values")  # VJEPA2 / VideoPrism: pixel_values_videos
        shape = [spec["frames"], ch, h, w] if spec.get("frames") else [ch, h, w]
        shape = list(spec.get("pixel_lead", ())) + shape  # Mllama: [B, images, tiles, C, H, W]
        feeds[name] = torch.randn(batch, *shape, generator=g)
        dims[name] = [batch if static else "batch", *shape]
        _vision_inputs(spec, g, static, feeds, dims, batch, seq)
        return feeds, dims
    if kind == "naflex":  # SigLIP 2: patches [B, N, C*P*P] and their mask (one row half padded in dyn_mask)
        n, f = spec["naflex_patches"]
        feeds["pixel_values"] = torch.randn(batch, n, f, generator=g)
        dims["pixel_values"] = [batch if static else "batch", n, f]
        if not static:
            mask = torch.ones(batch, n, dtype=torch.int64)
            mask[-1, n // 2:] = 0
            feeds["pixel_attention_mask"] = mask
            dims["pixel_attention_mask"] = ["batch", n]
        return feeds, dims
    if kind == "audio":  # raw waveform; its length stays static (the conv stack's output length)
        samples = spec.get("audio_samples", AUDIO_SAMPLES)  # Moonshine's stem needs more (HOLDOUT7A)
        shape = [1, samples] if spec.get("audio_channels") else [samples]  # PE-Audio, Mimi: [B, 1, samples]
        feeds["input_values"] = torch.randn(batch, *shape, generator=g)
        dims["input_values"] = [batch if static else "batch", *shape]
        return _audio_mask(spec, static, feeds, dims, batch, samples)
    if kind == "features":  # log-mel frames [batch, frames, bins] (holdout_specs.HOLDOUT5B: AST, Speech2Text)
        name, frames, bins = spec["features_input"]
        shape = [bins, frames] if spec.get("features_layout") == "bins_frames" else [frames, bins]  # Whisper's
        shape = [frames] if bins is None else shape  # a univariate series [B, T] (TimesFM 2.5's past_values)
        feeds[name] = torch.randn(batch, *shape, generator=g)
        dims[name] = [batch if static else "batch", *shape]
        return _audio_mask(spec, static, feeds, dims, batch, frames)
    if kind == "speech":
        mels, frames = cfg["num_mel_bins"], 2 * cfg["max_source_positions"]
        feeds["input_features"] = torch.randn(batch, mels, frames, generator=g)
        dims["input_features"] = [batch if static else "batch", mels, frames]
        return feeds, dims
    bs = [batch, seq] if static else ["batch", "sequence"]
    feeds["input_ids"] = torch.randint(3, vocab, (batch, seq), generator=g)
    dims["input_ids"] = bs
    if spec.get("ids_channels"):  # audio codes [batch, sequence, channels] (Dia's decoder: one id per codebook)
        feeds["input_ids"] = torch.randint(3, vocab, (batch, seq, spec["ids_channels"]), generator=g)
        dims["input_ids"] = [*bs, spec["ids_channels"]]
    if kind in CROSS:
        return _cross_inputs(spec, style, g, feeds, dims, batch, seq, past)
    if static:
        return _embeds_for_ids(spec, g, feeds, dims)  # static_nomask: no mask, no extra inputs, embeds kept
    if style == "static_cache":  # the new tokens go to slots past .. past + seq of a fixed-length cache
        feeds["cache_position"] = torch.arange(past, past + seq)
        dims["cache_position"] = ["sequence"]
        for i, (ks, vs) in enumerate(_past_shapes(model, feeds["input_ids"][:, :1])):
            for kv, shape in (("key", ks), ("value", vs)):
                name = f"past_key_values.{i}.{kv}"
                feeds[name] = torch.randn(batch, shape[1], STATIC_CACHE_LEN, shape[3], generator=g)
                dims[name] = ["batch", shape[1], STATIC_CACHE_LEN, shape[3]]
        return feeds, dims
    if style in KV_STYLES:
        feeds["attention_mask"] = torch.ones(batch, past + seq, dtype=torch.int64)
        dims["attention_mask"] = ["batch", "total_sequence"]
        # the past's ids as the inputs' own: [batch, past, channels] for ids_channels (Dia / Kyutai codes)
        ids = torch.randint(3, vocab, (batch, past, *feeds["input_ids"].shape[2:]), generator=g)
        # a decoder part (kind encoder) takes its encoder's states in this forward too (Dia's cross-attention)
        states = {} if kind == "decoder" else {
            name: torch.zeros(batch, arg[0], *(arg[1:] or (cfg["hidden_size"],)), dtype=next(model.parameters()).dtype)
            for name, (what, *arg) in spec.get("extra_inputs", {}).items() if what == "states"}
        for i, shapes in enumerate(_past_shapes(model, ids, **states)):
            if i in cross_layers(spec):   # _extra_inputs' cross_cache
                continue
            for kv, shape in zip(("key", "value"), shapes):
                name = f"past_key_values.{i}.{kv}"
                if len(shape) == 3 and shape[0] % batch == 0 and list(shape[1:]).count(past) == 1:
                    # BLOOM before 4.44: heads folded into the batch, key [B*H, D, P], value [B*H, P, D];
                    # the folded dim is named by its product, which verify and the shape facts read
                    heads, axis = shape[0] // batch, 1 + list(shape[1:]).index(past)
                    size = [batch * heads, *shape[1:]]
                    feeds[name] = torch.randn(*size, generator=g)
                    dims[name] = [f"{heads}*batch", *("past_sequence" if a == axis else size[a] for a in (1, 2))]
                    continue
                if len(shape) != 4 or shape[0] != batch:
                    raise RuntimeError(f"cache layout {list(shape)} is not [batch, heads, past, head_dim]")
                feeds[name] = torch.randn(batch, shape[1], past, shape[3], generator=g)
                dims[name] = ["batch", shape[1], "past_sequence", shape[3]]
        _extra_inputs(spec, g, feeds, dims, batch, seq, past)
        return feeds, dims
    if spec.get("no_mask"):  # a part whose forward takes no 2-D padding mask (BLT's local decoder)
        _extra_inputs(spec, g, feeds, dims, batch, seq)
        return feeds, dims
    if spec.get("context_mask"):  # a mask over [n context states; the sequence] (a DFlash drafter's keys), the last
        n = spec["context_mask"]  # row's first context states padded
        feeds["attention_mask"] = torch.ones(batch, n + seq, dtype=torch.int64)
        if batch > 1:
            feeds["attention_mask"][-1, :n // 2] = 0
        dims["attention_mask"] = ["batch", bs[1] if static else f"sequence+{n}"]
        _extra_inputs(spec, g, feeds, dims, batch, seq)
        return feeds, dims
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if kind == "encoder" and batch > 1:
        mask[-1, seq // 2:] = 0  # a padded row: the mask matters
    feeds["attention_mask"] = mask
    dims["attention_mask"] = bs
    if "token_type_ids" in _forward_args(spec) and cfg.get("type_vocab_size", 0) > 1:
        feeds["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.int64)
        dims["token_type_ids"] = bs
    _extra_inputs(spec, g, feeds, dims, batch, seq)
    return feeds, dims


def _vision_inputs(spec, g, static, feeds, dims, batch, seq):
    """spec["vision_inputs"] (holdout_specs.HOLDOUT19), what a whole vision model takes beside its image, by name:
    ("ids", vocab) -> token ids [batch, sequence] (a text query: OWLv2, Grounding DINO, ALIGN, OneFormer's task);
    ("mask",) -> their mask, the last row's second half padded in dyn_mask; ("pixels", *shape) -> another image
    [batch, *shape] (SegGPT's prompt and its mask); ("points", n, side) -> n prompt points [batch, 1, n, 2] inside a
    side x side image (SAM-HQ's resized input); ("ints", low, high, *shape) -> integers [batch, *shape] in [low, high)
    (Mllama's aspect_ratio_ids); ("tile_mask", *shape) -> ones [batch, *shape], the last row's last entry 0 in
    dyn_mask (Mllama's aspect_ratio_mask: a padding tile)."""
    import torch

    bs = [batch, seq] if static else ["batch", "sequence"]
    for name, (what, *arg) in spec.get("vision_inputs", {}).items():
        if what == "ids":
            feeds[name], dims[name] = torch.randint(3, arg[0], (batch, seq), generator=g), bs
        elif what == "mask":
            mask = torch.ones(batch, seq, dtype=torch.int64)
            if not static and batch > 1:
                mask[-1, seq // 2:] = 0
            feeds[name], dims[name] = mask, bs
        elif what == "pixels":
            feeds[name] = torch.randn(batch, *arg, generator=g)
            dims[name] = [batch if static else "batch", *arg]
        elif what == "ints":
            feeds[name] = torch.randint(arg[0], arg[1], (batch, *arg[2:]), generator=g)
            dims[name] = [batch if static else "batch", *arg[2:]]
        elif what == "tile_mask":
            mask = torch.ones(batch, *arg, dtype=torch.int64)
            if not static and batch > 1:
                mask.view(batch, -1)[-1, -1] = 0
            feeds[name], dims[name] = mask, [batch if static else "batch", *arg]
        elif what == "points":
            feeds[name] = torch.rand(batch, 1, arg[0], 2, generator=g) * arg[1]
            dims[name] = [batch if static else "batch", 1, arg[0], 2]
        else:
            raise ValueError(f"vision_inputs {name}: unknown kind {what!r}")


def _audio_mask(spec, static, feeds, dims, batch, frames):
    """spec["mask_input"] (holdout_specs.HOLDOUT17A): (name, dtype) of an audio encoder's padding mask over the
    input's frames / samples; dyn_mask pads the last row's second half, static_nomask feeds it (all ones) only
    where the forward requires it (spec["mask_required"])."""
    import torch

    if not spec.get("mask_input") or (static and not spec.get("mask_required")):
        return feeds, dims
    name, dtype, valid = (*spec["mask_input"], 1)[:3]  # valid: a real frame's value (Gemma 3n's mask: 0)
    mask = torch.full((batch, frames), valid).to(getattr(torch, dtype))
    if not static and batch > 1:
        mask[-1, frames // 2:] = 1 - valid
    feeds[name] = mask
    dims[name] = [batch if static else "batch", frames]
    return feeds, dims


def _grid_rows(spec) -> list:
    """kind patches: the grid_thw rows, one [t, h, w] per image (patch_grid: one image, or a list of them)."""
    grid = spec["patch_grid"]
    return [list(r) for r in grid] if isinstance(grid[0], (list, tuple)) else [list(grid)]


def _extra_inputs(spec, g, feeds, dims, batch, seq, past=None):
    """spec["extra_inputs"] (holdout_specs.HOLDOUT9B), what a multimodal model's language part takes beside
    the text: "states" -> name [batch, n, hidden] floats (Mllama's cross_attention_states, the image's
    tokens); "mrope" -> position_ids [3, batch, sequence] (Qwen2-VL's temporal / height / width streams:
    the text's positions in all three, a 2 x 2 image grid's rows and columns in the first four);
    "image_types" -> token_type_ids, 1 on a 4-token image (Gemma 3); "boxes" -> name [batch, sequence, n] in [0, 1)
    (BROS's bbox, one box per token); "mask_column" -> the attention mask as floats [batch, sequence, 1]. past: a cache export's past length
    (positions start there; token types cover past + new, the image straddling the two); embeds: the
    text comes as inputs_embeds [batch, sequence, embeds] instead of input_ids (a VLM's decoder)."""
    import torch

    _embeds_for_ids(spec, g, feeds, dims)
    start = past or 0
    for name, (what, *arg) in spec.get("extra_inputs", {}).items():
        if what == "image_types":
            types = torch.zeros(batch, start + seq, dtype=torch.int64)
            first = max(start - 2, 0)
            types[:, first:first + 4] = 1
            feeds[name] = types
            dims[name] = ["batch", "total_sequence" if past is not None else "sequence"]
            continue
        if what == "cross_cache":   # the image's keys / values of each cross-attention layer (cross_layers)
            cfg = spec["config"]
            heads, dim = cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
            for i in cross_layers(spec):
                for kv in ("key", "value"):
                    feeds[f"past_key_values.{i}.encoder.{kv}"] = torch.randn(batch, heads, arg[0], dim, generator=g)
                    dims[f"past_key_values.{i}.encoder.{kv}"] = ["batch", heads, "encoder_sequence", dim]
            continue
        if what == "cross_mask":   # Mllama: which image (one, of one tile) each new token sees; none for the first
            feeds[name] = torch.ones(batch, seq, 1, 1, dtype=torch.int64)
            feeds[name][:, 0] = 0
            dims[name] = ["batch", "sequence", 1, 1]
            continue
        if what == "mask_column":   # the attention mask as floats [batch, sequence, 1] (VITS's padding_mask)
            feeds[name] = feeds["attention_mask"][..., None].float()
            dims[name] = [*dims["attention_mask"], 1]
            continue
        if what == "boxes":   # a box per token [batch, sequence, n] in [0, 1) (BROS's bbox: 4 corners' x, y)
            feeds[name] = torch.rand(batch, seq, arg[0], generator=g)
            dims[name] = ["batch", "sequence", arg[0]]
            continue
        if what == "states":
            hidden = arg[1] if len(arg) > 1 else spec["config"]["hidden_size"]  # a width other than hidden_size (d_model)
            feeds[name] = torch.randn(batch, arg[0], hidden, generator=g)
            dims[name] = ["batch", arg[0], hidden]
        elif what == "mrope":
            pos = (start + torch.arange(seq)).expand(3, batch, seq).clone()
            if seq > 4:  # an image of 2 x 2 merged patches at the start: t = 0, h = i // 2, w = i % 2
                grid = torch.arange(4)
                pos[0, :, :4], pos[1, :, :4], pos[2, :, :4] = start, start + grid // 2, start + grid % 2
                pos[:, :, 4:] -= 2  # text resumes after the image's largest position + 1
            feeds[name] = pos
            dims[name] = [3, "batch", "sequence"]


def _embeds_for_ids(spec, g, feeds, dims):
    """spec["embeds"]: the text comes as inputs_embeds [batch, sequence, embeds] instead of input_ids (a VLM's
    decoder; a model whose forward refuses ids, as Qwen3-Omni's talker or BLT's global transformer); under the
    name spec["embeds_name"] where the forward calls it otherwise (BLIP-2's Q-Former: query_embeds)."""
    import torch

    if spec.get("embeds") and "input_ids" in feeds:
        ids, name = feeds.pop("input_ids"), spec.get("embeds_name", "inputs_embeds")  # BLIP-2's Q-Former: query_embeds
        feeds[name] = torch.randn(*ids.shape, spec["embeds"], generator=g)
        dims[name] = [*dims.pop("input_ids"), spec["embeds"]]
    return feeds, dims


def _vlm_inputs(spec, g, static, batch, seq):
    """kind vlm: input_ids and a mask over the text (ids never the image token: vlm_vocab excludes it),
    pixel_values [batch, C, size, size]; token_type_ids (PaliGemma) mark the first half of the text as
    prefix (0) and the rest as suffix (1)."""
    import torch

    vlm = spec["vlm"]
    bs = [batch, seq] if static else [batch if vlm.get("fixed_batch") else "batch", "sequence"]
    feeds, dims = {}, {}
    feeds["input_ids"] = torch.randint(3, vlm["text_vocab"], (batch, seq), generator=g)
    dims["input_ids"] = bs
    size, ch = vlm["image_size"], 3
    feeds["pixel_values"] = torch.randn(batch, ch, size, size, generator=g)
    dims["pixel_values"] = [bs[0], ch, size, size]
    if vlm.get("vla"):  # pi05's noisy action chunk [batch, chunk, action dim] and its timestep in (0, 1)
        feeds["noise"] = torch.randn(batch, *vlm["vla"], generator=g)
        dims["noise"] = [bs[0], *vlm["vla"]]
        feeds["timestep"] = torch.rand(batch, generator=g)
        dims["timestep"] = [bs[0]]
    if static:
        return feeds, dims
    feeds["attention_mask"] = torch.ones(batch, seq, dtype=torch.int64)
    dims["attention_mask"] = bs
    if vlm.get("token_types"):
        types = torch.ones(batch, seq, dtype=torch.int64)
        types[:, : seq // 2] = 0
        feeds["token_type_ids"] = types
        dims["token_type_ids"] = bs
    return feeds, dims


def _cross_inputs(spec, style, g, feeds, dims, batch, seq, past):
    """encoder_hidden_states (+ its padding mask, + with kv the self- and cross-attention caches)
    for a seq2seq decoder; the encoder length differs from the decoder's (seq - 2)."""
    import torch

    cfg, static = spec["config"], style == "static_nomask"
    enc = max(seq - 2, 1)
    enc_cfg = cfg.get("encoder") or {}
    # T5Gemma: per part; T5Gemma 2: the encoder's text_config
    hidden = (cfg.get("d_model") or cfg.get("hidden_size") or enc_cfg.get("hidden_size")
              or cfg.get("encoder_config", {}).get("hidden_size") or enc_cfg["text_config"]["hidden_size"])
    be = [batch, enc] if static else ["batch", "encoder_sequence"]
    feeds["encoder_hidden_states"] = torch.randn(batch, enc, hidden, generator=g)
    dims["encoder_hidden_states"] = be + [hidden]
    if not static and spec["model_type"] != "whisper":  # Whisper's decoder takes no encoder mask
        mask = torch.ones(batch, enc, dtype=torch.int64)
        if batch > 1:
            mask[-1, enc // 2:] = 0
        feeds["encoder_attention_mask"] = mask
        dims["encoder_attention_mask"] = be
    if style in KV_STYLES:
        heads, head_dim = seq2seq_heads(cfg)
        for i in range(cfg.get("decoder_layers") or cfg.get("num_hidden_layers") or cfg["num_layers"]):
            for part, length, name in (("decoder", past, "past_sequence"), ("encoder", enc, "encoder_sequence")):
                for kv in ("key", "value"):
                    key = f"past_key_values.{i}.{part}.{kv}"
                    feeds[key] = torch.randn(batch, heads, length, head_dim, generator=g)
                    dims[key] = ["batch", heads, name, head_dim]
    return feeds, dims


def seq2seq_heads(cfg: dict) -> tuple[int, int]:
    """(decoder heads, head size) of a T5 / BART / Whisper config dict."""
    heads = cfg.get("decoder_attention_heads") or cfg.get("num_attention_heads") or cfg["num_heads"]
    return heads, cfg.get("d_kv") or cfg.get("head_dim") or cfg["d_model"] // heads  # head_dim: Cohere ASR


def _forward_args(spec):
    import inspect

    if spec.get("handwritten"):  # no token_type_ids
        return set()
    # _hf_class: a class the top level does not export (spec["model_module"]: Kosmos-2's text decoder) too
    return set(inspect.signature(_hf_class(spec).forward).parameters)


def _dynamic_shapes(dims, kv, min2=()):
    """min2: dims that start at 2 (the retry after torch.export refuses 0/1, _violated_dims)."""
    import torch

    made = {}
    # a derived dim, 'sequence+6' (a mask over 6 context states and the sequence); its base takes another Dim name,
    # since torch sympifies a derived dim's name and 'sequence' is a sympy function
    bases = {d.split("+")[0].strip() for ds in dims.values() for d in ds if isinstance(d, str) and "+" in d}

    def dim(name):
        if "+" in name:
            base, offset = name.split("+")
            return dim(base.strip()) + int(offset)
        if name not in made:
            made[name] = torch.export.Dim(f"{name}_len" if name in bases else name, max=128 if name == "total_sequence" else 64,
                                          **({"min": 2} if name in min2 else {}))
        return made[name]

    specs = [{i: dim(d) for i, d in enumerate(ds) if isinstance(d, str)} or None for ds in dims.values()]
    # the wrappers take (*args) or (input_ids, attention_mask, *past): nest the varargs part
    return (tuple(specs),) if not kv else (specs[0], specs[1], tuple(specs[2:]))


def export_torch(arch: str, style: str, weights: str, path: Path, dtype: str = "float32") -> dict:
    import numpy as np
    import torch

    spec = SPECS[arch]
    if _pinned_elsewhere(spec):  # --holdout 5 / 8: that transformers / torch version, in its own venv
        return export_legacy(arch, style, weights, path, dtype)
    opts = EXPORT_OPTIONS.get(style, {})  # holdout_specs' export options (--holdout 21, 22)
    peft = spec.get("peft_override", {}).get(style, opts.get("peft"))
    config, model, touched = build_model(arch, weights, dtype, LEGACY_ATTN.get(style, opts.get("attn")),
                                         opts.get("prune"), peft)
    # a cache's layers (a VLM's: its text config's); PVT v2 / LeViT have stages
    n_layers = getattr(config, "num_hidden_layers", None) or getattr(config.get_text_config(), "num_hidden_layers", 0)
    torchscript = base_style(style).startswith("torchscript")
    first = (opts.get("batch", BATCH), opts.get("seq", SEQ), PAST)
    feeds, dims = example_inputs(arch, style, model, *first)
    names = list(feeds)
    wrapper = _Wrap.make(spec, model, style, n_layers)(names).eval()
    if spec["kind"] == "vlm":
        outputs = ["logits"]
    elif spec["kind"] == "decoder":
        outputs = ["logits"] + ([f"present.{i}.{kv}" for i in range(n_layers) if i not in cross_layers(spec)
                                 for kv in ("key", "value")] if style in KV_STYLES else [])
    elif spec["kind"] in CROSS:
        outputs = ["logits"] + ([f"present.{i}.decoder.{kv}" for i in range(n_layers) for kv in ("key", "value")]
                                if style in KV_STYLES else [])
    else:  # a headless decoder's cache export (_first_output) has its presents too
        outputs = ["last_hidden_state"] + ([f"present.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]
                                           if style in KV_STYLES else [])
    if outputs[0] in names:  # an input of that name (Moshi's depth decoder takes last_hidden_state): TorchScript
        outputs[0] = spec.get("output", "output")  # would rename the input to last_hidden_state.1
    if "outputs" in opts:  # attentions.0 .. (one per layer), hidden_states.0 .. (the embeddings' and each layer's)
        outputs += [f"{opts['outputs']}.{i}" for i in range(n_layers + (opts["outputs"] == "hidden_states"))]
    static = style == "static_nomask" or opts.get("fixed") == "all"
    args = tuple(feeds[n] for n in names)
    min2: tuple = ()  # dynamo dims the export needed to start at 2
    tmp = path.with_name(f".{path.name}.tmp")
    with warnings.catch_warnings(), _traceable_masks(torchscript and "transformers" in spec):
        warnings.simplefilter("ignore")
        if torchscript:
            axes = {n: {i: d for i, d in enumerate(ds) if isinstance(d, str)} for n, ds in dims.items()}
            torch.onnx.export(wrapper, args, str(tmp), input_names=names, output_names=outputs,
                              dynamic_axes=axes, dynamo=False, opset_version=17)
        else:
            options = HOLDOUT_STYLES.get(style, (style, {}))[1]  # hold-out: optimize=False, opset 23
            kv = style in KV_STYLES and spec["kind"] not in CROSS and not named_kv(spec)
            for _ in range(3):  # older torch (2.9) turns 0/1-specialization guards into violations: retry at 2
                try:
                    prog = torch.onnx.export(wrapper, args, input_names=names, output_names=outputs,
                                             dynamic_shapes=None if static else _dynamic_shapes(dims, kv, min2),
                                             dynamo=True, verbose=False, **options)
                    break
                except Exception as exc:  # noqa: BLE001 - only a new violated dim retries
                    more = _violated_dims(exc) - set(min2)
                    if static or not more:
                        raise
                    min2 += tuple(sorted(more))
            prog.save(str(tmp), external_data=False)
    _strip(tmp)
    if style == "converted_half":
        convert_half(tmp)
    check = "float16" if style == "converted_half" else dtype
    # numeric check against torch at the example shape and (dynamic exports) a second shape
    # a batch the model pins (holdout_specs.HOLDOUT9B's LLaVA: list(image_features)) stays in the second shape
    # a sequence the spec pins (fixed_dims) stays too; fixed_dims "all": no second shape
    pinned = spec.get("fixed_dims", {}).get(style, ())
    static = static or pinned == "all"
    pinned = "sequence" in pinned
    shapes = [first] + ([] if static else [(BATCH if spec.get("vlm", {}).get("fixed_batch") else 1,
                                             first[1] if pinned else opts.get("seq", 5), 3)])
    diffs, scales = [], []
    import onnxruntime as ort

    sess = _ort_session(tmp)
    declared = {i.name for i in sess.get_inputs()}
    for b, s, p in shapes:
        f, _ = example_inputs(arch, style, model, batch=b, seq=s, past=p, seed=SEED + 7)
        with torch.no_grad():
            ref = wrapper(*(f[n] for n in names))
        ref = ref if isinstance(ref, tuple) else (ref,)
        # TorchScript drops an input the trace never reads (transformers 4.53's Whisper decoder with the
        # cross-attention cache given does not read encoder_hidden_states)
        got = sess.run(None, {n: _numpy(f[n]) for n in names if n in declared})
        keep = f["attention_mask"].numpy().astype(bool) if spec["kind"] == "encoder" and "attention_mask" in f else None
        for a, r in zip(got, ref):
            r = r.float().numpy()
            d = np.abs(a.astype(np.float32) - r)
            if keep is not None and d.shape[:2] == keep.shape:
                d = d[keep]  # outputs at padded positions are undefined (ModernBERT unpads)
                r = r[keep]
            diffs.append(float(np.max(d)))
            # fp16/bf16: relative to the output's scale (logits of magnitude 10 carry 1e-2 of rounding)
            scales.append(1.0 if check == "float32" else max(1.0, float(np.max(np.abs(r)))))
    if not all(d < CHECK_TOLERANCE[check] * s for d, s in zip(diffs, scales)):
        raise RuntimeError(f"ONNX Runtime differs from torch: max abs {max(diffs):.3g}")
    os.replace(tmp, path)
    import transformers

    exporter = ({"name": "torch.onnx.export", "dynamo": False, "opset_version": 17} if torchscript
                else {"name": "torch.onnx.export", "dynamo": True, "optimize": True,
                      "dynamic_shapes": not static, **HOLDOUT_STYLES.get(style, (style, {}))[1]})
    exporter["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    if not torchscript:  # the dynamo exporter's op library and optimizer are onnxscript's
        import onnxscript

        exporter["versions"]["onnxscript"] = onnxscript.__version__
    if min2:
        exporter["dims_min_2"] = list(min2)
    return {"hf_class": spec["model_class"] + _part_suffix(spec),
            "attn_implementation": getattr(config, "_attn_implementation", None),
            "exporter": exporter, "perturbed_params": len(touched), "dtype": dtype,
            "torch_check": {"shapes": [list(s) for s in shapes], "max_abs": max(diffs),
                            "positions": "non-padded" if spec["kind"] == "encoder" else "all"}}


@contextlib.contextmanager
def _traceable_masks(on: bool):
    """transformers 4.53 builds masks by torch.vmap over the mask functions (masking_utils._vmap_for_bhqkv),
    which the TorchScript tracer cannot follow (RuntimeError unordered_map::at); TorchScript exports of that
    era replaced it (Optimum's patcher). Here the same mask functions are evaluated on broadcast index grids:
    they are elementwise in (batch, head, q, kv) (vmap needs that), so the mask is the same; the getitem
    mode vmap needs (TransformGetItemToIndex, an autograd Function the tracer cannot follow either) is left
    out. The packed-sequence check (position ids without a mask or cache: Whisper's decoder) reads
    torch.diff, which TorchScript cannot export at opset 17; the wrappers feed one arange per row, never
    packed rows, so it finds none (None). Only while `on` and where the running transformers has the vmap
    (4.53 - 4.5x)."""
    try:
        from transformers import masking_utils
    except ImportError:
        masking_utils = None
    if not on or not hasattr(masking_utils, "_vmap_for_bhqkv"):
        yield
        return

    def broadcast(mask_function, bh_indices=True):
        def grid(b, h, q, kv):
            q, kv = q.reshape(-1, 1), kv.reshape(1, -1)
            if not bh_indices:  # [q, kv] (b and h are not indices here)
                return mask_function(b, h, q, kv).expand(q.shape[0], kv.shape[1])
            b, h = b.reshape(-1, 1, 1, 1), h.reshape(1, -1, 1, 1)
            return mask_function(b, h, q, kv).expand(b.shape[0], h.shape[1], q.shape[0], kv.shape[1])
        return grid

    names = ("_vmap_for_bhqkv", "TransformGetItemToIndex", "find_packed_sequence_indices")
    saved = {n: getattr(masking_utils, n, None) for n in names}
    for n, stand_in in zip(names, (broadcast, contextlib.nullcontext, lambda position_ids: None)):
        setattr(masking_utils, n, stand_in)
    try:
        yield
    finally:
        for n, value in saved.items():
            setattr(masking_utils, n, value)


def convert_half(path: Path) -> None:
    """converted_half: the fp32 export converted to fp16 after the fact (keep_io_types: fp32 inputs and
    outputs, Casts at the edges), the way deployment scripts halve an exported model. The converter is
    ONNX Runtime's copy of onnxconverter-common's (onnxruntime.transformers.float16, what ORT's
    optimizer's convert_float_to_float16 runs): onnxconverter-common 1.16 itself keeps Cast(to=FLOAT)
    while it halves that Cast's value_info, and ORT refuses the result (dynamo exports of llama)."""
    import onnx
    from onnxruntime.transformers import float16

    proto = float16.convert_float_to_float16(onnx.load(str(path)), keep_io_types=True)
    onnx.save(proto, str(path))


def _in_order(proto):
    """The model with its nodes in topological order, for the checker only: the file keeps the order it was written
    in. The fp16 converter (convert_half) appends the Casts of float graph inputs (inputs_embeds) after their users;
    ONNX Runtime and onnx-fuse take such a graph, onnx.checker refuses it."""
    import onnx_ir as ir

    model = ir.from_proto(proto)
    model.graph.sort()
    return ir.to_proto(model)


def _part_suffix(spec) -> str:
    return {None: "", "encoder": ".get_encoder()",
            "decoder": " (decoder: encoder_outputs given, encoder not run)"}[spec["part"]]


# ---- optimum --------------------------------------------------------------------------------

def use_head_dim(head_dim: int, archs) -> None:
    """Switch the specs of `archs` to head size 64 in place (16: the corpus's own sizes)."""
    if head_dim == 64:
        for arch in archs:
            SPECS[arch]["config"] = head_dim_64(arch)


def _optimum_save(arch: str, weights: str, out_dir: str, head_dim: str = "16", sweep: str = "0") -> None:
    # saved in fp32 either way: optimum-cli's --dtype casts on load, as it does for Hub models
    """Runs inside the optimum venv: build the tiny model there and save_pretrained it (sweep: the
    --holdout set whose spec it is, 0 for the corpus)."""
    import torch
    import transformers as tf

    if int(sweep):
        SPECS.update(HOLDOUT_SETS[int(sweep)])
    use_head_dim(int(head_dim), [arch])
    spec = SPECS[arch]
    torch.manual_seed(SEED)
    kw = dict(spec["config"])
    config = getattr(tf, spec["config_class"])(**kw)
    # optimum's seq2seq task loads a full encoder-decoder: save one (its encoder is what we keep)
    cls = "T5ForConditionalGeneration" if spec["model_class"] == "T5EncoderModel" else spec["model_class"]
    model = getattr(tf, cls)(config).eval()
    if weights == "trained":
        perturb(model)
    model.save_pretrained(out_dir)
    if spec.get("optimum_preprocessor"):  # what Optimum reads input sizes from (DINOv2: an image processor)
        name, kw = spec["optimum_preprocessor"]
        getattr(tf, name)(**kw).save_pretrained(out_dir)


def export_optimum(arch: str, weights: str, path: Path, head_dim: int = 16, dtype: str = "float32",
                   sweep: int = 0) -> dict:
    spec = SPECS[arch]
    py, cli = OPTIMUM_VENV / "bin/python", OPTIMUM_VENV / "bin/optimum-cli"
    if not cli.exists():
        raise RuntimeError(f"no optimum venv at {OPTIMUM_VENV} (run tools/optimum_venv.sh)")
    task = spec["optimum_task"] or {"decoder": "text-generation-with-past", "encoder": "feature-extraction",
                                    "vision": "image-feature-extraction", "audio": "feature-extraction",
                                    "seq2seq_decoder": "text2text-generation-with-past"}[spec["kind"]]
    with tempfile.TemporaryDirectory() as tmpd:
        hf, onx = Path(tmpd, "hf"), Path(tmpd, "onnx")
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
        env.pop("VIRTUAL_ENV", None)
        run = subprocess.run([str(py), __file__, "_optimum_save", arch, weights, str(hf), str(head_dim), str(sweep)], env=env,
                             capture_output=True, text=True, timeout=300)
        if run.returncode:
            raise RuntimeError("save_pretrained in the optimum venv: " + _last_error(run.stderr))
        cross = spec["kind"] in CROSS  # keep the with-past decoder unmerged (no If node)
        run = subprocess.run([str(cli), "export", "onnx", "--model", str(hf), "--task", task, str(onx)]
                             + (["--no-post-process"] if cross else [])
                             + (["--dtype", OPTIMUM_DTYPE[dtype]] if dtype != "float32" else []),
                             env=env, capture_output=True, text=True, timeout=600)
        # sequence-to-sequence tasks write encoder_model.onnx + decoder_model*.onnx: keep the encoder
        # (encoder archs) or decoder_with_past_model.onnx (seq2seq decoders); a task named for a single-file
        # export (feature-extraction of a kind without a default task) writes model.onnx
        keep = ("decoder_with_past_model.onnx",) if cross else \
            ("encoder_model.onnx", "model.onnx") if spec["optimum_task"] else ("model.onnx",)
        candidates = [onx / n for n in keep]
        src = next((c for c in candidates if c.exists()), None)
        if run.returncode or src is None:
            raise RuntimeError("optimum-cli: " + _last_error(run.stderr + run.stdout))
        if any(p.suffix == ".onnx_data" or p.name.endswith(".data") for p in onx.iterdir()):
            raise RuntimeError("optimum wrote external data")
        tmp = path.with_name(f".{path.name}.tmp")
        shutil.copyfile(src, tmp)
        _strip(tmp)
        os.replace(tmp, path)
        versions = subprocess.run([str(py), "-c", "import importlib.metadata as m, json; print(json.dumps("
                                   "{p: m.version(p) for p in ('optimum-onnx', 'optimum', 'transformers',"
                                   " 'torch', 'onnx')}))"], capture_output=True, text=True, env=env).stdout
    return {"hf_class": spec["model_class"] + (" (decoder; Optimum's decoder_with_past: cross-attention keys/values in)"
                                               if spec["kind"] in CROSS else _part_suffix(spec)),
            "exporter": {"name": "optimum-cli export onnx", "task": task, "file": src.name,
                         "dtype_arg": OPTIMUM_DTYPE[dtype], "versions": json.loads(versions or "{}")},
            "dtype": dtype}


def _violated_dims(exc: BaseException) -> set:
    """The dims a torch.export 'Constraints violated (batch, sequence)!' error names, anywhere in the chain
    (torch 2.9 raises it when a guard excludes size 0 or 1 from a Dim of min 0)."""
    found, seen = set(), set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for m in re.finditer(r"Constraints violated \(([^)]*)\)", str(exc)):
            found.update(d.strip() for d in m[1].split(","))
        exc = exc.__cause__ or exc.__context__
    return found


def _pinned_elsewhere(spec) -> bool:
    """The spec pins a transformers (--holdout 5), torch (--holdout 8) or onnxscript (--holdout 11) version
    this process does not run."""
    import torch
    import transformers

    try:
        import onnxscript
    except ImportError:  # a venv without the dynamo exporter: an onnxscript pin is elsewhere
        onnxscript = None
    here = getattr(onnxscript, "__version__", None)
    return (spec.get("transformers", transformers.__version__) != transformers.__version__
            or spec.get("torch", torch.__version__).split("+")[0] != torch.__version__.split("+")[0]
            or spec.get("onnxscript", here) != here)


def export_legacy(arch: str, style: str, weights: str, path: Path, dtype: str = "float32") -> dict:
    """export_torch run by the venv of the architecture's pinned version (tools/export_venv.sh): transformers
    (--transformers VERSION: /work/venvs/tf<major><minor>) or torch (--torch VERSION: /work/venvs/torch<digits>),
    or the same under $LEGACY_VENVS; its manifest extras come back as JSON on the last line of its output.
    dtype goes along (--holdout 9 --dtype float16: that era's float16 exports)."""
    spec = SPECS[arch]
    if "onnxscript" in spec:  # beside this process's torch
        import torch

        version, what, script = spec["onnxscript"], "onnxscript", "export_venv.sh --onnxscript"
        torch_tag = torch.__version__.split("+")[0].replace(".", "")
        py = LEGACY_VENVS / f"torch{torch_tag}_os{version.replace('.', '')}" / "bin/python"
    elif "torch" in spec:
        version, what, script = spec["torch"], "torch", "export_venv.sh --torch"
        py = LEGACY_VENVS / f"torch{version.replace('.', '')}" / "bin/python"
    else:
        version, what, script = spec["transformers"], "transformers", "export_venv.sh --transformers"
        tag = next(t for t, v in LEGACY_VERSIONS.items() if v == version)
        py = LEGACY_VENVS / f"tf{tag}" / "bin/python"
    if not py.exists():
        raise RuntimeError(f"no {what} {version} venv at {py.parents[1]} (run tools/{script} {version})")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    env.pop("VIRTUAL_ENV", None)
    env["EXPORT_CORPUS_CONFIG"] = json.dumps(spec["config"])  # this process's config (--head-dim 64 changes it)
    run = subprocess.run([str(py), __file__, "_legacy_export", arch, style, weights, str(path), dtype], env=env,
                         capture_output=True, text=True, timeout=600)
    if run.returncode:
        raise RuntimeError(f"{what} {version}: " + _last_error(run.stderr))
    return json.loads(run.stdout.strip().splitlines()[-1])


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln)]
    return (errs or lines or ["(no output)"])[-1][:300]


# ---- checks and manifest --------------------------------------------------------------------

def _strip(path: Path) -> None:
    import onnx

    proto = onnx.load(str(path))
    for graph in _graphs(proto.graph):
        for node in graph.node:
            del node.metadata_props[:]
            node.doc_string = ""
    onnx.save(proto, str(path))


def _graphs(graph):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.g.node:
                yield from _graphs(attr.g)
            for g in attr.graphs:
                yield from _graphs(g)


def _io(values):
    from onnx import helper

    out = []
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
                for d in t.shape.dim]
        out.append({"name": v.name, "dtype": helper.tensor_dtype_to_np_dtype(t.elem_type).name, "dims": dims})
    return out


def dim_value(d, values=None):
    """An int for a manifest dim: ints stay, names, sums and products of names ('past_sequence_length +
    sequence_length', BLOOM 4.38's '2*batch') take the example sizes."""
    values = values or DIM_VALUES
    if isinstance(d, int):
        return d
    total = 0
    for term in str(d).split("+"):
        product = 1
        for factor in term.split("*"):
            factor = factor.strip()
            if factor.isdigit():
                product *= int(factor)
            elif factor in values:
                product *= values[factor]
            else:
                raise KeyError(f"unknown dim {d!r}")
        total += product
    return total


def feeds_from_manifest(entry: dict, vocab: int = 128, seed: int = SEED) -> dict:
    """NumPy example inputs for a manifest entry: ids inside the vocabulary, masks of ones, positions
    after the past, floats from a normal distribution."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    # a waveform's symbolic length (Optimum's audio exports) takes the samples the conv stack needs
    # (Moonshine's encoder_model names it encoder_sequence_length)
    samples = entry.get("audio_samples", AUDIO_SAMPLES)
    values = dict(DIM_VALUES, sequence_length=samples, encoder_sequence_length=samples) \
        if entry["kind"] == "audio" else DIM_VALUES
    # a dim named after a config entry (Optimum's VisualBERT: visual_embedding_dim) is that entry
    values = dict({k: v for k, v in (entry.get("config") or {}).items() if type(v) is int and v > 0}, **values)
    # a time series' symbolic length (Optimum's PatchTST / PatchTSMixer past_values) is the context the model
    # was built for: its patch count and position table are fixed by it (another length computes garbage)
    if any(i["name"] == "past_values" for i in entry["inputs"]) and (entry.get("config") or {}).get("context_length"):
        values = dict(values, sequence_length=entry["config"]["context_length"])
    # an image's symbolic height / width (Optimum's vision exports) takes the size the model was built for
    size = (entry.get("config") or {}).get("image_size")
    if isinstance(size, (int, list)) and size:
        hw = [size, size] if isinstance(size, int) else list(size) * (2 // len(size))
        values = dict(values, height=hw[0], width=hw[-1])
    for inp in entry["inputs"]:
        name, shape = inp["name"], [dim_value(d, values) for d in inp["dims"]]
        if "mask" in name:
            feeds[name] = np.ones(shape, dtype=inp["dtype"])
        elif name in ("position_ids", "cache_position"):
            feeds[name] = np.broadcast_to(np.arange(shape[-1]) + (PAST if entry["style"] in ("kv", "optimum", *KV_STYLES)
                                                                  and entry["kind"] == "decoder" else 0),
                                          shape).astype(inp["dtype"])
        elif name == "bbox" and shape[-1:] == [4]:  # LayoutLM / LiLT boxes (x0, y0, x1, y1): x1 >= x0, y1 >= y0,
            corner = rng.integers(0, 32, [*shape[:-1], 2])  # each inside the 2-D position tables (>= 64 rows)
            feeds[name] = np.concatenate([corner, corner + rng.integers(0, 32, corner.shape)], -1).astype(inp["dtype"])
        elif name in (entry.get("int_ranges") or {}):  # [low, high) of an integer input that is no token id
            feeds[name] = rng.integers(*entry["int_ranges"][name], shape).astype(inp["dtype"])
        elif inp["dtype"].startswith("int"):
            feeds[name] = (np.zeros(shape) if "type" in name else rng.integers(3, vocab, shape)).astype(inp["dtype"])
        else:
            feeds[name] = rng.standard_normal(shape).astype(inp["dtype"])
    return feeds


def _is_bf16(proto) -> bool:
    from onnx import TensorProto

    return any(t.data_type == TensorProto.BFLOAT16 for t in proto.graph.initializer) or any(
        v.type.tensor_type.elem_type == TensorProto.BFLOAT16 for v in proto.graph.input)


def _ort_session(path: Path):
    """An ORT CPU session on the file; a bf16 model (ORT's CPU provider has no bf16 MatMul or Add) runs
    through onnx_fuse's emulate_bf16 (float32 math on bf16-rounded values, float32 inputs / outputs)."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(path))
    if _is_bf16(proto):
        from onnx_fuse.passes.precision import emulate_bf16

        return ort.InferenceSession(emulate_bf16(proto).SerializeToString(), providers=["CPUExecutionProvider"])
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _numpy(tensor):
    """A torch tensor as NumPy; bf16 (NumPy has none) as float32, exactly (the emulated session's inputs)."""
    import torch

    return (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()


def ort_check(path: Path, entry: dict) -> dict:
    import onnxruntime as ort

    sess = _ort_session(path)
    # a bf16 input is fed as float32 (_ort_session's emulated copy)
    feeds = feeds_from_manifest({**entry, "inputs": [dict(i, dtype="float32") if i["dtype"] == "bfloat16" else i
                                                     for i in entry["inputs"]]}, entry["vocab_size"] or 128)
    outs = sess.run(None, feeds)
    import numpy as np

    if not all(np.isfinite(o).all() for o in outs if o.dtype.kind == "f"):
        raise RuntimeError("ORT outputs are not finite")
    emulated = {"emulated": "bf16 (emulate_bf16)"} if any(i["dtype"] == "bfloat16" for i in entry["inputs"]) or \
        entry.get("dtype") == "bfloat16" else {}
    return {"ran": True, "ort": ort.__version__, "output_shapes": [list(o.shape) for o in outs], **emulated}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_entry(arch: str, style: str, weights: str, path: Path, extra: dict) -> dict:
    """weights: the file's weights tag (trained, default, trained16)."""
    import onnx

    spec = SPECS[arch]
    cfg = spec["config"]
    if isinstance(cfg.get("encoder"), dict):  # per-part configs (T5Gemma): the exported part's sizes
        cfg = dict(cfg[spec["part"] or "encoder"], **{k: v for k, v in cfg.items() if k not in ("encoder", "decoder")})
    elif isinstance(cfg.get(part := f"{spec['part'] or 'encoder'}_config"), dict):  # Dia's encoder_config / decoder_config
        # (only where the exported part has one: Cohere ASR nests its encoder_config, its decoder's sizes are top-level)
        cfg = dict(cfg[part], **{k: v for k, v in cfg.items() if k not in ("encoder_config", "decoder_config")})
    if spec["kind"] == "vlm":  # the language model's sizes; ids a text token may take (below the image token)
        text = cfg["text_config"] if "text_config" in cfg else cfg["vlm_config"]["text_config"]  # pi05: vlm_config
        cfg = dict(text, vocab_size=spec["vlm"]["text_vocab"])
    elif spec.get("embeds") and "text_config" in cfg:  # a VLM's language model (holdout_specs.HOLDOUT10C)
        cfg = cfg["text_config"]
    proto = onnx.load(str(path))
    onnx.checker.check_model(_in_order(proto))
    opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
    g = lambda *ks: next((cfg[k] for k in ks if k in cfg), None)  # noqa: E731
    entry = {
        "file": path.name, "arch": arch, "kind": spec["kind"], "style": style, "weights": weights,
        "model_type": spec["model_type"], "ort_model_type": spec["ort_model_type"],
        "config_class": spec["config_class"], "config": cfg,
        "num_layers": g("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
                        "encoder_num_hidden_layers", "depth", "layers"),  # Kosmos-2's text decoder: layers
        "num_heads": g("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
                       "attention_heads", "encoder_num_attention_heads"),
        "num_kv_heads": (1 if cfg.get("multi_query") else g("num_key_value_heads", "num_attention_heads",
                                                            "n_head", "n_heads", "num_heads",
                                                            "encoder_attention_heads", "attention_heads",
                                                            "encoder_num_attention_heads")),
        "hidden_size": g("hidden_size", "n_embd", "d_model", "dim", "emb_dim", "embed_dim",  # Kosmos-2: embed_dim
                         "hidden_dim"),  # Granite Speech's conformers
        "vocab_size": g("vocab_size") if spec["kind"] in ("decoder", "encoder", "vlm", *CROSS) else None,
        # integer inputs that are no token ids (Mllama's aspect_ratio_ids): their range, for feeds_from_manifest
        "int_ranges": {n: list(v[1:3]) for n, v in spec.get("vision_inputs", {}).items() if v[0] == "ints"},
        "features": spec["features"] + {"dyn_mask": ["dynamic-shapes", "mask-input"],
                                        "static_nomask": ["static-shapes"],
                                        "kv": ["dynamic-shapes", "kv-cache"],
                                        "optimum": ["dynamic-shapes", "torchscript-exporter"]
                                        + (["kv-cache"] if spec["kind"] in ("decoder", *CROSS) else []),
                                        "torchscript": ["dynamic-shapes", "torchscript-exporter"],
                                        "torchscript_kv": ["dynamic-shapes", "torchscript-exporter",
                                                           "kv-cache"],
                                        "noopt": ["dynamic-shapes", "mask-input", "unoptimized-export"],
                                        "latest_opset": ["dynamic-shapes", "mask-input", "opset-23"],
                                        "kv_latest_opset": ["dynamic-shapes", "kv-cache", "opset-23"],
                                        "static_cache": ["dynamic-shapes", "kv-cache", "static-cache"],
                                        "converted_half": ["dynamic-shapes", "mask-input", "fp16-converted"],
                                        **{s: ["dynamic-shapes", "torchscript-exporter", "older-transformers"]
                                           + (["kv-cache"] if s.endswith("_kv") else ["mask-input"])
                                           + (["sdpa"] if "sdpa" in s else ["eager-attention"])
                                           for s in LEGACY_ATTN}, **EXPORT_FEATURES}[style],
        "opset": opsets.get("ai.onnx"), "opset_imports": opsets,
        "inputs": _io(proto.graph.input), "outputs": _io(proto.graph.output),
        "nodes": len(proto.graph.node), "bytes": path.stat().st_size, "sha256": _sha256(path),
        "seed": SEED, "postprocess": "node metadata_props and doc_string stripped",
    }
    if isinstance(entry["num_heads"], list):  # per-stage heads (Swin, Segformer): one attention block per depth
        entry["attention_blocks"] = sum(cfg["depths"] if "depths" in cfg else cfg["depth"])  # CvT: depth
        entry["num_heads"] = entry["num_kv_heads"] = entry["num_heads"][0]
        width = cfg["embed_dim"] if "embed_dim" in cfg else cfg.get("hidden_sizes", entry["hidden_size"])  # HTSAT
        entry["hidden_size"] = width[0] if isinstance(width, list) else width  # CvT: per-stage embed_dim
    if entry["hidden_size"] is None and "hidden_sizes" in cfg:  # per-stage widths, one head count (MobileViT)
        entry["hidden_size"] = cfg["hidden_sizes"][0]
    entry["head_dim"] = cfg.get("head_dim") or cfg.get("d_kv") or (  # no heads: attention-free (Falcon-Mamba)
        entry["hidden_size"] // entry["num_heads"] if entry["num_heads"] else None)
    if spec["kind"] in CROSS:  # self- and cross-attention per layer
        entry["attention_blocks"] = 2 * entry["num_layers"]
    kinds = cfg.get("layer_types") or ["attention" if t == "attention" else "recurrent"
                                       for t in cfg.get("block_types", ())]
    softmax = [t for t in kinds if "attention" in t and not t.startswith("linear")]
    if len(softmax) < len(kinds):  # hybrids (LFM2's conv, Qwen3-Next's linear layers): softmax attention only
        entry["attention_blocks"] = len(softmax)
    if "attention_blocks" in spec:  # the spec knows better (holdout_specs: Funnel has no layer count)
        entry["attention_blocks"] = spec["attention_blocks"]
    entry.update(extra)
    if "audio_samples" in spec:  # a waveform's length the stem needs (Moonshine): Optimum's is symbolic
        entry["audio_samples"] = spec["audio_samples"]
    entry["ort_check"] = ort_check(path, entry)
    return entry


def plan_holdout(archs, styles, sweep=1, dtype="float32"):
    """--holdout: the hold-out architectures in their spec styles, and the corpus architectures of
    holdout_specs.STYLE_ARCHS in the hold-out styles (trained weights). Sweep 2 (--holdout 2):
    HOLDOUT2 and STYLE_ARCHS2; with --dtype float16 only the fp16 files of HALF_ARCHS2 (sweep 9: HALF5D). Sweep 3: HOLDOUT3;
    sweep 4: HOLDOUT4 (optimum style)."""
    own_set, style_archs = {1: (HOLDOUT, STYLE_ARCHS), 2: (HOLDOUT2, STYLE_ARCHS2), 3: (HOLDOUT3, {}),
                            4: (HOLDOUT4, {}), 5: (HOLDOUT4B, {}), 8: (HOLDOUT5C, {})}.get(sweep, (HOLDOUT_SETS[sweep], {}))
    half_styles = {}  # a half plan given as {arch: styles} (HALF31) names its own; a set of names takes the spec's
    if dtype != "float32":
        own_set, style_archs = {9: HALF5D, 16: HALF9B, 35: HALF23, 37: HALF25, 39: HALF27,
                                40: HALF28, 41: HALF29, 42: HALF30, 43: HALF31, 44: HALF32, 45: HALF33, 46: HALF34, 47: HALF35, 48: HALF36, 49: HALF37, 50: HALF38}.get(sweep, {}), \
            {2: HALF_ARCHS2, 11: BF16_ARCHS6B}.get(sweep, {})
        half_styles = own_set if isinstance(own_set, dict) else {}
    for style in styles or STYLES + tuple(HOLDOUT_STYLES):
        for arch in archs:
            own = half_styles.get(arch) or SPECS[arch].get("styles") or ()
            if (arch in own_set and style in own) or arch in style_archs.get(style, ()):
                yield arch, style, "trained"


def plan(archs, styles, weights_list, dtype="float32"):
    """Style-major order, trained weights first: an interrupted run still has every architecture.
    styles None: the corpus's own, each architecture's spec styles (else all but torchscript_kv).
    A non-fp32 dtype exports decoders only (what is run in half precision)."""
    for weights in weights_list:
        for style in styles or STYLES:
            for arch in archs:
                if dtype != "float32" and SPECS[arch]["kind"] != "decoder":
                    continue
                if style in KV_STYLES and SPECS[arch]["kind"] not in ("decoder", *CROSS):
                    continue
                own = SPECS[arch].get("styles")
                if (own and style not in own) or (styles is None and not own and style == "torchscript_kv"):
                    continue
                if weights == "default" and (style != "dyn_mask" or arch not in DEFAULT_WEIGHTS):
                    continue
                yield arch, style, weights


def _record(path: Path, name: str, entry: dict | None, reason: str | None) -> dict:
    """Merge one result into the manifest under a file lock (several shards may run at once)."""
    from filelock import FileLock

    with FileLock(str(Path(tempfile.gettempdir()) / "export_corpus.manifest.lock")):
        manifest = json.loads(path.read_text()) if path.exists() else {}
        manifest["about"] = ("Made by tools/export_corpus.py; file names <arch>__<style>__<weights>.onnx. "
                             "'failed' holds the exports that could not be made, with the reason.")
        manifest["example_dims"] = DIM_VALUES
        files, failed = manifest.setdefault("files", {}), manifest.setdefault("failed", {})
        if entry is None:
            files.pop(name + ".onnx", None)
            failed[name] = reason
        else:
            failed.pop(name, None)
            files[name + ".onnx"] = entry
        manifest["files"], manifest["failed"] = dict(sorted(files.items())), dict(sorted(failed.items()))
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, path)
    return manifest


def _export_one(arch, style, weights, name, path, mpath, head_dim=16, dtype="float32", sweep=0) -> dict:
    try:
        extra = export_optimum(arch, weights, path, head_dim, dtype, sweep) if style == "optimum" else \
            export_torch(arch, style, weights, path, dtype)
        entry = make_entry(arch, style, weights + DTYPES[dtype], path, extra)
    except Exception as exc:  # one failure must not stop the corpus: it is recorded
        reason = _one_line(exc)
        print(f"{name}: FAILED {reason}", flush=True)
        path.unlink(missing_ok=True)
        path.with_name(f".{path.name}.tmp").unlink(missing_ok=True)
        return _record(mpath, name, None, reason)
    print(f"{name}: {entry['nodes']} nodes, {entry['bytes'] / 1e3:.0f} kB, opset {entry['opset']}", flush=True)
    return _record(mpath, name, entry, None)




def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_legacy_export"]:  # inside a tools/export_venv.sh venv (export_legacy)
        SPECS.update(HOLDOUT4B)
        SPECS.update(HOLDOUT5C)
        SPECS.update(HOLDOUT_SETS[9])
        SPECS.update(HOLDOUT6B)
        SPECS.update(HOLDOUT_SETS[32])
        SPECS.update(HOLDOUT_SETS[33])
        SPECS.update(HOLDOUT_SETS[36])
        if "EXPORT_CORPUS_CONFIG" in os.environ:
            SPECS[argv[1]] = dict(SPECS[argv[1]], config=json.loads(os.environ["EXPORT_CORPUS_CONFIG"]))
        print(json.dumps(export_torch(argv[1], argv[2], argv[3], Path(argv[4]), *argv[5:6])))  # [dtype]
        return 0
    if argv[:1] == ["_optimum_save"]:
        _optimum_save(*argv[1:6])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--only", nargs="*", default=None, help="architectures (default: all)")
    ap.add_argument("--styles", nargs="*", default=None, choices=STYLES + tuple(HOLDOUT_STYLES),
                    help="default: the corpus's (each architecture's spec styles, else all but torchscript_kv)")
    ap.add_argument("--weights", nargs="*", default=["trained", "default"], choices=["trained", "default"])
    ap.add_argument("--list", action="store_true", help="print the planned files and exit")
    ap.add_argument("--missing", action="store_true",
                    help="skip what the manifest lists (made or failed) and what another run is making")
    ap.add_argument("--retry-failed", action="store_true", help="with --missing: retry recorded failures")
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES),
                    help="float16 / bfloat16: decoders exported from the half-precision model, weights tag "
                         "trained16 / trainedbf16")
    ap.add_argument("--head-dim", type=int, default=16, choices=[16, 64],
                    help="64: the decoders of corpus_specs.KV64_ARCHS at head size 64 (see above)")
    ap.add_argument("--holdout", type=int, nargs="?", const=1, default=0, choices=sorted(HOLDOUT_SETS),
                    help="the hold-out set of tools/holdout_specs.py (architectures and export styles the "
                         "rules were not tuned on) instead of the corpus; 2: the second sweep, 3: the third, "
                         "4: the fourth's part A (Optimum), 5: its part B (older transformers), "
                         "8: the fifth's part C (torch 2.9.1 / 2.14.1 exporters), "
                         "9: its part D (transformers 4.48 / 4.53), "
                         "10: the sixth's part A (decoders), "
                         "11: the sixth's part B (onnxscript 0.6.0 / 0.6.2, bf16 decoders), "
                         "12: the seventh's part A (encoders, seq2seq parts, speech, vision), "
                         "14: the eighth's part A (hand-written modules, tools/handwritten_models.py), "
                         "16: the ninth's part B (vision-language models, DETR-likes, hybrid decoders), "
                         "18: the tenth's part C (VLM language models with a KV cache), "
                         "21: the thirteenth (export options), "
                         "22: the fourteenth (PEFT adapters, not merged), "
                         "23: the fifteenth's part A (rotary configurations), "
                         "30: the eighteenth (Optimum on the later architectures), "
                         "32: the twentieth (torch 2.15 exporter drift), "
                         "33: the twenty-first (transformers 5.25 drift and architectures no set had); "
                         "use with --out")
    ns = ap.parse_args(argv)
    if ns.holdout:
        for earlier in HALF_FROM.get(ns.holdout, ()) if ns.dtype != "float32" else ():
            SPECS.update(HOLDOUT_SETS[earlier])  # a float16 plan over an earlier set's architectures too
        SPECS.update(HOLDOUT_SETS[ns.holdout])
    elif set(ns.styles or ()) & set(HOLDOUT_STYLES):
        print("error: the hold-out styles need --holdout", file=sys.stderr)
        return 2
    if ns.head_dim == 64:
        # a hold-out spec of a corpus architecture (llama_tf453) has that architecture's head-64 config
        bad = sorted(a for a in ns.only or () if SPECS.get(a, {}).get("base_arch", a) not in KV64_ARCHS)
        if bad:
            print(f"error: no head-dim-64 config for {', '.join(bad)}; known: {', '.join(KV64_ARCHS)}",
                  file=sys.stderr)
            return 2
        ns.only = ns.only or list(KV64_ARCHS)
        use_head_dim(64, ns.only)
    unknown = sorted(set(ns.only or ()) - set(SPECS))
    if unknown:
        print(f"error: unknown architecture(s) {', '.join(unknown)}; known: {', '.join(SPECS)}", file=sys.stderr)
        return 2
    todo = list(plan_holdout(ns.only or list(SPECS), ns.styles, ns.holdout, ns.dtype) if ns.holdout else
                plan(ns.only or list(SPECS), ns.styles, ns.weights, ns.dtype))
    tag = DTYPES[ns.dtype]
    if ns.list:
        for arch, style, weights in todo:
            print(f"{arch}{'_hd64' if ns.head_dim == 64 else ''}__{style}__{weights}{tag}.onnx")
        return 0
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    mpath = out / "manifest.json"
    manifest = {"files": {}, "failed": {}}
    for arch, style, weights in todo:
        name = f"{arch}{'_hd64' if ns.head_dim == 64 else ''}__{style}__{weights}{tag}"
        path = out / f"{name}.onnx"
        claim = out / f".{name}.claim"
        if ns.missing:  # several shards may share one list: skip what another made or is making
            done = json.loads(mpath.read_text()) if mpath.exists() else {}
            if (name + ".onnx" in done.get("files", {}) and path.exists()) or \
                    (name in done.get("failed", {}) and not ns.retry_failed):
                continue
            try:
                os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                continue
        try:
            manifest = _export_one(arch, style, weights, name, path, mpath, ns.head_dim, ns.dtype, ns.holdout)
        finally:
            claim.unlink(missing_ok=True)
    total = sum(e["bytes"] for e in manifest["files"].values())
    print(f"corpus: {len(manifest['files'])} files, {total / 1e6:.1f} MB, {len(manifest['failed'])} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
