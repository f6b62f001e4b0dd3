"""ctypes binding of ``libonnx_fuse_kernels.so`` (built by ``onnx_fuse.plugins.build_kernels``).

Thin wrappers over the ``extern "C"`` launch functions in plugins/kernels/*.cu that take
torch CUDA tensors (torch is imported lazily, by the caller); used by the GPU tests and
tools/bench_kernels.py. Launch planning comes from ``onnx_fuse.plugins.launch_plan``.

    lib = KernelLib.load()                       # or KernelLib.load("path/to/lib.so")
    lib.fused_attention(q, k, v, out, seq_lens=lens, causal=True)   # [B,S,H,D] tensors
    lib.fused_attention(q, k, v, out, softcap=50.0)  # Gemma 2: softmax(50 tanh(scale q k^T / 50)) v
    lib.paged_decode(q, k_pool, v_pool, block_tables, seq_lens, out)
    lib.append_kv(k_new, v_new, k_pool, v_pool, block_tables, seq_lens)
    lib.paged_prefill(q, k_pool, v_pool, block_tables, seq_lens, out, cu_seqlens_q=cu)  # sm_90a
    lib.paged_decode(..., sinks=s)               # GPT-OSS attention sinks: float32 [Hq] logits
    # fp8 (e4m3) pool: uint8 (or torch.float8_e4m3fn) pools, float32 per-kv-head scales [Hkv]
    lib.append_kv_fp8(k_new, v_new, k_pool8, v_pool8, k_scale, v_scale, block_tables, seq_lens)
    lib.paged_decode_fp8(q, k_pool8, v_pool8, k_scale, v_scale, block_tables, seq_lens, out)
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from onnx_fuse.plugins import launch_plan as lp

__all__ = ["ARGTYPES", "KernelLib", "KernelError", "check_pool_alignment", "default_library_path"]

_i, _ll, _f, _p = ctypes.c_int, ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p


# ctypes signatures of the extern "C" launch functions (checked against the .cu declarations by
# tests/plugins/test_kernel_lib_signatures.py, which needs no GPU).
ARGTYPES = {
    "onnx_fuse_fused_attention_fwd": [_i, _p, _p, _p, _p, _p, _i, _i, _i, _i, _i] + [_ll] * 12 + [_f] + [_i] * 5 + [_p],
    "onnx_fuse_fused_attention_fwd_ex": [_i, _p, _p, _p, _p, _p, _i, _i, _i, _i, _i] + [_ll] * 12 + [_f, _f]
    + [_i] * 5 + [_p],
    "onnx_fuse_fused_attention_fwd_w": [_i, _p, _p, _p, _p, _p, _i, _i, _i, _i, _i] + [_ll] * 12 + [_f, _f]
    + [_i] * 6 + [_p],
    "onnx_fuse_paged_attention_decode_ex": [_i, _p, _ll, _p, _p, _p, _p, _p, _ll, _p, _i, _i, _i, _i, _i, _i, _i, _i,
                                            _f, _i, _i, _i, _i, _p, _p],
    "onnx_fuse_append_kv": [_i, _p, _p, _ll, _ll, _p, _p, _p, _p, _i, _i, _i, _i, _i, _i, _p],
    "onnx_fuse_paged_prefill_fwd": [_i, _p, _ll, _ll, _ll, _p, _p, _p, _p, _p, _p, _ll, _ll, _ll] + [_i] * 7
    + [_f, _i, _p],
    "onnx_fuse_paged_prefill_fwd_ex": [_i, _p, _ll, _ll, _ll, _p, _p, _p, _p, _p, _p, _ll, _ll, _ll] + [_i] * 7
    + [_f, _i, _i, _i, _p],
    "onnx_fuse_paged_prefill_fwd_w": [_i, _p, _ll, _ll, _ll, _p, _p, _p, _p, _p, _p, _ll, _ll, _ll] + [_i] * 7
    + [_f, _i, _i, _p, _i, _i, _p],
    "onnx_fuse_paged_attention_decode_fp8": [_i, _p, _ll, _p, _p, _p, _p, _p, _p, _p, _ll, _p] + [_i] * 8
    + [_f, _i, _i, _i, _p, _p],
    "onnx_fuse_append_kv_fp8": [_i, _p, _p, _ll, _ll, _p, _p, _p, _p, _p, _p] + [_i] * 6 + [_p],
    "onnx_fuse_paged_attention_decode_fp8_tma": [_i, _p, _ll, _p, _p, _p, _p, _p, _p, _p, _ll, _p] + [_i] * 9
    + [_f, _i, _i, _i, _p, _p],
    "onnx_fuse_paged_attention_fp8_tma_supported": [_i, _i, _i, _i],
    "onnx_fuse_paged_attention_decode_fp8_tma_heads": [_i, _p, _ll, _p, _p, _p, _p, _p, _p, _p, _ll, _p]
    + [_i] * 9 + [_f, _i, _i, _i, _p, _p],
    "onnx_fuse_paged_attention_fp8_tma_heads_map_ok": [_p, _i, _i, _i, _i, _i],
    "onnx_fuse_paged_attention_decode_fp8_cluster": [_i, _p, _ll, _p, _p, _p, _p, _p, _p, _p, _ll, _p]
    + [_i] * 9 + [_f, _i, _i, _i, _p, _p],
    "onnx_fuse_paged_attention_fp8_cluster_smem_bytes": [_i, _i, _i],
    "onnx_fuse_paged_attention_decode_tma": [_i, _p, _ll, _p, _p, _p, _p, _p, _ll, _p] + [_i] * 9
    + [_f, _i, _i, _i, _p, _p],
    "onnx_fuse_paged_attention_tma_supported": [_i, _i, _i, _i],
    "onnx_fuse_paged_attention_tma_map_ok": [_i, _p, _i, _i, _i, _i],
    "onnx_fuse_paged_attention_decode_tma_heads": [_i, _p, _ll, _p, _p, _p, _p, _p, _ll, _p] + [_i] * 9
    + [_f, _i, _i, _i, _p, _p],
    "onnx_fuse_paged_attention_decode_cluster": [_i, _p, _ll, _p, _p, _p, _p, _p, _ll, _p] + [_i] * 9
    + [_f, _i, _i, _i, _i, _p, _p],
}


class KernelError(RuntimeError):
    """A launch function returned a CUDA error code."""


def default_library_path() -> Path:
    env = os.environ.get("ONNX_FUSE_KERNEL_LIB")
    if env:
        return Path(env)
    from onnx_fuse.plugins.build_kernels import DEFAULT_BUILD_DIR, LIB_NAME

    return DEFAULT_BUILD_DIR / LIB_NAME


def _device(t) -> "lp.DeviceInfo":
    """The GPU holding tensor ``t``: plans are the device's (plan_paged_decode's w4s2h is an H100 plan,
    not an H200 one)."""
    return lp.current_device(t.device.index if t.device.index is not None else 0)


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _numel(t) -> int:
    n = 1
    for x in t.shape:
        n *= int(x)
    return n


def _contiguous(t) -> bool:
    """Row-major dense (size-1 axes may have any stride), from shape and stride()."""
    want = 1
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        if size != 1 and stride != want:
            return False
        want *= int(size)
    return True


def _ptr(t) -> int | None:
    return None if t is None else t.data_ptr()


def check_pool_alignment(*pools) -> None:
    """Paged decode reads the pools in 16-byte pieces (every load path; docs/ops.md): a pool whose
    base is not 16-byte aligned is refused here (ValueError), as the C launchers refuse it."""
    for t in pools:
        if _ptr(t) % 16:
            raise ValueError(f"KV pool base address {_ptr(t):#x} is not 16-byte aligned")


def _window(window) -> int:
    """The sliding-window attribute as the kernels take it: an int >= 0 (0 = none)."""
    w = int(window or 0)
    if w < 0:
        raise ValueError(f"window {w} < 0 (0 = no window)")
    return w


def _check_plan_window(plan, window: int) -> None:
    """A plan sized for a window covers only that window's keys; a plan without one, any window."""
    if plan.window not in (0, window):
        raise ValueError(f"plan sized for window {plan.window}, launched with window {window}")


