"""Export small TensorFlow / Keras / JAX transformers to ONNX (eighth sweep, part B: other frameworks'
exporters). The Keras models go through tf2onnx (Keras 3 on the TensorFlow backend, traced with
tf.function and tf2onnx.convert.from_function: from_keras does not read Keras 3 models), the Flax
block through jax2onnx. Every norm scale and bias is perturbed (trained-like weights).

    /work/venvs/tf2onnx/bin/python tools/export_tf.py [--out /tmp/holdout_tf] [--only NAME ...] [--opset 17]
    /work/venvs/jax2onnx/bin/python tools/export_tf.py --only flax_block
    ... --small --out tests/data/holdout_tf   (hidden 32, 2 heads, 1 layer: the committed test files)

(tools/tf_venv.sh makes both venvs.) A model whose framework does not import in this python is skipped
with a note; one that fails to build or export goes to the manifest's 'failed' with its one-line
reason. Writes <model>__<exporter>.onnx plus a manifest.json that tools/coverage.py --corpus reads.
Not imported by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAXLEN = 128, 64, 4, 128, 2, 64
IMAGE, PATCH = 32, 8
SEED = 0


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


# ---------------------------------------------------------------- Keras models (own code)

def _keras_models():
    import keras
    from keras import layers, ops

    class PositionEmbedding(layers.Layer):
        """Learned absolute positions, read for the input's length (dynamic sequence)."""

        def build(self, shape):
            self.table = self.add_weight(shape=(MAXLEN, shape[-1]), initializer="random_normal", name="table")

        def call(self, x):
            return x + ops.expand_dims(self.table[: ops.shape(x)[1]], 0)

    class Block(layers.Layer):
        """A transformer block with keras.layers.MultiHeadAttention (EinsumDense projections,
        einsum scores); pre- or post-norm, GELU exact or tanh."""

        def __init__(self, pre_norm, approximate, causal, **kw):
            super().__init__(**kw)
            self.pre_norm, self.approximate, self.causal = pre_norm, approximate, causal
            self.attn = layers.MultiHeadAttention(HEADS, HIDDEN // HEADS)
            self.ln1, self.ln2 = layers.LayerNormalization(epsilon=1e-6), layers.LayerNormalization(epsilon=1e-6)
            self.up, self.down = layers.Dense(FFN), layers.Dense(HIDDEN)

        def _ffn(self, x):
            h = self.up(x)
            if self.approximate:
                return self.down(keras.activations.gelu(h, approximate=True))
            # exact GELU written with erf, as TF 1 / tf-models-official BERTs did: TF 2.21's own
            # tf.nn.gelu(approximate=False) is 0.5 x erfc(-x / sqrt 2), and tf2onnx 1.17 has no Erfc
            return self.down(0.5 * h * (1.0 + ops.erf(h * 0.7071067811865476)))

        def call(self, x, attn_mask=None):  # (Keras reserves the name `mask`)
            if self.pre_norm:
                h = self.ln1(x)
                x = x + self.attn(h, h, attention_mask=attn_mask, use_causal_mask=self.causal)
                return x + self._ffn(self.ln2(x))
            x = self.ln1(x + self.attn(x, x, attention_mask=attn_mask, use_causal_mask=self.causal))
            return self.ln2(x + self._ffn(x))

    class TextEncoder(keras.Model):
        def __init__(self, pre_norm, approximate, causal, **kw):
            super().__init__(**kw)
            self.embed, self.pos = layers.Embedding(VOCAB, HIDDEN), PositionEmbedding()
            self.emb_ln = layers.LayerNormalization(epsilon=1e-12)
            self.blocks = [Block(pre_norm, approximate, causal) for _ in range(LAYERS)]
            self.final_ln = layers.LayerNormalization(epsilon=1e-5) if pre_norm else None

        def call(self, input_ids, attention_mask=None):
            x = self.pos(self.embed(input_ids))
            x = x if self.final_ln is not None else self.emb_ln(x)
            mask = None
            if attention_mask is not None:  # [B, S] 0/1 -> [B, T, S] bool (keys masked)
                m = ops.cast(attention_mask, "bool")[:, None, :]
                mask = ops.broadcast_to(m, (ops.shape(x)[0], ops.shape(x)[1], ops.shape(x)[1]))
            for block in self.blocks:
                x = block(x, mask)
            return self.final_ln(x) if self.final_ln is not None else x

    class ViT(keras.Model):
        """NHWC patches through a strided Conv2D, a class token, pre-norm blocks."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.patch = layers.Conv2D(HIDDEN, PATCH, strides=PATCH)
            self.pos = PositionEmbedding()
            self.blocks = [Block(True, False, False) for _ in range(LAYERS)]
            self.final_ln = layers.LayerNormalization(epsilon=1e-6)

        def build(self, shape):
            self.cls = self.add_weight(shape=(1, 1, HIDDEN), initializer="random_normal", name="cls")

        def call(self, pixel_values):
            x = self.patch(pixel_values)
            x = ops.reshape(x, (ops.shape(x)[0], -1, HIDDEN))
            x = ops.concatenate([ops.broadcast_to(self.cls, (ops.shape(x)[0], 1, HIDDEN)), x], axis=1)
            x = self.pos(x)
            for block in self.blocks:
                x = block(x)
            return self.final_ln(x)

    return TextEncoder, ViT


def _perturb(model, seed=SEED):
    """Trained-like weights: every constant variable (norm scales of ones, biases and shifts of zeros)
    gets noise, so a rewrite that drops or swaps one shows in the outputs."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for v in model.weights:
        a = np.asarray(v.numpy())
        if a.size and a.dtype.kind == "f" and a.min() == a.max():
            v.assign(a + rng.normal(0, 0.2 if a.flat[0] == 1 else 0.1, a.shape).astype(a.dtype))


def _text_inputs(mask=True, segments=False, names=("input_ids", "attention_mask")):
    import tensorflow as tf

    specs = [tf.TensorSpec((None, None), tf.int32, name=names[0])]
    if mask:
        specs.append(tf.TensorSpec((None, None), tf.int32, name=names[1]))
    if segments:
        # named like the corpus' BERT input, so verify's random feeds give it zeros (in range)
        specs.append(tf.TensorSpec((None, None), tf.int32, name="token_type_ids"))
    return specs


def _keras_case(name):
    """(callable, input signature, manifest facts) of one Keras model."""
    import numpy as np
    import tensorflow as tf

    TextEncoder, ViT = _keras_models()
    ids = np.array([[5, 6, 7, 8]], dtype="int32")
    if name in ("bert_mha", "bert_mha_tanh"):
        model = TextEncoder(pre_norm=False, approximate=name.endswith("tanh"), causal=False)
        model(ids, np.ones_like(ids))
        fn, spec = (lambda input_ids, attention_mask: model(input_ids, attention_mask)), _text_inputs()
        facts = dict(arch=name, kind="encoder", ort_model_type="bert",
                     features=["keras-mha", "padding-mask", "post-norm", "layernorm",
                               "gelu-tanh" if name.endswith("tanh") else "gelu-erf"])
    elif name in ("gpt_causal", "gpt_causal_mask"):
        model = TextEncoder(pre_norm=True, approximate=True, causal=True)
        with_mask = name.endswith("mask")
        model(ids, np.ones_like(ids) if with_mask else None)
        if with_mask:
            fn, spec = (lambda input_ids, attention_mask: model(input_ids, attention_mask)), _text_inputs()
        else:
            fn, spec = (lambda input_ids: model(input_ids)), _text_inputs(mask=False)
        facts = dict(arch=name, kind="decoder", ort_model_type="gpt2",
                     features=["keras-mha", "causal-mask", "pre-norm", "layernorm", "gelu-tanh"]
                     + (["padding-mask"] if with_mask else []))
    elif name == "vit_nhwc":
        model = ViT()
        model(np.zeros((1, IMAGE, IMAGE, 3), "float32"))
        fn = lambda pixel_values: model(pixel_values)  # noqa: E731
        spec = [tf.TensorSpec((None, IMAGE, IMAGE, 3), tf.float32, name="pixel_values")]
        facts = dict(arch=name, kind="vision", ort_model_type="vit",
                     features=["keras-mha", "nhwc-conv-patches", "class-token", "pre-norm", "gelu-erf"])
    else:
        model, fn, spec, facts = _keras_hub_case(name)
    _perturb(model)
    return fn, spec, dict(facts, num_layers=LAYERS, num_heads=HEADS, hidden_size=HIDDEN, vocab_size=VOCAB)


def _keras_hub_case(name):
    """keras-hub backbones from constructor arguments (random weights, nothing downloaded)."""
    import numpy as np
    import keras_hub

    m = keras_hub.models
    ids = np.array([[5, 6, 7, 8]], dtype="int32")
    ones = np.ones_like(ids)
    if name == "kh_bert":
        model = m.BertBackbone(vocabulary_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, hidden_dim=HIDDEN,
                               intermediate_dim=FFN, dropout=0.0, max_sequence_length=MAXLEN)
        model({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ones})
        fn = lambda token_ids, padding_mask, token_type_ids: model(  # noqa: E731
            {"token_ids": token_ids, "segment_ids": token_type_ids, "padding_mask": padding_mask})["sequence_output"]
        spec = _text_inputs(segments=True, names=("token_ids", "padding_mask"))
        facts = dict(arch=name, kind="encoder", ort_model_type="bert",
                     features=["keras-hub", "keras-mha", "padding-mask", "post-norm", "gelu-erf"])
        return model, fn, spec, facts
    if name == "kh_gpt2":
        model = m.GPT2Backbone(vocabulary_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, hidden_dim=HIDDEN,
                               intermediate_dim=FFN, dropout=0.0, max_sequence_length=MAXLEN)
        kind, mtype, feats = "decoder", "gpt2", ["causal-mask", "padding-mask", "pre-norm", "gelu-tanh"]
    elif name == "kh_llama":
        model = m.LlamaBackbone(vocabulary_size=VOCAB, num_layers=LAYERS, num_query_heads=HEADS, hidden_dim=HIDDEN,
                                intermediate_dim=FFN, num_key_value_heads=2)
        kind, mtype, feats = "decoder", "gpt2", ["causal-mask", "padding-mask", "rmsnorm", "rope", "gqa", "swiglu"]
    elif name == "kh_gemma":
        model = m.GemmaBackbone(vocabulary_size=VOCAB, num_layers=LAYERS, num_query_heads=HEADS,
                                num_key_value_heads=1, hidden_dim=HIDDEN, intermediate_dim=FFN,
                                head_dim=HIDDEN // HEADS)
        kind, mtype, feats = "decoder", "gpt2", ["causal-mask", "padding-mask", "rmsnorm", "rope", "mqa",
                                                 "geglu-tanh"]
    else:
        raise KeyError(name)
    model({"token_ids": ids, "padding_mask": ones})
    fn = lambda token_ids, padding_mask: model(  # noqa: E731
        {"token_ids": token_ids, "padding_mask": padding_mask})
    spec = _text_inputs(names=("token_ids", "padding_mask"))
    return model, fn, spec, dict(arch=name, kind=kind, ort_model_type=mtype, features=["keras-hub", *feats])


def export_keras(name: str, path: Path, opset: int) -> dict:
    import tensorflow as tf
    import tf2onnx

    fn, spec, facts = _keras_case(name)
    proto, _ = tf2onnx.convert.from_function(tf.function(fn, input_signature=spec), input_signature=spec,
                                             opset=opset)
    return _finish(proto, path, facts, exporter=f"tf2onnx {tf2onnx.__version__}, tensorflow {tf.__version__}")


# ---------------------------------------------------------------- Flax block via jax2onnx (own code)

def export_flax(name: str, path: Path, opset: int) -> dict:
    from importlib.metadata import version

    import jax
    import jax2onnx
    import numpy as np
    from flax import nnx

    class FlaxBlock(nnx.Module):
        """Pre-norm block: nnx.MultiHeadAttention (DenseGeneral q/k/v/out), LayerNorm, GELU MLP."""

        def __init__(self, rngs):
            self.ln1 = nnx.LayerNorm(HIDDEN, rngs=rngs)
            self.ln2 = nnx.LayerNorm(HIDDEN, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(num_heads=HEADS, in_features=HIDDEN, decode=False, rngs=rngs)
            self.up, self.down = nnx.Linear(HIDDEN, FFN, rngs=rngs), nnx.Linear(FFN, HIDDEN, rngs=rngs)

        def __call__(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h)
            return x + self.down(nnx.gelu(self.up(self.ln2(x)), approximate=False))

    model = FlaxBlock(nnx.Rngs(SEED))
    rng = np.random.default_rng(SEED)
    for _, var in nnx.iter_graph(model):  # trained-like: every constant parameter gets noise
        if isinstance(var, nnx.Param):
            a = np.asarray(var[...])
            if a.size and a.min() == a.max():
                var[...] = jax.numpy.asarray(a + rng.normal(0, 0.2 if a.flat[0] == 1 else 0.1, a.shape)
                                              .astype(a.dtype))
    proto = jax2onnx.to_onnx(model, [("B", "S", HIDDEN)], opset=opset, input_names=["hidden_states"])
    facts = dict(arch=name, kind="encoder", ort_model_type="bert", num_layers=1, num_heads=HEADS,
                 hidden_size=HIDDEN, vocab_size=VOCAB, features=["flax-nnx-mha", "pre-norm", "layernorm", "gelu-erf"])
    return _finish(proto, path, facts, exporter=f"jax2onnx {version('jax2onnx')}, jax {jax.__version__}")


# ---------------------------------------------------------------- manifest

DIM_NAMES = {"pixel_values": ["batch", IMAGE, IMAGE, 3], "hidden_states": ["batch", "sequence", HIDDEN]}


def _finish(proto, path: Path, facts: dict, exporter: str) -> dict:
    """Name the graph inputs' free dims batch / sequence (the exporters write unk__N / B, S), so
    coverage's manifest feeds can size them; save; the manifest entry."""
    import hashlib

    import onnx

    inputs = []
    for inp in proto.graph.input:
        dims = inp.type.tensor_type.shape.dim
        names = DIM_NAMES.get(inp.name, ["batch", "sequence"])
        for i, d in enumerate(dims):
            if not d.HasField("dim_value"):
                d.dim_param = names[i]
        inputs.append({"name": inp.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(
            inp.type.tensor_type.elem_type).name, "dims": [d.dim_value or d.dim_param for d in dims]})
    onnx.checker.check_model(proto)
    data = proto.SerializeToString()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return dict(facts, file=path.name, style=path.stem.split("__")[1], weights="perturbed", inputs=inputs,
                opset=next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                nodes=len(proto.graph.node), bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                seed=SEED, exporter=exporter, attention_blocks=facts["num_layers"])


KERAS = ["bert_mha", "bert_mha_tanh", "gpt_causal", "gpt_causal_mask", "vit_nhwc",
         "kh_bert", "kh_gpt2", "kh_llama", "kh_gemma"]
FLAX = ["flax_block"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/holdout_tf")
    ap.add_argument("--only", nargs="*", help="model names (default: every model this python can export)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--small", action="store_true", help="hidden 32, 2 heads, 1 layer (files of ~100 KB)")
    ns = ap.parse_args(argv)
    if ns.small:
        global VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAXLEN
        VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAXLEN = 64, 32, 2, 64, 1, 32
    unknown = set(ns.only or []) - set(KERAS + FLAX)
    if unknown:
        print(f"error: unknown model(s) {sorted(unknown)}; known: {KERAS + FLAX}", file=sys.stderr)
        return 2
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    mpath = out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {
        "about": "tools/export_tf.py: Keras / keras-hub via tf2onnx, Flax via jax2onnx", "files": {}, "failed": {}}
    plan = []
    for names, module, export, tool in ((KERAS, "tf2onnx", export_keras, "tf2onnx"),
                                        (FLAX, "jax2onnx", export_flax, "jax2onnx")):
        wanted = [n for n in names if ns.only is None or n in ns.only]
        if not wanted:
            continue
        try:
            __import__(module)
        except ImportError:
            print(f"note: {module} does not import in {sys.executable}: skipped {wanted}", file=sys.stderr)
            continue
        plan += [(n, export, tool) for n in wanted]
    for name, export, tool in plan:
        fname = f"{name}__{tool}.onnx"
        try:
            entry = export(name, out / fname, ns.opset)
        except Exception as exc:  # noqa: BLE001 -- a failing export is a finding, recorded
            manifest["failed"][fname] = _one_line(exc)
            manifest["files"].pop(fname, None)
            print(f"FAILED {fname}: {_one_line(exc)}")
            continue
        manifest["failed"].pop(fname, None)
        manifest["files"][fname] = entry
        print(f"{fname}: {entry['nodes']} nodes, {entry['bytes']} bytes")
    tmp = mpath.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tmp.replace(mpath)
    return 0


if __name__ == "__main__":
    sys.exit(main())
