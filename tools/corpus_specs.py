"""The architectures of the export corpus (tools/export_corpus.py): tiny configs and what each shows.

Sizes: hidden 32 (<= 64), 2 layers, vocab 128, 128 positions, head_dim 16 (query heads times
head_dim may exceed hidden where the config has a head_dim, as in Gemma); intermediate 64.
`features` name the idioms a fusion has to recognise in the export. DEFAULT_WEIGHTS: the
architectures also exported with plain (untouched) init, one or more per family that has norms.
"""

from __future__ import annotations

LAYERS, HIDDEN, VOCAB, POSITIONS, FFN = 2, 32, 128, 128, 64
IMAGE, PATCH, MELS, AUDIO_POS = 32, 8, 16, 16
TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
DEC = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
           max_position_embeddings=POSITIONS, **TOKENS)
GQA = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16)
ENC = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
           num_attention_heads=2, max_position_embeddings=POSITIONS)
VIS = dict(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=2,
           image_size=IMAGE, patch_size=PATCH, num_channels=3)


DEFAULT_WEIGHTS = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "phi3", "gpt_neox", "gpt2", "bloom", "mpt",
                   "falcon", "bert", "albert", "t5_encoder", "whisper_encoder", "vit", "clip_vision")


def _s(kind, config, model, kw, features, model_type, ort_type=None, part=None, task=None, styles=None):
    """kind: decoder | encoder (text) | vision | speech | seq2seq_decoder (the decoder of an
    encoder-decoder model: encoder_hidden_states in, self- and cross-attention); part: the submodule
    exported (encoder, decoder); styles: the export styles made for it (None: all)."""
    return dict(kind=kind, config_class=config, model_class=model, config=kw, features=features,
                model_type=model_type, ort_model_type=ort_type, part=part, optimum_task=task, styles=styles)


NEW_STYLES = ("dyn_mask", "kv", "optimum")  # the styles of the architectures added after the first 30
ALL_BUT_OPTIMUM = ("dyn_mask", "kv", "static_nomask", "torchscript")  # Optimum has no export config
T5 = dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=FFN, num_layers=LAYERS, num_heads=2,
          relative_attention_num_buckets=8, decoder_start_token_id=0)
BART = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=FFN,
            decoder_ffn_dim=FFN, max_position_embeddings=POSITIONS, **TOKENS)
WHISPER = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=FFN,
               decoder_ffn_dim=FFN, num_mel_bins=MELS, max_source_positions=AUDIO_POS,
               max_target_positions=AUDIO_POS, decoder_start_token_id=1, **TOKENS)


