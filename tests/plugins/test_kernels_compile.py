"""Every kernel family in plugins/kernels/ compiles with nvcc for sm_80 and sm_90 (every head size).

Skips when nvcc is not installed. Builds cubins for sm_80 and sm_90a (front end and ptxas, so
register/shared-memory limits are checked too; sm_90a holds the wgmma kernels) plus
compute_90 PTX (the plain sm_90 front end), in parallel, into a
temporary folder, and checks that every kernel the launch planner can name is in the cubins.
"""

from __future__ import annotations

import pytest

from onnx_fuse.plugins import build_kernels
from onnx_fuse.plugins import launch_plan as lp

NVCC = build_kernels.find_nvcc()
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH or under $CUDA_HOME/bin")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernels")
    res = build_kernels.build(out, what=("cubin",), archs=("80", "90a"))
    ptx = build_kernels.build(out, what=("ptx",), archs=("90",))
    return res, ptx


def test_every_family_compiles(built):
    res, ptx = built
    fams = [p.stem for p in build_kernels.kernel_sources()]
    assert {"fused_attention", "paged_attention"} <= set(fams)
    for fam in fams:
        for arch in ("80", "90a"):
            cubin = res.out_dir / f"{fam}.sm_{arch}.cubin"
            assert cubin.is_file() and cubin.stat().st_size > 0
        assert (res.out_dir / f"{fam}.compute_90.ptx").is_file()
    assert not [line for line in res.log if "spill" in line and "fa_fwd" not in line], res.log


def test_planned_kernels_exist_in_the_cubins(built):
    res, _ = built
    blobs = {arch: b"".join(p.read_bytes() for p in res.out_dir.glob(f"*.sm_{arch}.cubin")) for arch in ("80", "90a")}
    names = set()
    for dt in ("float16", "bfloat16"):
        for d in lp.SUPPORTED_HEAD_DIMS:
            for causal in (False, True):
                for v in lp.fa_variants(d):
                    names.add(lp.plan_fused_attention(2, 512, 8, 8, d, dt, causal=causal, variant=v).kernel)
            for v in lp.pa_variants(d):
                p = lp.plan_paged_decode(2, 8, 2, d, 16, 64, dt, num_splits=2, variant=v)
                names.update({p.kernel, p.reduce_kernel})
            names.add(lp.plan_append_kv(2, 1, 2, d, dt).kernel)
    for arch, blob in blobs.items():
        missing = sorted(n for n in names if n.encode() not in blob)
        assert not missing, f"sm_{arch} cubins lack {missing}"


def test_build_reports_nvcc_errors(tmp_path, monkeypatch):
    bad = tmp_path / "kernels"
    bad.mkdir()
    (bad / "broken.cu").write_text("__global__ void k() { this is not C++; }\n")
    monkeypatch.setattr(build_kernels, "KERNEL_DIR", bad)
    with pytest.raises(build_kernels.BuildError, match="broken.cu"):
        build_kernels.build(tmp_path / "out", what=("ptx",), archs=("90",))
