#!/usr/bin/env bash
# Create the venvs tools/export_tf.py runs in (eighth sweep part B: other frameworks' exporters).
#   /work/venvs/tf2onnx   tensorflow-cpu 2.21 + tf2onnx 1.17 + keras 3.15 + keras-hub 0.32 (keras-hub pulls
#                         tensorflow-text, which pulls the full tensorflow wheel of the same version)
#   /work/venvs/jax2onnx  jax / jaxlib 0.10.2 + flax 0.12.8 + jax2onnx 0.17.1
# Separate venvs: jax2onnx wants onnx-ir / newer protobuf beside tf2onnx's pins, and the two stacks
# never need each other. onnx / onnxruntime match the main venv's so the files load the same.
# tf2onnx.convert.from_keras does not read Keras 3 models (KeyError on the output tensor names);
# export_tf.py traces them with tf.function and uses from_function.
#
#   tools/tf_venv.sh [tf2onnx|jax2onnx|all]      (default all)
set -euo pipefail
WHICH="${1:-all}"
make_venv() {  # NAME CHECK PACKAGES...
    local venv="/work/venvs/$1" check="$2"; shift 2
    if "$venv/bin/python" -c "$check" 2>/dev/null; then echo "$venv already complete"; return; fi
    if [ -e "$venv.creating" ]; then echo "error: $venv.creating exists: another helper is creating it" >&2; exit 1; fi
    touch "$venv.creating"
    trap 'rm -f "$venv.creating"' EXIT
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "$@"
    "$venv/bin/python" -c "$check"
    rm -f "$venv.creating"
    trap - EXIT
    echo "$venv ok"
}
case "$WHICH" in tf2onnx|jax2onnx|all) ;; *) echo "error: unknown venv $WHICH (tf2onnx, jax2onnx or all)" >&2; exit 2 ;; esac
if [ "$WHICH" != jax2onnx ]; then
    make_venv tf2onnx "import tensorflow, tf2onnx, keras_hub" \
        "tensorflow-cpu==2.21.0" "tf2onnx==1.17.0" "keras==3.15.1" "keras-hub==0.32.0" \
        "onnx==1.23.2" "onnxruntime==1.32.0"
fi
if [ "$WHICH" != tf2onnx ]; then
    make_venv jax2onnx "import jax, flax, jax2onnx" \
        "jax==0.10.2" "jaxlib==0.10.2" "flax==0.12.8" "jax2onnx==0.17.1" "onnx==1.23.2" "onnxruntime==1.32.0"
fi
