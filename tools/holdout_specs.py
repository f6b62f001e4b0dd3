"""Hold-out architectures and export styles: what the fusion rules were NOT tuned on.

tools/export_corpus.py --holdout adds these to corpus_specs.SPECS (same tiny sizes, trained-like
weights) and enables the hold-out styles below; without --holdout nothing here is planned, so the
corpus's own files and --list stay as they were. Typical use:

    python tools/export_corpus.py --holdout --out /tmp/holdout --only qwen3_moe helium --styles dyn_mask kv

Hold-out styles (dynamo unless named torchscript):
  noopt       dyn_mask with torch.onnx.export(optimize=False): the unoptimized graph users get
              from other torch versions (no constant folding, no onnxscript cleanup)
  latest_opset     dyn_mask at opset 23 (LATEST_OPSET; torch may emit ONNX Attention / RMSNormalization
                   natively there); style names carry no digits (the corpus's file-name pattern)
  kv_latest_opset  kv at opset 23
"""

from __future__ import annotations

from corpus_specs import DEC, ENC, FFN, GQA, HIDDEN, LAYERS, POSITIONS, TOKENS, VOCAB, _s

# hold-out style -> (the corpus style whose inputs and wrapper it uses, export options)
LATEST_OPSET = 23
HOLDOUT_STYLES = {"noopt": ("dyn_mask", dict(optimize=False)),
                  "latest_opset": ("dyn_mask", dict(opset_version=LATEST_OPSET)),
                  "kv_latest_opset": ("kv", dict(opset_version=LATEST_OPSET))}

DEC_KV = ("dyn_mask", "kv")
SEQ2SEQ = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=FFN,
               decoder_ffn_dim=FFN, max_position_embeddings=POSITIONS, decoder_start_token_id=2, **TOKENS)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, experts_implementation="batched_mm")
SLIDING = dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])

