#!/usr/bin/env bash
# Create the venv for NVIDIA ModelOpt's ONNX PTQ (tools/quant_holdout.py --recipes mo_int8 mo_fp8 mo_int4):
# nvidia-modelopt with its [onnx] extra, onnxruntime pinned to the main venv's so calibration runs the
# same CPU kernels. It pulls a CUDA torch and onnxruntime-gpu (~5.5 GB; session 17: 35 minutes on the
# shared machine); calibration runs on the CPU (calibration_eps=["cpu"]), no GPU is needed.
#
#   tools/modelopt_venv.sh [VENV_DIR]     (default /work/venvs/modelopt)
set -euo pipefail
VENV="${1:-/work/venvs/modelopt}"
MODELOPT=0.47.0
if "$VENV/bin/python" -c "import modelopt.onnx.quantization, sys; import modelopt
sys.exit(modelopt.__version__ != '$MODELOPT')" 2>/dev/null; then
    echo "$VENV already has nvidia-modelopt $MODELOPT"; exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "nvidia-modelopt[onnx]==$MODELOPT" "onnxruntime==1.32.0"
"$VENV/bin/python" -c "import modelopt, onnxruntime; print('modelopt venv ok:', modelopt.__version__, 'onnxruntime', onnxruntime.__version__)"
