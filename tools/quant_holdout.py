"""Hold-out 15 (ninth sweep, part A): corpus exports that a quantizer rewrote before ours.

Many models reach an optimizer already quantized. This script takes a few corpus exports and writes,
for each quantization recipe, <model>__<recipe>.onnx plus a manifest.json that tools/coverage.py reads
(the corpus entry with the file, sha256 and the recipe added), usually into /tmp/holdout_quant:

    dyn_u8      onnxruntime.quantization.quantize_dynamic, uint8 weights: DynamicQuantizeLinear +
                MatMulInteger (+ Gather of quantized embeddings), QOperator form
    dyn_s8pc    quantize_dynamic, int8 weights per output channel
    qdq_u8      quantize_static, QDQ format, uint8 activations / int8 weights, per tensor, every op
                the quantizer knows (so the attention MatMuls and Softmax get activation Q/DQ too)
    qdq_s8pc    quantize_static, QDQ, int8 / int8 per channel, only the MatMul / Gemm nodes with a
                constant weight (the projections): attention's QK^T and PV stay float
    qdq_s8sym   qdq_s8pc with symmetric activations (zero points 0: the form TensorRT parses)
    qdq_mm_s8sym  static QDQ on every MatMul / Gemm, attention's QK^T and PV included (their inputs
                q, k, v and the softmax probabilities), int8 symmetric activations, int8 per-channel
                weights: the TensorRT int8 MHA form (tenth sweep, part B)
    mo_int8     NVIDIA ModelOpt (nvidia-modelopt, modelopt.onnx.quantization.quantize) int8 PTQ for
                TensorRT: symmetric int8 Q/DQ by its placement rules, max calibration on the CPU,
                float32 kept (high_precision_dtype fp32)
    mo_fp8      the same in fp8 (float8e4m3fn Q/DQ on GEMMs and attention's BMMs)
    mo_int4     ModelOpt int4 weight-only (rtn_dq: blocked int4 DequantizeLinear + MatMul, block 32)
                The mo_* recipes need nvidia-modelopt: run this script with its venv's python
                (tools/modelopt_venv.sh makes /work/venvs/modelopt).
    qop_u8      quantize_static, QOperator format (QLinearMatMul, QLinearAdd, ...), uint8 / int8
    nbits32     MatMulNBitsQuantizer: int4 weight-only MatMulNBits, block 32 (QOperator form)
    nbits128    the same, block 128
    nbits_qdq   MatMulNBitsQuantizer, QDQ form: blockwise int4 DequantizeLinear (opset 21) + MatMul
    fp16_qdq    qdq_s8pc then onnxruntime.transformers.float16 (keep_io_types): float16 scales and
                DequantizeLinear outputs

Calibration (quantize_static) reads a few random feeds sized from the corpus manifest (seeded).

    python tools/quant_holdout.py [--out /tmp/holdout_quant] [--only SUBSTR ...] [--recipes dyn_u8 ...]
    python tools/coverage.py --corpus /tmp/holdout_quant --columns ort-O3 onnx-O3 trt-O4

A recipe that fails on a model, or writes a model ONNX Runtime refuses to load or run (the float16
converter on TorchScript exports, opset-21 int4 DQ on a model whose other ops then fail to check), is
recorded under the manifest's 'failed' with its one-line reason.
'tool_check' says how far the quantized model is from the float original (max abs difference of the
first output, informational: a quantized model is not expected to match); coverage's verify compares
our optimized model with the quantized input, so its usual tolerances apply.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretool_holdout import CORPUS, write_derived  # noqa: E402 -- the same corpus and manifest layout

MODELS = ("bert__dyn_mask__trained", "distilbert__torchscript__trained", "vit__static_nomask__trained",
          "gpt2__dyn_mask__trained", "llama__kv__trained", "mistral__torchscript__trained",
          "qwen2__optimum__trained", "phi3__dyn_mask__trained", "gpt_neox__kv__trained")
RECIPES = ("dyn_u8", "dyn_s8pc", "qdq_u8", "qdq_s8pc", "qdq_s8sym", "qop_u8", "nbits32", "nbits128", "nbits_qdq",
           "fp16_qdq", "qdq_mm_s8sym", "mo_int8", "mo_fp8", "mo_int4")
#: recipes not in the default run (another venv)
MODELOPT = ("mo_int8", "mo_fp8", "mo_int4")
CALIBRATION_SAMPLES = 4


def _feeds(entry: dict, seed: int) -> dict:
    from export_corpus import feeds_from_manifest

    return feeds_from_manifest(entry, entry.get("vocab_size") or 128, seed=seed)


class _Reader:
    """quantize_static's CalibrationDataReader over a few seeded random feeds."""

    def __init__(self, entry: dict):
        self._it = iter([_feeds(entry, seed) for seed in range(CALIBRATION_SAMPLES)])

    def get_next(self):
        return next(self._it, None)


def _projection_matmuls(src: str) -> list[str]:
    """Names of MatMul / Gemm nodes whose second input is not a constant weight (attention's
    QK^T and PV): left out of the projection-only recipes."""
    import onnx

    graph = onnx.load(src, load_external_data=False).graph
    consts = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant"
                                                    for o in n.output}
    # a weight may reach the MatMul through a Transpose / Reshape of a constant (TorchScript)
    producers = {o: n for n in graph.node for o in n.output}
    def constant(v, depth=0):
        if v in consts:
            return True
        n = producers.get(v)
        return (depth < 3 and n is not None and n.op_type in ("Transpose", "Reshape", "Cast", "Identity")
                and constant(n.input[0], depth + 1))
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and not constant(n.input[1])]