HOLDOUT = {
    # decoders
    "qwen3_moe": _s("decoder", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(DEC, **GQA, **MOE),
                    ["gqa", "rope-full", "rmsnorm", "qk-norm", "moe"], "qwen3_moe", "gpt2", styles=DEC_KV),
    "olmoe": _s("decoder", "OlmoeConfig", "OlmoeForCausalLM",
                dict(DEC, num_attention_heads=2, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                     experts_implementation="batched_mm"),
                ["mha", "rope-full", "rmsnorm", "qk-norm-full-width", "moe"], "olmoe", "gpt2", styles=DEC_KV),
    "granitemoe": _s("decoder", "GraniteMoeConfig", "GraniteMoeForCausalLM",
                     dict(DEC, **GQA, num_local_experts=4, num_experts_per_tok=2, experts_implementation="batched_mm",
                          embedding_multiplier=12.0,
                          residual_multiplier=0.22, attention_multiplier=0.0625, logits_scaling=8.0),
                     ["gqa", "rope-full", "rmsnorm", "attention-multiplier", "moe"], "granitemoe", "gpt2",
                     styles=DEC_KV),
    # o_proj takes hidden_size inputs: query heads x head_dim = hidden
    "helium": _s("decoder", "HeliumConfig", "HeliumForCausalLM",
                 dict(DEC, num_attention_heads=2, num_key_value_heads=1, head_dim=16),
                 ["gqa", "rope-interleaved", "rmsnorm", "swiglu"], "helium", "gpt2", styles=DEC_KV),
    "cohere2": _s("decoder", "Cohere2Config", "Cohere2ForCausalLM", dict(DEC, **GQA, **SLIDING),
                  ["gqa", "rope-interleaved", "layernorm-nobias", "parallel-residual", "sliding-window",
                   "nope-layers"], "cohere2", "gpt2", styles=DEC_KV),
    "glm4": _s("decoder", "Glm4Config", "Glm4ForCausalLM", dict(DEC, **GQA, partial_rotary_factor=0.5),
               ["gqa", "rope-interleaved", "rope-partial", "rmsnorm", "sandwich-norm", "fused-gate-up"],
               "glm4", "gpt2", styles=DEC_KV),
    "ministral": _s("decoder", "MinistralConfig", "MinistralForCausalLM", dict(DEC, **GQA, **SLIDING),
                    ["gqa", "rope-full", "rmsnorm", "swiglu", "sliding-window"], "ministral", "gpt2",
                    styles=DEC_KV),
    "olmo3": _s("decoder", "Olmo3Config", "Olmo3ForCausalLM",
                dict(DEC, num_attention_heads=2, num_key_value_heads=2, **SLIDING),
                ["mha", "rope-full", "rmsnorm", "qk-norm-full-width", "post-norm", "sliding-window"],
                "olmo3", "gpt2", styles=("dyn_mask",)),
    "hunyuan": _s("decoder", "HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", dict(DEC, **GQA),
                  ["gqa", "rope-full", "rmsnorm", "qk-norm"], "hunyuan_v1_dense", "gpt2", styles=("dyn_mask",)),
    "seed_oss": _s("decoder", "SeedOssConfig", "SeedOssForCausalLM", dict(DEC, **GQA),
                   ["gqa", "rope-full", "rmsnorm", "qkv-bias"], "seed_oss", "gpt2", styles=("dyn_mask",)),
    "arcee": _s("decoder", "ArceeConfig", "ArceeForCausalLM", dict(DEC, **GQA),
                ["gqa", "rope-full", "rmsnorm", "relu2"], "arcee", "gpt2", styles=("dyn_mask",)),
    "apertus": _s("decoder", "ApertusConfig", "ApertusForCausalLM", dict(DEC, **GQA),
                  ["gqa", "rope-full", "rmsnorm", "qk-norm", "xielu"], "apertus", "gpt2", styles=("dyn_mask",)),
    "ernie4_5": _s("decoder", "Ernie4_5Config", "Ernie4_5ForCausalLM", dict(DEC, **GQA),
                   ["gqa", "rope-interleaved", "rmsnorm", "swiglu"], "ernie4_5", "gpt2", styles=("dyn_mask",)),
    "vaultgemma": _s("decoder", "VaultGemmaConfig", "VaultGemmaForCausalLM",
                     dict(DEC, **GQA, query_pre_attn_scalar=16, sliding_window=4),
                     ["gqa", "rope-full", "rmsnorm-1p", "geglu", "softcap"], "vaultgemma", "gpt2",
                     styles=("dyn_mask",)),
    "gpt_neo": _s("decoder", "GPTNeoConfig", "GPTNeoForCausalLM",
                  dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=2, intermediate_size=FFN,
                       attention_types=[[["global", "local"], 1]], window_size=4,
                       max_position_embeddings=POSITIONS, **TOKENS),
                  ["mha", "learned-positions", "layernorm", "gelu-tanh", "no-scale", "sliding-window"],
                  "gpt_neo", "gpt2", styles=DEC_KV),
    "codegen": _s("decoder", "CodeGenConfig", "CodeGenForCausalLM",
                  dict(vocab_size=VOCAB, n_embd=HIDDEN, n_inner=FFN, n_layer=LAYERS, n_head=2, rotary_dim=8,
                       n_positions=POSITIONS, n_ctx=POSITIONS, **TOKENS),
                  ["mha", "rope-interleaved", "rope-partial", "layernorm", "fused-qkv-mp4", "parallel-residual"],
                  "codegen", "gpt2", styles=DEC_KV),
    "xglm": _s("decoder", "XGLMConfig", "XGLMForCausalLM",
               dict(vocab_size=VOCAB, d_model=HIDDEN, num_layers=LAYERS, attention_heads=2, ffn_dim=FFN,
                    max_position_embeddings=POSITIONS, **TOKENS),
               ["mha", "sinusoidal-positions", "layernorm", "gelu-erf", "qkv-bias", "embed-scale"],
               "xglm", "gpt2", styles=DEC_KV),
    "biogpt": _s("decoder", "BioGptConfig", "BioGptForCausalLM", dict(ENC, max_position_embeddings=POSITIONS, **TOKENS),
                 ["mha", "learned-positions", "layernorm", "gelu-erf", "qkv-bias"], "biogpt", "gpt2", styles=DEC_KV),
    # M-RoPE text model (Qwen2-VL): three position streams (temporal, height, width) in one rotary table;
    # the text model returns hidden states, so it runs as kind "encoder" (causal inside)
    "qwen2_vl_text": _s("encoder", "Qwen2VLTextConfig", "Qwen2VLTextModel",
                        # head size is hidden / heads here (the config's head_dim is not read)
                        dict(DEC, num_attention_heads=2, num_key_value_heads=1,
                             rope_scaling=dict(type="mrope", mrope_section=[2, 3, 3])),
                        ["gqa", "rope-full", "mrope", "rmsnorm", "qkv-bias", "causal"], "qwen2_vl", "gpt2",
                        styles=("dyn_mask",)),
    # seq2seq decoders
    "mbart_decoder": _s("seq2seq_decoder", "MBartConfig", "MBartForConditionalGeneration", dict(SEQ2SEQ),
                        ["mha", "cross-attention", "causal", "learned-positions", "layernorm", "pre-norm",
                         "final-layernorm"], "mbart", "bart", part="decoder", styles=DEC_KV),
    "marian_decoder": _s("seq2seq_decoder", "MarianConfig", "MarianMTModel", dict(SEQ2SEQ),
                         ["mha", "cross-attention", "causal", "sinusoidal-positions", "layernorm", "swish",
                          "post-norm"], "marian", "bart", part="decoder", styles=DEC_KV),
    # encoders
    "electra": _s("encoder", "ElectraConfig", "ElectraModel", dict(ENC, embedding_size=16, type_vocab_size=2),
                  ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-erf", "embed-projection"],
                  "electra", "bert", styles=("dyn_mask",)),
    "xlm_roberta": _s("encoder", "XLMRobertaConfig", "XLMRobertaModel",
                      dict(ENC, max_position_embeddings=POSITIONS + 2, type_vocab_size=1, pad_token_id=1),
                      ["mha", "padding-mask", "learned-positions", "layernorm", "gelu-erf"], "xlm-roberta",
                      "bert", styles=("dyn_mask",)),
    "mobilebert": _s("encoder", "MobileBertConfig", "MobileBertModel",
                     dict(ENC, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                          num_feedforward_networks=2, type_vocab_size=2),
                     ["mha", "padding-mask", "bottleneck", "nonorm", "relu", "embed-trigram"], "mobilebert",
                     "bert", styles=("dyn_mask",)),
    "beit": _s("vision", "BeitConfig", "BeitModel",
               dict(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=2,
                    image_size=32, patch_size=8, num_channels=3, use_relative_position_bias=True),
               ["mha", "patch-embed", "relative-position-bias", "layernorm", "gelu-erf", "layer-scale"],
               "beit", "vit", styles=("dyn_mask",)),
}

# corpus architectures re-exported in the hold-out styles (export versions the corpus lacks)
STYLE_ARCHS = {
    "noopt": ("llama", "qwen3", "gemma2", "phi3", "gpt2", "bert", "vit", "t5_encoder"),
    "latest_opset": ("llama", "qwen3", "gemma3", "bert", "vit"),
    "kv_latest_opset": ("llama", "qwen3"),
    "torchscript_kv": ("llama", "mistral", "qwen2", "gemma2", "phi3", "gpt_neox", "gpt2", "falcon", "opt",
                       "bloom"),
}
