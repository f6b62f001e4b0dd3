"""onnx_fuse.plugins: CUDA kernels, TensorRT plugins and the engine builder.

Nothing here imports tensorrt, cuda or torch at import time: each module loads them when used, so
the optimizer runs on machines without TensorRT or a GPU.
"""
