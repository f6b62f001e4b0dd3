"""tools/bench_timing.KernelTimer: the flush kinds it accepts, and (on a GPU) that it times what it is given."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import bench_timing  # noqa: E402


def test_unknown_flush_kind_is_refused_before_any_gpu_work():
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="flush must be one of"):
        bench_timing.KernelTimer("dirty")
    assert bench_timing.FLUSH_KINDS == ("read", "zero", "none")


@pytest.mark.gpu
@pytest.mark.parametrize("flush", bench_timing.FLUSH_KINDS)
def test_timer_orders_a_short_and_a_long_kernel(flush):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    timer = bench_timing.KernelTimer(flush, warmup_ms=2, rep_ms=20)
    short = timer(lambda: torch.cuda._sleep(20_000))
    long = timer(lambda: torch.cuda._sleep(2_000_000))
    assert 0 < short < long and long > 20 * short  # medians of the calls alone: the flush is outside the events