SPECS = {
    # decoders
    "llama": _s("decoder", "LlamaConfig", "LlamaForCausalLM", dict(DEC, **GQA),
                ["gqa", "rope-full", "rmsnorm", "swiglu"], "llama", "gpt2"),
    "mistral": _s("decoder", "MistralConfig", "MistralForCausalLM", dict(DEC, **GQA, sliding_window=4),
                  ["gqa", "rope-full", "rmsnorm", "swiglu", "sliding-window"], "mistral", "gpt2"),
    "qwen2": _s("decoder", "Qwen2Config", "Qwen2ForCausalLM", dict(DEC, **GQA),
                ["gqa", "rope-full", "rmsnorm", "swiglu", "qkv-bias"], "qwen2", "gpt2"),
    "qwen3": _s("decoder", "Qwen3Config", "Qwen3ForCausalLM", dict(DEC, **GQA),
                ["gqa", "rope-full", "rmsnorm", "swiglu", "qk-norm"], "qwen3", "gpt2"),
    "gemma": _s("decoder", "GemmaConfig", "GemmaForCausalLM",
                dict(DEC, num_attention_heads=4, num_key_value_heads=1, head_dim=16),
                ["mqa", "rope-full", "rmsnorm-1p", "geglu", "embed-scale"], "gemma", "gpt2"),
    "gemma2": _s("decoder", "Gemma2Config", "Gemma2ForCausalLM",
                 dict(DEC, **GQA, sliding_window=4, attn_logit_softcapping=50.0,
                      final_logit_softcapping=30.0, query_pre_attn_scalar=16),
                 ["gqa", "rope-full", "rmsnorm-1p", "geglu", "softcap", "sliding-window",
                  "sandwich-norm"], "gemma2", "gpt2"),
    "olmo2": _s("decoder", "Olmo2Config", "Olmo2ForCausalLM",
                dict(DEC, num_attention_heads=2, num_key_value_heads=2),
                ["mha", "rope-full", "rmsnorm", "swiglu", "qk-norm", "post-norm"], "olmo2", "gpt2"),
    "phi3": _s("decoder", "Phi3Config", "Phi3ForCausalLM",
               dict(DEC, num_attention_heads=2, num_key_value_heads=2, original_max_position_embeddings=128),
               ["mha", "rope-full", "rmsnorm", "swiglu", "fused-qkv", "fused-gate-up"], "phi3", "phi"),
    "phi": _s("decoder", "PhiConfig", "PhiForCausalLM",
              dict(DEC, num_attention_heads=2, partial_rotary_factor=0.5),
              ["mha", "rope-partial", "layernorm", "gelu-tanh", "parallel-residual", "qkv-bias"],
              "phi", "phi"),
    "gpt_neox": _s("decoder", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                   dict(DEC, num_attention_heads=2, rotary_pct=0.25, use_parallel_residual=True),
                   ["mha", "rope-partial", "layernorm", "gelu", "parallel-residual", "fused-qkv"],
                   "gpt_neox", "gpt_neox"),
    "gptj": _s("decoder", "GPTJConfig", "GPTJForCausalLM",
               dict(vocab_size=VOCAB, n_embd=HIDDEN, n_inner=FFN, n_layer=LAYERS, n_head=2, rotary_dim=8,
                    n_positions=POSITIONS, **TOKENS),
               ["mha", "rope-interleaved", "rope-partial", "layernorm", "gelu-tanh", "parallel-residual"],
               "gptj", "gpt2"),
    "gpt2": _s("decoder", "GPT2Config", "GPT2LMHeadModel",
               dict(vocab_size=VOCAB, n_embd=HIDDEN, n_inner=FFN, n_layer=LAYERS, n_head=2,
                    n_positions=POSITIONS, **TOKENS),
               ["mha", "learned-positions", "layernorm", "gelu-tanh", "fused-qkv", "conv1d"],
               "gpt2", "gpt2"),
    "opt": _s("decoder", "OPTConfig", "OPTForCausalLM",
              dict(vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=FFN, num_hidden_layers=LAYERS,
                   num_attention_heads=2, max_position_embeddings=POSITIONS, word_embed_proj_dim=HIDDEN,
                   **TOKENS),
              ["mha", "learned-positions", "layernorm", "relu", "qkv-bias"], "opt", "gpt2"),
    "bloom": _s("decoder", "BloomConfig", "BloomForCausalLM",
                dict(vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS, n_head=2, **TOKENS),
                ["mha", "alibi", "layernorm", "gelu-tanh", "fused-qkv", "embed-layernorm"],
                "bloom", "gpt2"),
    "mpt": _s("decoder", "MptConfig", "MptForCausalLM",
              dict(vocab_size=VOCAB, d_model=HIDDEN, n_heads=2, n_layers=LAYERS, expansion_ratio=2,
                   max_seq_len=POSITIONS, **TOKENS),
              ["mha", "alibi", "layernorm-nobias", "gelu", "fused-qkv"], "mpt", "gpt2"),
    "falcon": _s("decoder", "FalconConfig", "FalconForCausalLM",
                 dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
                      multi_query=True, parallel_attn=True, new_decoder_architecture=False, alibi=False,
                      max_position_embeddings=POSITIONS, ffn_hidden_size=FFN, **TOKENS),
                 ["mqa", "rope-full", "layernorm", "gelu", "parallel-residual", "fused-qkv"],
                 "falcon", "gpt2"),
    "gpt_bigcode": _s("decoder", "GPTBigCodeConfig", "GPTBigCodeForCausalLM",
                      dict(vocab_size=VOCAB, n_embd=HIDDEN, n_inner=FFN, n_layer=LAYERS, n_head=2,
                           n_positions=POSITIONS, multi_query=True, **TOKENS),
                      ["mqa", "learned-positions", "layernorm", "gelu-tanh", "fused-qkv"],
                      "gpt_bigcode", "gpt2"),
    "starcoder2": _s("decoder", "Starcoder2Config", "Starcoder2ForCausalLM",
                     dict(DEC, num_attention_heads=2, num_key_value_heads=1, sliding_window=4, use_bias=True),
                     ["mqa", "rope-full", "layernorm", "gelu-tanh", "qkv-bias", "sliding-window"],
                     "starcoder2", "gpt2", styles=ALL_BUT_OPTIMUM),
    "stablelm": _s("decoder", "StableLmConfig", "StableLmForCausalLM",
                   dict(DEC, num_attention_heads=2, num_key_value_heads=2, qk_layernorm=True, use_qkv_bias=True),
                   ["mha", "rope-partial", "layernorm", "swiglu", "qk-layernorm-per-head", "qkv-bias"],
                   "stablelm", "gpt2", styles=NEW_STYLES + ALL_BUT_OPTIMUM[2:]),
    "cohere": _s("decoder", "CohereConfig", "CohereForCausalLM", dict(DEC, **GQA),
                 ["gqa", "rope-interleaved", "layernorm-nobias", "swiglu", "parallel-residual", "logit-scale"],
                 "cohere", "gpt2", styles=NEW_STYLES + ALL_BUT_OPTIMUM[2:]),
    "granite": _s("decoder", "GraniteConfig", "GraniteForCausalLM",
                  dict(DEC, **GQA, embedding_multiplier=12.0, residual_multiplier=0.22,
                       attention_multiplier=0.0625, logits_scaling=8.0),
                  ["gqa", "rope-full", "rmsnorm", "swiglu", "attention-multiplier", "residual-multiplier"],
                  "granite", "gpt2", styles=NEW_STYLES + ALL_BUT_OPTIMUM[2:]),
    "gemma3": _s("decoder", "Gemma3TextConfig", "Gemma3ForCausalLM",
                 dict(DEC, **GQA, sliding_window=4, query_pre_attn_scalar=16,
                      layer_types=["sliding_attention", "full_attention"]),
                 ["gqa", "rope-full", "rope-two-bases", "rmsnorm-1p", "geglu", "qk-norm", "sliding-window",
                  "sandwich-norm", "embed-scale"], "gemma3_text", "gpt2", styles=NEW_STYLES + ALL_BUT_OPTIMUM[2:]),
    "mixtral": _s("decoder", "MixtralConfig", "MixtralForCausalLM",
                  # batched_mm: per-token expert weights by Gather (the default grouped_mm is a custom op
                  # the ONNX exporters do not know; eager loops over data-dependent token lists)
                  dict(DEC, **GQA, num_local_experts=4, num_experts_per_tok=2,
                       experts_implementation="batched_mm"),
                  # no torchscript: its export (414 kB: every expert's weights gathered per token) is
                  # over the corpus's per-file size
                  ["gqa", "rope-full", "rmsnorm", "swiglu", "moe"], "mixtral", "gpt2", styles=ALL_BUT_OPTIMUM[:3]),
    "qwen2_moe": _s("decoder", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                    dict(DEC, num_attention_heads=2, num_key_value_heads=1, num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=32, shared_expert_intermediate_size=64,
                         experts_implementation="batched_mm"),
                    ["mqa", "rope-full", "rmsnorm", "swiglu", "qkv-bias", "moe", "shared-expert-gated"],
                    "qwen2_moe", "gpt2", styles=("dyn_mask", "kv", "static_nomask")),  # not in Optimum
    # rope_scaling variants: the cos/sin tables change (llama3: per-frequency rescaled inv_freq;
    # yarn: blended inv_freq and an attention factor multiplying cos and sin)
    "llama_rope3": _s("decoder", "LlamaConfig", "LlamaForCausalLM",
                      dict(DEC, **GQA, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                         high_freq_factor=4.0, original_max_position_embeddings=32)),
                      ["gqa", "rope-full", "rope-scaling-llama3", "rmsnorm", "swiglu"], "llama", "gpt2",
                      styles=NEW_STYLES),
    "llama_yarn": _s("decoder", "LlamaConfig", "LlamaForCausalLM",
                     dict(DEC, **GQA, rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                        original_max_position_embeddings=32)),
                     ["gqa", "rope-full", "rope-scaling-yarn", "scaled-cos-sin", "rmsnorm", "swiglu"], "llama",
                     "gpt2", styles=NEW_STYLES),
    # longrope ("su"): short or long per-frequency factors chosen by the sequence length (> 32 here)
    "phi3_longrope": _s("decoder", "Phi3Config", "Phi3ForCausalLM",
                        dict(DEC, num_attention_heads=2, num_key_value_heads=2, original_max_position_embeddings=32,
                             rope_scaling=dict(type="longrope",
                                               short_factor=[1.0, 1.1, 1.2, 1.3, 1.5, 1.8, 2.2, 2.6],
                                               long_factor=[1.0, 1.5, 2.0, 3.0, 4.5, 6.0, 8.0, 10.0])),
                        ["mha", "rope-full", "rope-scaling-longrope", "scaled-cos-sin", "rmsnorm", "swiglu",
                         "fused-qkv", "fused-gate-up"], "phi3", "phi", styles=NEW_STYLES),
    "nemotron": _s("decoder", "NemotronConfig", "NemotronForCausalLM", dict(DEC, **GQA, partial_rotary_factor=0.5),
                   ["gqa", "rope-partial", "layernorm-1p", "relu2"], "nemotron", "gpt2", styles=NEW_STYLES),
    "olmo": _s("decoder", "OlmoConfig", "OlmoForCausalLM",
               dict(DEC, num_attention_heads=2, num_key_value_heads=2, clip_qkv=8.0),
               ["mha", "rope-full", "layernorm-nonparametric", "swiglu", "clip-qkv"], "olmo", "gpt2",
               styles=NEW_STYLES),
    "persimmon": _s("decoder", "PersimmonConfig", "PersimmonForCausalLM",
                    dict(DEC, num_attention_heads=2, qk_layernorm=True, partial_rotary_factor=0.5),
                    ["mha", "rope-partial", "layernorm", "relu2", "qk-layernorm-per-head", "qkv-bias",
                     "fused-qkv"], "persimmon", "gpt2", styles=("dyn_mask", "kv", "static_nomask")),
    # MLA: low-rank q and kv projections, rope on a separate 8-wide slice of q/k (interleaved),
    # v head size differs from the q/k head size (16 + 8); first layer dense, second MoE
    "deepseek_v3": _s("decoder", "DeepseekV3Config", "DeepseekV3ForCausalLM",
                      dict(DEC, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=16,
                           qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4,
                           num_experts_per_tok=2, n_group=1, topk_group=1, moe_intermediate_size=32,
                           first_k_dense_replace=1, n_shared_experts=1, experts_implementation="batched_mm"),
                      ["mha", "mla", "rope-interleaved", "rope-partial", "rmsnorm", "swiglu", "moe",
                       "v-head-dim-differs"], "deepseek_v3", "gpt2", styles=NEW_STYLES),
    "glm": _s("decoder", "GlmConfig", "GlmForCausalLM", dict(DEC, **GQA, partial_rotary_factor=0.5),
              ["gqa", "rope-interleaved", "rope-partial", "rmsnorm", "swiglu", "fused-gate-up", "qkv-bias"],
              "glm", "gpt2", styles=NEW_STYLES),
    # attention sinks (a learned per-head logit column in the softmax), MoE with biased experts,
    # sliding-window and full layers alternating, YaRN
    "gpt_oss": _s("decoder", "GptOssConfig", "GptOssForCausalLM",
                  dict(DEC, **GQA, num_local_experts=3, num_experts_per_tok=2, sliding_window=4,
                       layer_types=["sliding_attention", "full_attention"], experts_implementation="batched_mm",
                       rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32,
                                         beta_fast=32.0, beta_slow=1.0)),
                  ["gqa", "rope-full", "rope-scaling-yarn", "rmsnorm", "attention-sinks", "moe", "sliding-window"],
                  "gpt_oss", "gpt2", styles=("dyn_mask", "kv")),  # Optimum's export: 369 kB, over the file size
    "exaone4": _s("decoder", "Exaone4Config", "Exaone4ForCausalLM",
                  dict(DEC, **GQA, sliding_window=4, sliding_window_pattern=2,
                       layer_types=["sliding_attention", "full_attention"]),
                  ["gqa", "rope-full", "nope-layers", "rmsnorm", "swiglu", "qk-norm", "post-norm", "sliding-window"],
                  "exaone4", "gpt2", styles=("dyn_mask", "kv", "static_nomask")),  # not in Optimum
    "smollm3": _s("decoder", "SmolLM3Config", "SmolLM3ForCausalLM",
                  dict(DEC, num_attention_heads=2, num_key_value_heads=1, no_rope_layer_interval=2),
                  ["mqa", "rope-full", "nope-layers", "rmsnorm", "swiglu"], "smollm3", "gpt2", styles=NEW_STYLES),
    # decoders of encoder-decoder models (cross-attention over encoder_hidden_states)
    "t5_decoder": _s("seq2seq_decoder", "T5Config", "T5ForConditionalGeneration", dict(T5),
                     ["mha", "cross-attention", "causal", "relative-position", "rmsnorm", "relu", "no-scale"],
                     "t5", "t5", part="decoder", task="text2text-generation-with-past",
                     styles=NEW_STYLES + ("torchscript_kv",)),  # dynamo fails on T5 (a view): recorded
    "bart_decoder": _s("seq2seq_decoder", "BartConfig", "BartForConditionalGeneration", dict(BART),
                       ["mha", "cross-attention", "causal", "learned-positions", "layernorm", "gelu-erf",
                        "post-norm", "qkv-bias"],
                       "bart", "bart", part="decoder", task="text2text-generation-with-past", styles=NEW_STYLES),
    # Optimum's dummy inputs: 3000 audio frames (max_source_positions 1500, Whisper's; the encoder
    # table it sizes is not part of the decoder export) and more than 16 decoder positions
    "whisper_decoder": _s("seq2seq_decoder", "WhisperConfig", "WhisperForConditionalGeneration",
                          dict(WHISPER, max_source_positions=1500, max_target_positions=POSITIONS),
                          ["mha", "cross-attention", "causal", "learned-positions", "layernorm", "gelu-erf",
                           "no-encoder-mask"], "whisper", "bart", part="decoder",
                          task="automatic-speech-recognition-with-past", styles=NEW_STYLES),
    # text encoders
    "bert": _s("encoder", "BertConfig", "BertModel", dict(ENC, type_vocab_size=2),
               ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-erf", "post-norm"],
               "bert", "bert"),
    "roberta": _s("encoder", "RobertaConfig", "RobertaModel",
                  dict(ENC, max_position_embeddings=POSITIONS + 2, type_vocab_size=1, pad_token_id=1),
                  ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-erf", "post-norm"],
                  "roberta", "bert"),
    "distilbert": _s("encoder", "DistilBertConfig", "DistilBertModel",
                     dict(vocab_size=VOCAB, dim=HIDDEN, hidden_dim=FFN, n_layers=LAYERS, n_heads=2,
                          max_position_embeddings=POSITIONS),
                     ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-erf", "post-norm"],
                     "distilbert", "bert"),
    "albert": _s("encoder", "AlbertConfig", "AlbertModel", dict(ENC, embedding_size=16, type_vocab_size=2),
                 ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-tanh", "shared-layers",
                  "embed-projection"], "albert", "bert"),
    "deberta_v2": _s("encoder", "DebertaV2Config", "DebertaV2Model",
                     dict(ENC, type_vocab_size=0, relative_attention=True, position_buckets=32,
                          pos_att_type=["p2c", "c2p"], max_relative_positions=-1),
                     ["mha", "padding-mask", "relative-position", "layernorm", "gelu-erf"],
                     "deberta-v2", "bert"),
    "modernbert": _s("encoder", "ModernBertConfig", "ModernBertModel",
                     dict(ENC, global_attn_every_n_layers=2, local_attention=4, pad_token_id=0,
                          bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
                     ["mha", "padding-mask", "rope-full", "layernorm-nobias", "geglu", "sliding-window",
                      "fused-qkv"], "modernbert", "bert"),
    # encoder-decoder encoders
    "t5_encoder": _s("encoder", "T5Config", "T5EncoderModel",
                     dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=FFN, num_layers=LAYERS, num_heads=2,
                          relative_attention_num_buckets=8, decoder_start_token_id=0),
                     ["mha", "padding-mask", "relative-position", "rmsnorm", "relu", "no-scale"],
                     "t5", "t5", task="text2text-generation"),
    "bart_encoder": _s("encoder", "BartConfig", "BartModel",
                       dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=FFN,
                            decoder_ffn_dim=FFN, max_position_embeddings=POSITIONS, **TOKENS),
                       ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-erf", "post-norm"],
                       "bart", "bart", part="encoder", task="text2text-generation"),
    "whisper_encoder": _s("speech", "WhisperConfig", "WhisperModel",
                          dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=FFN,
                               decoder_ffn_dim=FFN, num_mel_bins=MELS, max_source_positions=AUDIO_POS,
                               max_target_positions=AUDIO_POS, decoder_start_token_id=1, **TOKENS),
                          ["mha", "conv-frontend", "sinusoidal-positions", "layernorm", "gelu-erf"],
                          "whisper", "bart", part="encoder", task="automatic-speech-recognition"),
    # vision encoders
    "vit": _s("vision", "ViTConfig", "ViTModel", dict(VIS),
              ["mha", "patch-embed", "cls-token", "learned-positions", "layernorm", "gelu-erf"], "vit", "vit"),
    "dinov2": _s("vision", "Dinov2Config", "Dinov2Model", dict(VIS, mlp_ratio=2),
                 ["mha", "patch-embed", "cls-token", "interpolated-positions", "layernorm", "gelu-erf",
                  "layer-scale"], "dinov2", "vit"),
    "clip_vision": _s("vision", "CLIPVisionConfig", "CLIPVisionModel", dict(VIS, projection_dim=HIDDEN),
                      ["mha", "patch-embed", "cls-token", "pre-norm", "layernorm", "quick-gelu"],
                      "clip_vision_model", "clip"),
    "siglip_vision": _s("vision", "SiglipVisionConfig", "SiglipVisionModel", dict(VIS),
                        ["mha", "patch-embed", "layernorm", "gelu-tanh", "attention-pool-head"],
                        "siglip_vision_model", "vit"),
}


