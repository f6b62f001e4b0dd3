#!/usr/bin/env bash
# Create a venv for exporter drift: tools/export_corpus.py hands an export of a spec that pins another
# transformers (--holdout 5 / 9), torch (--holdout 8) or onnxscript (--holdout 11) to that version's venv.
# Only the pinned package differs from the main venv's, so the drift is the exporter's alone.
#
#   tools/export_venv.sh [--transformers V] [--torch V] [--onnxscript V] [VENV_DIR]
#
#   --transformers V  older modeling code (the `legacy` export styles); venv /work/venvs/tf<major><minor>
#       4.38.2  pre-SDPA-default era: _prepare_4d_causal_attention_mask, rotary cos_cached / sin_cached
#               sliced by seq_len, legacy tuple past_key_values
#       4.45.2  SDPA by default, cache_position, _update_causal_mask, DynamicCache
#       4.48.3, 4.53.3  (fifth sweep part D) the attention interface; 4.53's masking_utils
#     installed with numpy < 2 (transformers 4.3x predates numpy 2) and onnxscript 0.7.2 (the dynamo styles)
#   --torch V         another torch.onnx; venv /work/venvs/torch<digits>
#       2.9.1   an older torch.onnx (x86_64: a CUDA build, ~7 GB)
#       2.14.1  a newer torch.onnx (x86_64: a CUDA build, ~5.5 GB)
#       2.15.0  the newest (twentieth sweep): not on this machine's disk, so pip fetches the CUDA build (~4 GB)
#               from the registry; the machine's pip constraint caps torch at the local 2.14.1, which
#               PIP_CONSTRAINT=/dev/null lifts for this one install
#   --onnxscript V    another onnxscript beside the torch (the dynamo exporter's optimizer and op library);
#                     venv /work/venvs/torch<digits>_os<digits>: tools/export_venv.sh --torch 2.13.0 --onnxscript 0.5.7
#
# Defaults are the main venv's: torch 2.13.0 (the CPU build, from a local wheel; an unpinned torch pulls a
# multi-GB CUDA build), transformers 5.24.0; onnxscript is what pip resolves beside the torch (0.7.2 with
# --transformers). With transformers 5.x, onnx / onnxruntime are pinned to the main venv's so the ORT
# check is the same; the older transformers take what pip resolves beside numpy < 2.
# Everything installs from the wheels on this machine's disk (pip; uv and poetry download them).
# (tools/legacy_venv.sh and tools/torch_venv.sh are the old names, kept as wrappers.)
set -euo pipefail
TORCH=2.13.0 TRANSFORMERS=5.24.0 ONNXSCRIPT="" VENV="" MAIN_TF=5.24.0 MAIN_TORCH=2.13.0
while [ $# -gt 0 ]; do
    case "$1" in
        --torch) TORCH="$2"; shift 2 ;;
        --transformers) TRANSFORMERS="$2"; shift 2 ;;
        --onnxscript) ONNXSCRIPT="$2"; shift 2 ;;
        -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "error: unknown option $1 (see tools/export_venv.sh --help)" >&2; exit 2 ;;
        *) [ -z "$VENV" ] || { echo "error: one VENV_DIR only" >&2; exit 2; }; VENV="$1"; shift ;;
    esac
done
digits() { echo "$1" | tr -d .; }
if [ "$TRANSFORMERS" != "$MAIN_TF" ]; then   # the legacy styles' venv
    NAME="tf$(echo "$TRANSFORMERS" | cut -d. -f1,2 | tr -d .)"
    [ "$TORCH" = "$MAIN_TORCH" ] || NAME="${NAME}_torch$(digits "$TORCH")"
    ONNXSCRIPT="${ONNXSCRIPT:-0.7.2}"
    EXTRA=("numpy<2" onnx onnxruntime)
else
    NAME="torch$(digits "$TORCH")${ONNXSCRIPT:+_os$(digits "$ONNXSCRIPT")}"
    EXTRA=("onnx==1.23.2" "onnxruntime==1.32.0")
fi
VENV="${VENV:-/work/venvs/$NAME}"
if "$VENV/bin/python" -c "import torch, transformers, onnxscript, sys
sys.exit(torch.__version__.split('+')[0] != '$TORCH' or transformers.__version__ != '$TRANSFORMERS'
         or onnxscript.__version__ != ('$ONNXSCRIPT' or onnxscript.__version__))" 2>/dev/null; then
    echo "$VENV already has torch $TORCH, transformers $TRANSFORMERS${ONNXSCRIPT:+, onnxscript $ONNXSCRIPT}"; exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==$TORCH" "transformers==$TRANSFORMERS" "onnxscript${ONNXSCRIPT:+==$ONNXSCRIPT}" \
    "${EXTRA[@]}" filelock
"$VENV/bin/python" -c "import torch, transformers, onnxscript; print('export venv ok: torch', torch.__version__,
'transformers', transformers.__version__, 'onnxscript', onnxscript.__version__)"
