"""Shared test helpers of tests/plugins.

Small transformer-ish ONNX graphs for the TensorRT build / check / run tests (as fixtures), and
for the GPU kernel tests the `lib` fixture and the paged-pool builder ``make_paged_pool``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh


def encoder_model(hidden: int = 32, heads: int = 2, layers: int = 1, seed: int = 0,
                  opset: int = 20) -> onnx.ModelProto:
    """Embedding + pre-softmax-masked self-attention + LayerNorm + GELU MLP, dynamic batch/seq."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def w(name, shape):
        inits.append(nh.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=f"{op.lower()}_{len(nodes)}", **attrs))

    ids = helper.make_tensor_value_info("input_ids", TP.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TP.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("last_hidden_state", TP.FLOAT, ["batch", "seq", hidden])
    hd = hidden // heads
    node("Gather", [w("emb", (100, hidden)), "input_ids"], ["x0"])
    c("shape_bshd", np.array([0, 0, heads, hd], np.int64))
    c("shape_bsh", np.array([0, 0, hidden], np.int64))
    c("scale", np.array(1 / np.sqrt(hd), np.float32))
    c("one", np.array(1.0, np.float32))
    c("neg", np.array(-1e4, np.float32))
    node("Unsqueeze", ["attention_mask", c("ax12", np.array([1, 2], np.int64))], ["m4"])
    node("Cast", ["m4"], ["m4f"], to=TP.FLOAT)
    node("Sub", ["one", "m4f"], ["m4i"])
    node("Mul", ["m4i", "neg"], ["bias"])
    x = "x0"
    for layer in range(layers):
        p = f"l{layer}_"
        for t in "qkv":
            node("MatMul", [x, w(p + t + "_w", (hidden, hidden))], [p + t + "0"])
            node("Reshape", [p + t + "0", "shape_bshd"], [p + t + "1"])
            node("Transpose", [p + t + "1"], [p + t], perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])
        node("MatMul", [p + "q", p + "k"], [p + "s0"])
        node("Mul", [p + "s0", "scale"], [p + "s1"])
        node("Add", [p + "s1", "bias"], [p + "s2"])
        node("Softmax", [p + "s2"], [p + "p"], axis=-1)
        node("MatMul", [p + "p", p + "v"], [p + "o0"])
        node("Transpose", [p + "o0"], [p + "o1"], perm=[0, 2, 1, 3])
        node("Reshape", [p + "o1", "shape_bsh"], [p + "o2"])
        node("MatMul", [p + "o2", w(p + "o_w", (hidden, hidden))], [p + "o3"])
        node("Add", [x, p + "o3"], [p + "r"])
        node("LayerNormalization", [p + "r", c(p + "g", np.ones(hidden, np.float32)),
                                    c(p + "b", np.zeros(hidden, np.float32))], [p + "ln"],
             axis=-1, epsilon=1e-5)
        node("MatMul", [p + "ln", w(p + "f1", (hidden, 4 * hidden))], [p + "h"])
        node("Gelu", [p + "h"], [p + "g1"])
        node("MatMul", [p + "g1", w(p + "f2", (4 * hidden, hidden))], [p + "f"])
        node("Add", [p + "ln", p + "f"], [p + "out"])
        x = p + "out"
    node("Identity", [x], ["last_hidden_state"])
    graph = helper.make_graph(nodes, "encoder", [ids, mask], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


ENCODER_PROFILE = ["input_ids:1x1,2x16,4x64", "attention_mask:1x1,2x16,4x64"]


def fused_attention_node(name="fa0", *, inputs=("q", "k", "v", "lens"), num_heads=2,
                         kv_num_heads=2, scale=0.0, causal=1, version="1",
                         namespace="onnx_fuse", **extra):
    attrs = {"num_heads": num_heads, "kv_num_heads": kv_num_heads, "scale": scale,
             "causal": causal, **extra}
    if version is not None:
        attrs["plugin_version"] = version
    if namespace is not None:
        attrs["plugin_namespace"] = namespace
    return helper.make_node("FusedAttention", list(inputs), ["y"], name=name, domain="onnx_fuse",
                            **attrs)


def fused_attention_model(node=None, *, dtype=TP.FLOAT16, hidden=128, kv_hidden=None,
                          lens_dtype=TP.INT32, with_lens=True) -> onnx.ModelProto:
    """One FusedAttention node between graph inputs and output (Hq*D = hidden)."""
    kvh = kv_hidden or hidden
    ins = [helper.make_tensor_value_info("q", dtype, ["b", "s", hidden]),
           helper.make_tensor_value_info("k", dtype, ["b", "s", kvh]),
           helper.make_tensor_value_info("v", dtype, ["b", "s", kvh])]
    if with_lens:
        ins.append(helper.make_tensor_value_info("lens", lens_dtype, ["b"]))
    node = node or fused_attention_node(inputs=[i.name for i in ins])
    out = helper.make_tensor_value_info("y", dtype, ["b", "s", hidden])
    graph = helper.make_graph([node], "fa", ins, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20),
                                                   helper.make_opsetid("onnx_fuse", 1)])