def _check_sinks(sinks, hq: int, q) -> None:
    """Attention sinks as the kernels read them: contiguous float32 [Hq] on q's device (or None).
    The kernels fold each query head's logit into its softmax rows' denominator."""
    if sinks is None:
        return
    if (_dtype_name(sinks) != "float32" or _numel(sinks) != hq or not _contiguous(sinks)
            or getattr(sinks, "device", None) != getattr(q, "device", None)):
        raise ValueError(f"sinks: contiguous float32 [{hq}] (one logit per query head) on the query's device")


class KernelLib:
    def __init__(self, cdll: ctypes.CDLL):
        self._lib = cdll
        for name, types in ARGTYPES.items():
            fn = getattr(cdll, name)
            fn.argtypes = types
            fn.restype = _i

    @classmethod
    def load(cls, path: str | Path | None = None) -> "KernelLib":
        p = Path(path) if path is not None else default_library_path()
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: run `python -m onnx_fuse.plugins.build_kernels`")
        return cls(ctypes.CDLL(str(p)))

    @staticmethod
    def _stream(stream) -> int:
        if stream is not None:
            return int(stream)
        import torch

        return torch.cuda.current_stream().cuda_stream

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise KernelError(f"{what} failed with CUDA error code {rc}")

    def fused_attention(self, q, k, v, out, *, seq_lens=None, causal=False, scale=None,
                        softcap=0.0, variant=None, loads=None, window=0, stream=None) -> None:
        """q/out [B,S,Hq,D], k/v [B,S,Hkv,D] (any strides, last dim contiguous). loads: the
        launcher's code, overriding the plan's (with variant FA_WS / FA_WS_TMA / FA_WS_TMA_R24 /
        FA_WS_TMA_OV / FA_WS_TMA_LD / FA_WS_TMA_OVED; see onnx_fuse_fused_attention_fwd). The experimental variants
        (``launch_plan.fa_experimental_variants``) run by name: FA_WS_TMA_PERSIST with loads 4, the D = 256
        candidates FA_WS_TMA_H256 ... H256WMN with loads 46 ... 58, session 43's split K / V candidates
        (``launch_plan.FA_SPLIT_VARIANTS``) with loads 62 ... 72 (``launch_plan.fa_launch_loads``).
        softcap > 0: logits cap * tanh(scale * q k^T / cap) (Gemma 2), the variant's ``_sc`` twin
        (``launch_plan.fa_softcap_variants``) through onnx_fuse_fused_attention_fwd_ex.
        window > 0 (sliding window, causal only): query i sees keys i - window < j <= i, through
        onnx_fuse_fused_attention_fwd_w (every variant but the experimental persistent one)."""
        window = _window(window)
        if window and not causal:
            raise ValueError("fused_attention: window > 0 needs causal attention")
        B, S, Hq, D = q.shape
        Hkv = k.shape[2]
        for t in (q, k, v, out):
            if t.stride(3) != 1:
                raise ValueError("the head-dim axis must be contiguous")
        cap = float(softcap or 0.0)
        plan = lp.plan_fused_attention(B, S, Hq, Hkv, D, _dtype_name(q), causal=causal, variant=variant,
                                       softcap=cap, window=window)
        sc = 1.0 / D**0.5 if scale is None or scale == 0.0 else float(scale)
        st = [x for t in (q, k, v, out) for x in t.stride()[:3]]
        if loads is None:
            loads = lp.fa_launch_loads(plan, by_name=variant is not None)
        if window:
            if plan.persistent or loads == 4:
                raise ValueError("the persistent fused-attention entries take no window")
            rc = self._lib.onnx_fuse_fused_attention_fwd_w(
                plan.dtype_code, _ptr(q), _ptr(k), _ptr(v), _ptr(out), _ptr(seq_lens), B, S, Hq, Hkv, D,
                *st, sc, cap, 1, window, plan.block_m, plan.block_n, plan.warps, loads,
                self._stream(stream))
            self._check(rc, "onnx_fuse_fused_attention_fwd_w")
            return
        if cap:
            rc = self._lib.onnx_fuse_fused_attention_fwd_ex(
                plan.dtype_code, _ptr(q), _ptr(k), _ptr(v), _ptr(out), _ptr(seq_lens), B, S, Hq, Hkv, D,
                *st, sc, cap, int(bool(causal)), plan.block_m, plan.block_n, plan.warps, loads,
                self._stream(stream))
            self._check(rc, "onnx_fuse_fused_attention_fwd_ex")
            return
        rc = self._lib.onnx_fuse_fused_attention_fwd(
            plan.dtype_code, _ptr(q), _ptr(k), _ptr(v), _ptr(out), _ptr(seq_lens), B, S, Hq, Hkv, D,
            *st, sc, int(bool(causal)), plan.block_m, plan.block_n, plan.warps, loads, self._stream(stream))
        self._check(rc, "onnx_fuse_fused_attention_fwd")

    def paged_decode(self, q, k_pool, v_pool, block_tables, seq_lens, out, *, scale=None,
                     num_splits=None, max_seq_len=None, workspace=None, plan=None, variant=None,
                     window=0, sinks=None, stream=None):
        """q/out [B,Hq,D]; pools [NB,BS,Hkv,D]; int32 block_tables [B,MB], seq_lens [B].
        window > 0: sliding window, the query (at position seq_lens[b] - 1) sees the last ``window``
        keys, itself included; the blocks wholly before them are not read. sinks: float32 [Hq]
        attention-sink logits (GPT-OSS; one more score per row, value zero) or None.

        Returns the plan used; allocates the split-K workspace when none is passed.
        """
        check_pool_alignment(k_pool, v_pool)
        B, Hq, D = q.shape
        _, BS, Hkv, _ = k_pool.shape
        MB = block_tables.shape[1]
        window = _window(window)
        _check_sinks(sinks, Hq, q)
        if plan is None:
            plan = lp.plan_paged_decode(B, Hq, Hkv, D, BS, MB, _dtype_name(q), num_splits=num_splits,
                                        max_seq_len=max_seq_len, variant=variant, window=window, device=_device(q))
        _check_plan_window(plan, window)
        if plan.kv_fp8:
            raise ValueError("plan is for an fp8 pool: use paged_decode_fp8")
        if plan.workspace_bytes and workspace is None:  # split-K partials (none for cluster-reduce plans)
            import torch

            workspace = torch.empty(plan.workspace_bytes // 4, dtype=torch.float32, device=q.device)
        sc = 1.0 / D**0.5 if scale is None or scale == 0.0 else float(scale)
        if plan.cluster:  # splits reduced inside a thread-block cluster: no workspace
            rc = self._lib.onnx_fuse_paged_attention_decode_cluster(
                plan.dtype_code, _ptr(q), q.stride(0), _ptr(k_pool), _ptr(v_pool), _ptr(block_tables),
                _ptr(seq_lens), _ptr(out), out.stride(0), None, B, Hq, Hkv, D, BS, MB, k_pool.shape[0],
                plan.part_tokens, plan.num_splits, sc, plan.warps, plan.stages, plan.l2_promotion, window,
                _ptr(sinks), self._stream(stream))
            self._check(rc, "onnx_fuse_paged_attention_decode_cluster")
            return plan
        if plan.bulk in (2, 3):  # TMA: tensor maps over the whole pools (their block count is needed)
            name = ("onnx_fuse_paged_attention_decode_tma", "onnx_fuse_paged_attention_decode_tma_heads")[plan.bulk - 2]
            rc = getattr(self._lib, name)(
                plan.dtype_code, _ptr(q), q.stride(0), _ptr(k_pool), _ptr(v_pool), _ptr(block_tables),
                _ptr(seq_lens), _ptr(out), out.stride(0), _ptr(workspace), B, Hq, Hkv, D, BS, MB,
                k_pool.shape[0], plan.part_tokens, plan.num_splits, sc, plan.warps, plan.stages, window,
                _ptr(sinks), self._stream(stream))
            self._check(rc, name)
            return plan
        rc = self._lib.onnx_fuse_paged_attention_decode_ex(
            plan.dtype_code, _ptr(q), q.stride(0), _ptr(k_pool), _ptr(v_pool), _ptr(block_tables),
            _ptr(seq_lens), _ptr(out), out.stride(0), _ptr(workspace), B, Hq, Hkv, D, BS, MB,
            plan.part_tokens, plan.num_splits, sc, plan.warps, plan.stages, plan.bulk, window,
            _ptr(sinks), self._stream(stream))
        self._check(rc, "onnx_fuse_paged_attention_decode_ex")
        return plan

    def append_kv(self, k_new, v_new, k_pool, v_pool, block_tables, seq_lens, *, stream=None):
        """k_new/v_new [B,Sq,Hkv,D] (same strides) into pools at seq_lens[b]-Sq+i."""
        B, Sq, Hkv, D = k_new.shape
        if k_new.stride() != v_new.stride() or k_new.stride(2) != D or k_new.stride(3) != 1:
            raise ValueError("k_new and v_new need equal strides with contiguous [Hkv, D] rows")
        rc = self._lib.onnx_fuse_append_kv(
            lp.DTYPE_CODE[lp._dt(_dtype_name(k_new))], _ptr(k_new), _ptr(v_new), k_new.stride(0),
            k_new.stride(1), _ptr(k_pool), _ptr(v_pool), _ptr(block_tables), _ptr(seq_lens), B, Sq,
            Hkv, D, k_pool.shape[1], block_tables.shape[1], self._stream(stream))
        self._check(rc, "onnx_fuse_append_kv")

    @staticmethod
    def _check_fp8_pool(k_pool, v_pool, k_scale, v_scale) -> None:
        # by dtype name, shape and strides: torch tensors and the TensorRT plugin's buffer views alike
        fp8 = ("uint8", "float8_e4m3fn")
        if _dtype_name(k_pool) not in fp8 or _dtype_name(v_pool) not in fp8:
            raise ValueError(f"fp8 pools hold e4m3 bytes: uint8 or float8_e4m3fn, not {k_pool.dtype}/{v_pool.dtype}")
        hkv = k_pool.shape[2]
        for t in (k_scale, v_scale):
            if (_dtype_name(t) != "float32" or _numel(t) != hkv or not _contiguous(t)
                    or getattr(t, "device", None) != getattr(k_pool, "device", None)):
                raise ValueError(f"k_scale/v_scale: contiguous float32 [{hkv}] on the pools' device")
        if not (_contiguous(k_pool) and _contiguous(v_pool)) or tuple(k_pool.shape) != tuple(v_pool.shape):
            raise ValueError("k_pool and v_pool: contiguous [num_blocks, block_size, Hkv, D] of one shape")

    def paged_decode_fp8(self, q, k_pool, v_pool, k_scale, v_scale, block_tables, seq_lens, out, *,
                         scale=None, num_splits=None, max_seq_len=None, workspace=None, plan=None,
                         variant=None, window=0, sinks=None, stream=None):
        """Decode over an fp8 (e4m3) pool: q/out [B,Hq,D] fp16|bf16; pools uint8 (or
        float8_e4m3fn) [NB,BS,Hkv,D]; k_scale/v_scale float32 [Hkv] (value = e4m3 * scale);
        variant (warps, stages), (warps, stages, "tma"), (warps, stages, "heads") (head groups) or
        (warps, stages, "cluster") (head groups, splits combined in a thread-block cluster);
        window, sinks: as paged_decode's. Returns the plan used; allocates the split-K workspace when
        none is passed."""
        self._check_fp8_pool(k_pool, v_pool, k_scale, v_scale)
        check_pool_alignment(k_pool, v_pool)
        B, Hq, D = q.shape
        _check_sinks(sinks, Hq, q)
        _, BS, Hkv, _ = k_pool.shape
        MB = block_tables.shape[1]
        window = _window(window)
        if plan is None:
            plan = lp.plan_paged_decode(B, Hq, Hkv, D, BS, MB, _dtype_name(q), num_splits=num_splits,
                                        max_seq_len=max_seq_len, variant=variant, kv_dtype="fp8",
                                        window=window, device=_device(q))
        _check_plan_window(plan, window)
        if not plan.kv_fp8:
            raise ValueError("plan is for a 16-bit pool: plan with kv_dtype='fp8'")
        if plan.workspace_bytes and workspace is None:  # split-K partials (none for cluster-reduce plans)
            import torch

            workspace = torch.empty(plan.workspace_bytes // 4, dtype=torch.float32, device=q.device)
        sc = 1.0 / D**0.5 if scale is None or scale == 0.0 else float(scale)
        if plan.cluster:  # splits combined inside a thread-block cluster: no workspace, no reduce kernel
            rc = self._lib.onnx_fuse_paged_attention_decode_fp8_cluster(
                plan.dtype_code, _ptr(q), q.stride(0), _ptr(k_pool), _ptr(v_pool), _ptr(k_scale), _ptr(v_scale),
                _ptr(block_tables), _ptr(seq_lens), _ptr(out), out.stride(0), None, B, Hq, Hkv, D, BS, MB,
                k_pool.shape[0], plan.part_tokens, plan.num_splits, sc, plan.warps, plan.stages, window,
                _ptr(sinks), self._stream(stream))
            self._check(rc, "onnx_fuse_paged_attention_decode_fp8_cluster")
            return plan
        if plan.tma:  # tensor maps over the whole pools: their block count is part of the launch
            name = ("onnx_fuse_paged_attention_decode_fp8_tma_heads" if plan.bulk == 3
                    else "onnx_fuse_paged_attention_decode_fp8_tma")
            rc = getattr(self._lib, name)(
                plan.dtype_code, _ptr(q), q.stride(0), _ptr(k_pool), _ptr(v_pool), _ptr(k_scale), _ptr(v_scale),
                _ptr(block_tables), _ptr(seq_lens), _ptr(out), out.stride(0), _ptr(workspace), B, Hq, Hkv, D,
                BS, MB, k_pool.shape[0], plan.part_tokens, plan.num_splits, sc, plan.warps, plan.stages,
                window, _ptr(sinks), self._stream(stream))
            self._check(rc, name)
            return plan
        rc = self._lib.onnx_fuse_paged_attention_decode_fp8(
            plan.dtype_code, _ptr(q), q.stride(0), _ptr(k_pool), _ptr(v_pool), _ptr(k_scale), _ptr(v_scale),
            _ptr(block_tables), _ptr(seq_lens), _ptr(out), out.stride(0), _ptr(workspace), B, Hq, Hkv, D,
            BS, MB, plan.part_tokens, plan.num_splits, sc, plan.warps, plan.stages, window,
            _ptr(sinks), self._stream(stream))
        self._check(rc, "onnx_fuse_paged_attention_decode_fp8")
        return plan

    def tma_supported(self, head_dim: int, block_size: int, warps: int, stages: int) -> bool:
        """Whether onnx_fuse_paged_attention_decode_tma (16-bit pool) runs its TMA kernel here."""
        return bool(self._lib.onnx_fuse_paged_attention_tma_supported(head_dim, block_size, warps, stages))

    def tma_map_ok(self, pool) -> bool:
        """Whether the driver encodes the tensor map the 16-bit TMA decode builds over ``pool``
        [NB, BS, Hkv, D] (else that launcher runs its bulk / cp.async fallback)."""
        nb, bs, hkv, d = pool.shape
        return bool(self._lib.onnx_fuse_paged_attention_tma_map_ok(
            lp.DTYPE_CODE[lp._dt(_dtype_name(pool))], _ptr(pool), nb, bs, hkv, d))

    def fp8_tma_supported(self, head_dim: int, block_size: int, warps: int, stages: int) -> bool:
        """Whether onnx_fuse_paged_attention_decode_fp8_tma runs its TMA kernel for these sizes on
        the current device (else it runs the cp.async variant of the same warps and stages)."""
        return bool(self._lib.onnx_fuse_paged_attention_fp8_tma_supported(head_dim, block_size, warps, stages))

    def fp8_tma_heads_map_ok(self, pool, warps: int) -> bool:
        """Whether onnx_fuse_paged_attention_decode_fp8_tma_heads runs its head-group kernel over the
        uint8 ``pool`` [NB, BS, Hkv, D] in groups of ``warps`` kv heads (else it runs the per-kv-head
        TMA kernel)."""
        nb, bs, hkv, d = pool.shape
        return bool(self._lib.onnx_fuse_paged_attention_fp8_tma_heads_map_ok(_ptr(pool), nb, bs, hkv, d, warps))

    def append_kv_fp8(self, k_new, v_new, k_pool, v_pool, k_scale, v_scale, block_tables, seq_lens, *,
                      stream=None):
        """Quantize k_new/v_new [B,Sq,Hkv,D] (fp16|bf16, same strides) into the fp8 pools at
        seq_lens[b]-Sq+i: e4m3(x / scale[h]), round to nearest even, saturated to +-448."""
        self._check_fp8_pool(k_pool, v_pool, k_scale, v_scale)
        B, Sq, Hkv, D = k_new.shape
        if k_new.stride() != v_new.stride() or k_new.stride(2) != D or k_new.stride(3) != 1:
            raise ValueError("k_new and v_new need equal strides with contiguous [Hkv, D] rows")
        rc = self._lib.onnx_fuse_append_kv_fp8(
            lp.DTYPE_CODE[lp._dt(_dtype_name(k_new))], _ptr(k_new), _ptr(v_new), k_new.stride(0),
            k_new.stride(1), _ptr(k_pool), _ptr(v_pool), _ptr(k_scale), _ptr(v_scale), _ptr(block_tables),
            _ptr(seq_lens), B, Sq, Hkv, D, k_pool.shape[1], block_tables.shape[1], self._stream(stream))
        self._check(rc, "onnx_fuse_append_kv_fp8")

    def paged_prefill(self, q, k_pool, v_pool, block_tables, seq_lens, out, *, cu_seqlens_q=None,
                      max_q_len=None, causal=True, scale=None, loads=None, window=0, sinks=None,
                      stream=None) -> None:
        """Prefill over a paged prefix: new tokens' queries over every cached token (the new
        tokens' K/V already appended). q/out packed [total_q, Hq, D] with int32 cu_seqlens_q
        [B + 1], or [B, Sq, Hq, D] without; pools [NB, BS, Hkv, D]; block_tables [B, MB];
        seq_lens [B] counts the new tokens. max_q_len: longest q_len (default: from the host copy
        of cu_seqlens_q, which synchronizes; pass it to avoid that). loads: None = planned
        (``launch_plan.plan_paged_prefill_loads``: TMA at the planned block sizes (16-128), the launcher
        falling back to cp.async where the pools cannot be mapped), "tma" (refused where TMA
        cannot take the pools) or "cp.async". window > 0 (sliding window, causal only): new token i
        of sequence b (position p = seq_lens[b] - q_len_b + i) sees keys p - window < j <= p.
        sinks: float32 [Hq] attention-sink logits, as paged_decode's."""
        window = _window(window)
        if window and not causal:
            raise ValueError("paged_prefill: window > 0 needs causal=True")
        for t in (q, out):
            if t.stride(-1) != 1:
                raise ValueError("the head-dim axis must be contiguous")
        D, Hq = q.shape[-1], q.shape[-2]
        _check_sinks(sinks, Hq, q)
        NB, BS, Hkv, _ = k_pool.shape
        NB, BS = int(NB), int(BS)
        # launcher codes: 0 cp.async, 1 TMA (the launcher refuses pools it cannot map), 2 TMA else
        # cp.async; bad head / block sizes are left to the launcher's refusal
        if loads is None:
            ok = D in lp.PP_HEAD_DIMS and BS > 0 and BS & (BS - 1) == 0
            code = 2 if ok and lp.plan_paged_prefill_loads(D, BS) == "tma" else 0
        elif loads in lp.PP_LOADS:
            code = 1 if loads == "tma" else 0
        else:
            raise ValueError(f"loads={loads!r}: None, 'tma' or 'cp.async'")
        if cu_seqlens_q is not None:
            if q.dim() != 3:
                raise ValueError("packed queries are [total_q, Hq, D]")
            B = cu_seqlens_q.shape[0] - 1
            if max_q_len is None:
                cu = cu_seqlens_q.cpu().tolist()
                max_q_len = max(b - a for a, b in zip(cu, cu[1:]))
            q_sb = o_sb = 0
            q_ts, q_hs, o_ts, o_hs = q.stride(0), q.stride(1), out.stride(0), out.stride(1)
        else:
            if q.dim() != 4:
                raise ValueError("queries without cu_seqlens_q are [B, Sq, Hq, D]")
            B, max_q_len = q.shape[0], q.shape[1]
            q_sb, q_ts, q_hs = q.stride()[:3]
            o_sb, o_ts, o_hs = out.stride()[:3]
        sc = 1.0 / D**0.5 if scale is None or scale == 0.0 else float(scale)
        rc = self._lib.onnx_fuse_paged_prefill_fwd_w(
            lp.DTYPE_CODE[lp._dt(_dtype_name(q))], _ptr(q), q_sb, q_ts, q_hs, _ptr(cu_seqlens_q),
            _ptr(k_pool), _ptr(v_pool), _ptr(block_tables), _ptr(seq_lens), _ptr(out), o_sb, o_ts,
            o_hs, B, int(max(max_q_len, 1)), Hq, Hkv, D, BS, block_tables.shape[1], sc,
            int(bool(causal)), window, _ptr(sinks), NB, code, self._stream(stream))
        self._check(rc, "onnx_fuse_paged_prefill_fwd_w")
