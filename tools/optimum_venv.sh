#!/usr/bin/env bash
# Create the separate venv that tools/export_corpus.py uses for its `optimum` export style.
# optimum-onnx pins transformers < 4.58, which cannot share the main venv (transformers 5).
# torch is pinned to the CPU build 2.13.0 (installs from a local wheel; an unpinned torch pulls
# a multi-GB CUDA build).
#
#   tools/optimum_venv.sh [VENV_DIR]      (default /work/venvs/optimum)
set -euo pipefail
VENV="${1:-/work/venvs/optimum}"
if [ -x "$VENV/bin/optimum-cli" ]; then
    echo "$VENV already has optimum-cli"; exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==2.13.0" "optimum-onnx" "transformers<4.58" "onnx" "onnxruntime" "pillow" "accelerate"
"$VENV/bin/optimum-cli" export onnx --help >/dev/null
"$VENV/bin/python" -c "import optimum, transformers, torch; print('optimum venv ok: transformers', transformers.__version__, 'torch', torch.__version__)"
