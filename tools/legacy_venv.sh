#!/usr/bin/env bash
# The old name of `tools/export_venv.sh --transformers VERSION [VENV_DIR]` (default 4.38.2).
exec "$(dirname "$0")/export_venv.sh" --transformers "${1:-4.38.2}" ${2:+"$2"}