# Head size 64 (export_corpus.py --head-dim 64): the smallest head size the PagedAttention kernels
# take (plugins/paged_attention.yaml), for the trt O4 paged-KV coverage matrix (docs/paged_kv.md).
# Hidden 128, 2 query heads; the GQA/MQA families keep fewer kv heads (1). Under 1 MB per file.
KV64_ARCHS = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gpt_neox", "falcon", "olmo2",
              "gpt2", "opt", "gpt_bigcode",
              "gpt_oss")  # sliding + full layers, sinks; its styles are dyn_mask and kv only
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "word_embed_proj_dim")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")


def head_dim_64(arch: str) -> dict:
    """The architecture's corpus config at head size 64 (hidden 128, 2 query heads)."""
    cfg = dict(SPECS[arch]["config"])
    for k in _HIDDEN_KEYS:
        if k in cfg:
            cfg[k] = 128
    for k in _HEAD_KEYS:
        if k in cfg:
            cfg[k] = 2
    if "num_key_value_heads" in cfg:  # grouped (GQA/MQA) stays grouped: 1 kv head, else 2
        orig = SPECS[arch]["config"]
        cfg["num_key_value_heads"] = 1 if orig["num_key_value_heads"] < orig["num_attention_heads"] else 2
    if "head_dim" in cfg:
        cfg["head_dim"] = 64
    if "query_pre_attn_scalar" in cfg:
        cfg["query_pre_attn_scalar"] = 64
    return cfg
