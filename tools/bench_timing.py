"""GPU kernel timing with a chosen L2 state before each repetition.

Every repetition starts from an L2 that holds none of the timed call's data. How it is emptied
matters for memory-bound kernels:

- ``read`` (the default): a reduction reads a buffer several times the L2's size, so the L2 is
  left full of *clean* lines. This is the state a decode attention kernel meets in a model: the
  kernels before it (projections, the KV append) read weights and write a few MB of activations.
- ``zero``: what triton.testing.do_bench does, zeroing a 256 MB buffer. The L2 is then full of
  *dirty* lines, and the timed kernel pays for writing them back to HBM while it reads. On the
  H200 that is up to the L2's 50 MB of extra DRAM traffic per call: about 5 % of a 1 GB decode read
  and more than a third of the 134 MB MQA read (docs/PERF.md, session 21, run 31a).
- ``none``: no flush (the previous repetition's lines stay).

Prefill reads 8-15 % faster after the read flush too, ours and cuDNN alike (run 31e), which the
write-back's bytes do not explain (the power limit reacting to the memset is the likelier cause), so
tools/gpu_session.sh times the prefill families under ``zero``, the harness their targets were set in. Reported: the median of the repetitions
(milliseconds), each bracketed by its own CUDA events, as do_bench's ``return_mode="median"``.
"""

from __future__ import annotations

import statistics

FLUSH_KINDS = ("read", "zero", "none")


class KernelTimer:
    """``timer(fn)`` -> median milliseconds of ``fn()`` over about ``rep_ms`` of repetitions, each after
    the flush of kind ``flush`` (see the module docstring), after about ``warmup_ms`` of warm-up calls."""

    def __init__(self, flush: str = "read", warmup_ms: float = 25.0, rep_ms: float = 150.0):
        import torch

        if flush not in FLUSH_KINDS:
            raise ValueError(f"flush must be one of {FLUSH_KINDS}, not {flush!r}")
        self.flush_kind, self.warmup_ms, self.rep_ms = flush, warmup_ms, rep_ms
        self._torch = torch
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 * 1024**2)
        if flush == "read":  # 8x the L2 (at least 512 MB): every line of the timed call's data is evicted
            n = max(512 * 1024**2, 8 * l2) // 4
            self._buf = torch.ones(n, dtype=torch.int32, device="cuda")
            self._sink = torch.empty((), dtype=torch.int64, device="cuda")
        elif flush == "zero":  # triton.testing.do_bench's cache clearing
            self._buf = torch.empty(256 * 10**6 // 4, dtype=torch.int32, device="cuda")

    def flush(self) -> None:
        if self.flush_kind == "read":
            self._torch.sum(self._buf, dim=(0,), dtype=self._torch.int64, out=self._sink)
        elif self.flush_kind == "zero":
            self._buf.zero_()

    def __call__(self, fn) -> float:
        torch = self._torch
        fn()
        torch.cuda.synchronize()
        # the per-call estimate (flush included), as do_bench sizes its loops
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            self.flush()
            fn()
        end.record()
        torch.cuda.synchronize()
        est = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(self.warmup_ms / est))):
            fn()
        n = max(1, int(self.rep_ms / est))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends):
            self.flush()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