@pytest.fixture
def encoder(tmp_path):
    path = tmp_path / "encoder.onnx"
    onnx.save(encoder_model(), path)
    return path


@pytest.fixture
def models():
    """The model builders above, for tests that need variants (importlib mode: no imports)."""
    class _Models:
        encoder = staticmethod(encoder_model)
        fused_attention = staticmethod(fused_attention_model)
        fused_attention_node = staticmethod(fused_attention_node)
        ENCODER_PROFILE = list(ENCODER_PROFILE)
    return _Models


# ------------------------------------------------ GPU kernel tests (test_kernels_gpu.py, test_paged_*)
# Torch is imported inside: this conftest also serves the CPU-only tests of this folder. The GPU
# modules skip themselves (pytest.mark.gpu, no torch / no CUDA) before anything here runs.


@pytest.fixture(scope="session")
def lib():
    """The compiled kernel library, built with nvcc first when it is missing."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)")
    from onnx_fuse.plugins import build_kernels
    from onnx_fuse.plugins.kernel_lib import KernelLib, default_library_path

    path = default_library_path()
    if not path.is_file():
        if build_kernels.find_nvcc() is None:
            pytest.skip(f"{path} missing and nvcc not found to build it")
        major = torch.cuda.get_device_capability()[0]
        build_kernels.build(what=("lib",), archs=("90a",) if major >= 9 else ("80",))
    return KernelLib.load(path)


def make_paged_pool(B, Hkv, D, block_size, lens, dtype, gen, spare_blocks=3, filled=None):
    """Random K/V pools [blocks, block_size, Hkv, D] (CUDA) with shuffled block tables [B, max+1].

    Sequence b owns ceil(lens[b] / block_size) blocks (at least one) in its table; its first
    filled[b] tokens (default lens[b]) hold random values, every other slot is NaN, and the
    table entries past its blocks are -1. ``gen`` is a CUDA torch.Generator. Imported by the GPU
    test modules (``from .conftest import make_paged_pool``), which have skipped without torch.
    """
    torch = pytest.importorskip("torch", reason="torch is not installed")

    filled = lens if filled is None else filled
    blocks_per = [max(1, -(-L // block_size)) for L in lens]
    nb = sum(blocks_per) + spare_blocks
    k_pool = torch.full((nb, block_size, Hkv, D), float("nan"), dtype=dtype, device="cuda")
    v_pool = torch.full_like(k_pool, float("nan"))
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(
        int(gen.initial_seed()) % 1000))
    tables = torch.full((B, max(blocks_per) + 1), -1, dtype=torch.int32)
    i = 0
    for b, n_b in enumerate(filled):
        for j in range(blocks_per[b]):
            blk = int(perm[i])
            i += 1
            tables[b, j] = blk
            n = min(block_size, n_b - j * block_size)
            if n > 0:
                for pool in (k_pool, v_pool):
                    pool[blk, :n] = torch.randn((n, Hkv, D), generator=gen, device="cuda",
                                                dtype=torch.float32).to(dtype)
    return k_pool, v_pool, tables.cuda()


class HostBuffer:
    """What the PagedAttention plugin's run_jit reads from a tensorrt.plugin.Tensor: pointer, shape
    and element strides (row-major unless given). CPU tests pass these with made-up pointers."""

    def __init__(self, shape, ptr=4096, strides=None):
        self.data_ptr, self.shape = ptr, tuple(shape)
        if strides is None:
            st, acc = [], 1
            for s in reversed(self.shape):
                st.append(acc)
                acc *= s
            strides = tuple(reversed(st))
        self.strides = tuple(strides)
