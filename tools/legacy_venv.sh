#!/usr/bin/env bash
# Create a venv with an older transformers for tools/export_corpus.py's `legacy` export style
# (exporter drift: the modeling code deployed ONNX files were made with). Two versions are used:
#   4.38.2  pre-SDPA-default era: _prepare_4d_causal_attention_mask, rotary cos_cached / sin_cached
#           sliced by seq_len, legacy tuple past_key_values
#   4.45.2  SDPA by default, cache_position, _update_causal_mask, DynamicCache
#   4.48.3, 4.53.3  (fifth sweep part D) the attention interface; 4.53's masking_utils
# torch is pinned to the CPU build 2.13.0 (installs from a local wheel; an unpinned torch pulls a
# multi-GB CUDA build).
#
#   tools/legacy_venv.sh [VERSION [VENV_DIR]]   (default 4.38.2, /work/venvs/tf<major><minor>)
set -euo pipefail
VERSION="${1:-4.38.2}"
MINOR="$(echo "$VERSION" | cut -d. -f1,2 | tr -d .)"
VENV="${2:-/work/venvs/tf$MINOR}"
if "$VENV/bin/python" -c "import transformers, sys; sys.exit(transformers.__version__ != '$VERSION')" 2>/dev/null; then
    echo "$VENV already has transformers $VERSION"; exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# numpy < 2: transformers 4.3x predates numpy 2; onnxscript (the main venv's 0.7.2): the dynamo styles
"$VENV/bin/pip" install -q "torch==2.13.0" "transformers==$VERSION" "numpy<2" "onnx" "onnxruntime" "filelock" \
    "onnxscript==0.7.2"
"$VENV/bin/python" -c "import transformers, torch; print('legacy venv ok: transformers', transformers.__version__, 'torch', torch.__version__)"
