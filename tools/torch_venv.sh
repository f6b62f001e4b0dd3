#!/usr/bin/env bash
# The old name of `tools/export_venv.sh --torch VERSION [--onnxscript $ONNXSCRIPT] [VENV_DIR]` (default 2.14.1).
exec "$(dirname "$0")/export_venv.sh" --torch "${1:-2.14.1}" ${ONNXSCRIPT:+--onnxscript "$ONNXSCRIPT"} ${2:+"$2"}
