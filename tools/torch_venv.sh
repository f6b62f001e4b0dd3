#!/usr/bin/env bash
# Create a venv with another torch (torch.onnx exporter drift, tools/export_corpus.py --holdout 8) and
# the main venv's transformers, so only the exporter differs from the corpus's torch 2.13 exports.
# onnxscript is whatever pip resolves beside that torch (the dynamo exporter's optimizer and op library);
# onnx / onnxruntime are pinned to the main venv's so the ORT check is the same.
#   2.9.1   an older torch.onnx (x86_64: a CUDA build, ~7 GB)
#   2.14.1  a newer torch.onnx (x86_64: a CUDA build, ~5.5 GB)
# Both install from the wheels on this machine's disk (pip; uv and poetry download them).
#
# ONNXSCRIPT=VERSION pins onnxscript instead (onnxscript drift beside one torch, --holdout 11; the venv is
# then /work/venvs/torch<digits>_os<digits>): ONNXSCRIPT=0.5.7 tools/torch_venv.sh 2.13.0
#
#   tools/torch_venv.sh [TORCH_VERSION [VENV_DIR]]   (default 2.14.1, /work/venvs/torch<digits>)
set -euo pipefail
TORCH="${1:-2.14.1}"
ONNXSCRIPT="${ONNXSCRIPT:-}"
VENV="${2:-/work/venvs/torch$(echo "$TORCH" | tr -d .)${ONNXSCRIPT:+_os$(echo "$ONNXSCRIPT" | tr -d .)}}"
TRANSFORMERS="${TRANSFORMERS:-5.24.0}"
if "$VENV/bin/python" -c "import torch, onnxscript, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH'
or onnxscript.__version__ != ('${ONNXSCRIPT}' or onnxscript.__version__))" 2>/dev/null; then
    echo "$VENV already has torch $TORCH${ONNXSCRIPT:+ and onnxscript $ONNXSCRIPT}"; exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==$TORCH" "transformers==$TRANSFORMERS" "onnxscript${ONNXSCRIPT:+==$ONNXSCRIPT}" "onnx==1.23.2" \
    "onnxruntime==1.32.0" filelock
"$VENV/bin/python" -c "import torch, transformers, onnxscript; print('torch venv ok: torch', torch.__version__,
'transformers', transformers.__version__, 'onnxscript', onnxscript.__version__)"
