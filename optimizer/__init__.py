"""onnx-fuse: an ONNX graph optimizer for transformer and LLM inference.

    import onnx_fuse
    result = onnx_fuse.optimize("model.onnx", level=3, target="ort", verify=True)
    result.save("model.opt.onnx")

``onnx_fuse.InferenceSession`` is a drop-in for ``onnxruntime.InferenceSession`` that optimizes on
load. Heavy modules (onnxruntime, tensorrt, torch) are imported only when used.
"""

from __future__ import annotations

__version__ = "0.1.0"

from onnx_fuse.errors import OnnxFuseError, OnnxFuseWarning, UserError

__all__ = ["InferenceSession", "OnnxFuseError", "OnnxFuseWarning", "OptimizeResult", "UserError",
           "optimize", "verify", "__version__"]


def __getattr__(name: str):
    # Lazy so that `import onnx_fuse` stays cheap and never imports onnxruntime by itself.
    if name in ("optimize", "OptimizeResult"):
        from onnx_fuse import api

        return getattr(api, name)
    if name == "verify":
        from onnx_fuse.verify import verify

        return verify
    if name == "InferenceSession":
        from onnx_fuse.session import InferenceSession

        return InferenceSession
    raise AttributeError(f"module 'onnx_fuse' has no attribute {name!r}")