def _named(src: str, tmp: str) -> str:
    """The quantizers select nodes by name: give unnamed nodes one (a copy; the corpus file stays)."""
    import onnx

    proto = onnx.load(src)
    for i, n in enumerate(proto.graph.node):
        if not n.name:
            n.name = f"{n.op_type}_{i}"
    onnx.save(proto, tmp)
    return tmp


def _dynamic(weight: str, per_channel: bool):
    def run(src: str, dst: str, entry: dict) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(src, dst, weight_type=getattr(QuantType, weight), per_channel=per_channel)
    return run


def _static(fmt: str, act: str, weight: str, per_channel: bool, projections_only: bool,
            symmetric_activations: bool = False, matmuls_only: bool = False):
    def run(src: str, dst: str, entry: dict) -> None:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        with tempfile.TemporaryDirectory() as tmp:
            named = _named(src, os.path.join(tmp, "named.onnx"))
            kwargs = {}
            if projections_only:
                kwargs = {"op_types_to_quantize": ["MatMul", "Gemm"], "nodes_to_exclude": _projection_matmuls(named)}
            elif matmuls_only:
                kwargs = {"op_types_to_quantize": ["MatMul", "Gemm"]}
            quantize_static(named, dst, _Reader(entry), quant_format=getattr(QuantFormat, fmt),
                            activation_type=getattr(QuantType, act), weight_type=getattr(QuantType, weight),
                            per_channel=per_channel,
                            extra_options={"ActivationSymmetric": symmetric_activations}, **kwargs)
    return run


def _nbits(block: int, fmt: str):
    def run(src: str, dst: str, entry: dict) -> None:
        import onnx
        from onnxruntime.quantization import QuantFormat
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

        config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=False,
                                              quant_format=getattr(QuantFormat, fmt))
        quant = MatMulNBitsQuantizer(onnx.load(src), algo_config=config)
        quant.process()
        quant.model.save_model_to_file(dst, False)
    return run


def _modelopt(mode: str, method: str, **options):
    def run(src: str, dst: str, entry: dict) -> None:
        from modelopt.onnx.quantization import quantize

        with tempfile.TemporaryDirectory() as tmp:
            named = _named(src, os.path.join(tmp, "named.onnx"))
            quantize(named, quantize_mode=mode, calibration_data=_feeds(entry, 0), calibration_method=method,
                     calibration_eps=["cpu"], high_precision_dtype="fp32", output_path=dst,
                     log_level="ERROR", **options)
    return run


def _fp16_qdq(src: str, dst: str, entry: dict) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with tempfile.TemporaryDirectory() as tmp:
        mid = os.path.join(tmp, "qdq.onnx")
        RUNNERS["qdq_s8pc"](src, mid, entry)
        onnx.save(convert_float_to_float16(onnx.load(mid), keep_io_types=True), dst)


RUNNERS = {"dyn_u8": _dynamic("QUInt8", False), "dyn_s8pc": _dynamic("QInt8", True),
           "qdq_u8": _static("QDQ", "QUInt8", "QInt8", False, False),
           "qdq_s8pc": _static("QDQ", "QInt8", "QInt8", True, True),
           "qdq_s8sym": _static("QDQ", "QInt8", "QInt8", True, True, symmetric_activations=True),
           "qop_u8": _static("QOperator", "QUInt8", "QInt8", False, False),
           "nbits32": _nbits(32, "QOperator"), "nbits128": _nbits(128, "QOperator"),
           "nbits_qdq": _nbits(32, "QDQ"), "fp16_qdq": _fp16_qdq,
           "qdq_mm_s8sym": _static("QDQ", "QInt8", "QInt8", True, False, symmetric_activations=True,
                                   matmuls_only=True),
           "mo_int8": _modelopt("int8", "max"), "mo_fp8": _modelopt("fp8", "max"),
           "mo_int4": _modelopt("int4", "rtn_dq", block_size=32)}


def _tool_check(original: str, quantized: str, entry: dict) -> dict:
    """How far the quantized model is from the float original on one feed (informational)."""
    import numpy as np
    import onnxruntime as ort

    try:
        feeds = _feeds(entry, 99)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        a = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        b = ort.InferenceSession(quantized, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        return {"runs": True, "max_abs_vs_float": float(np.max(np.abs(a.astype(np.float64) - b)))}
    except Exception as exc:  # noqa: BLE001 -- recorded, not fatal
        return {"runs": False, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def _op_histogram(path: str) -> dict:
    import collections

    import onnx

    hist = collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type
                               for n in onnx.load(path, load_external_data=False).graph.node)
    return dict(sorted(hist.items()))


def _check(src: str, dst: str, entry: dict) -> dict:
    result = _tool_check(src, dst, entry)
    if result["runs"]:
        result["extra"] = {"quant_ops": _op_histogram(dst)}
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/holdout_quant")
    ap.add_argument("--only", nargs="*", help="models whose name contains one of these")
    ap.add_argument("--recipes", nargs="*", default=[r for r in RECIPES if r not in MODELOPT], choices=RECIPES)
    ns = ap.parse_args(argv)
    models = [m for m in MODELS if not ns.only or any(s in m for s in ns.only)]
    write_derived(Path(ns.out), models, ns.recipes, RUNNERS, kind="quant",
                  about="Made by tools/quant_holdout.py: corpus exports quantized first; "
                        "file names <corpus model>__<recipe>.onnx.",
                  check=_check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
