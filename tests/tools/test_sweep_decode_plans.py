"""tools/sweep_decode_plans.py without a GPU: the named sets and the plans they resolve to on the H100 and
the H200 (docs/PERF.md runs 37b-39c name them), the split-count arithmetic, argument errors, the table,
and the check-then-time loop with a stand-in library on the CPU (a wrong plan is never timed). The run
on a GPU is `bash tools/gpu_session.sh sweep`."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import sweep_decode_plans as sw  # noqa: E402

lp = sw.lp
H100, H200 = lp.H100, lp.H200


def _labels(set_name, device):
    shapes, specs = sw.SETS[set_name]
    cands = [sw.parse_candidate(s) for s in specs]
    return {(b, c): [cell.get("plan", cell["status"]) for cell in sw.resolve_all(sw.Shape(b, c), cands, device)[0]]
            for b, c in shapes}


def test_h200_set_is_run_38_with_the_plans_of_each_device():
    shapes, specs = sw.SETS["h200"]
    assert shapes == ((4, 32768), (8, 8192), (8, 32768), (16, 4096), (16, 16384), (32, 4096), (64, 4096))
    assert specs == ("planned", "w8s2h@n", "w8s3h@n", "w4s3h@n/2", "w4s2h@n/2")
    h100, h200 = _labels("h200", H100), _labels("h200", H200)
    # run 38 on the H100: n 31 / 15 / 8 / 4 / 2, the plan w4s2h at ceil(n / 2)
    assert h100[(4, 32768)] == ["w4s2h s16", "w8s2h s31", "w8s3h s31", "w4s3h s16", "w4s2h s16"]
    assert h100[(8, 8192)] == ["w4s2h s8", "w8s2h s15", "w8s3h s15", "w4s3h s8", "w4s2h s8"]
    assert h100[(64, 4096)] == ["w4s2h s1", "w8s2h s2", "w8s3h s2", "w4s3h s1", "w4s2h s1"]
    # on the H200 the 8-head groups are planned (the cluster reduce at two splits in one wave), and from
    # W4S3H_MIN_SPLITS splits on (n 15 / 31: runs 41a-b) 4-head groups with three stages at ceil(n / 2)
    assert h200[(64, 4096)] == ["w8s2hc s2", "w8s2h s2", "w8s3h s2", "w4s3h s1", "w4s2h s1"]
    assert h200[(16, 4096)][0] == "w8s2h s8" and h200[(32, 4096)][0] == "w8s2h s4"
    assert h200[(4, 32768)][0] == "w4s3h s16" and h200[(8, 8192)][0] == "w4s3h s8"
    assert all(row[0] == (row[3] if int(row[1].split(" s")[1]) >= 15 else row[1])
               for k, row in h200.items() if k != (64, 4096))


def test_wave_and_splits_sets_past_one_wave_on_the_h100():
    shapes, specs = sw.SETS["wave"]
    assert shapes[:6] == tuple((b, c) for b in (40, 48, 56) for c in (4096, 8192))
    assert shapes[6:] == ((19, 4096), (28, 4096), (36, 4096), (45, 4096))
    assert specs == ("planned", "w4s2h@3", "w4s2h@4", "w8s2h@4")
    wave = _labels("wave", H100)
    for c in (4096, 8192):  # run 39c: planned w8s2h s3 / s5 / s7 (the 4-head halves overfill one wave)
        assert [wave[(b, c)][0] for b in (40, 48, 56)] == ["w8s2h s3", "w8s2h s5", "w8s2h s7"]
        assert wave[(48, c)][1:] == ["w4s2h s3", "w4s2h s4", "w8s2h s4"]
    assert [wave[(b, 4096)][0] for b in (19, 28, 36, 45)] == ["w8s2h s13", "w8s2h s13", "w8s2h s7", "w8s2h s8"]
    shapes, specs = sw.SETS["splits"]
    assert set(shapes) == {(16, 4096), (40, 4096), (48, 4096), (48, 8192), (56, 4096), (32, 4096), (16, 16384)}
    assert specs == ("planned", "w4s2h@3", "w4s2h@4", "w4s2h@8", "w8s2h@4", "w8s2h@8")
    assert _labels("splits", H100)[(16, 4096)][0] == "w4s2h s4"


def test_d64_small_grid_plans_are_the_launches_runs_44a_b_timed():
    """H16/1 (and H32/4) D64 on the H100 (docs/PERF.md thirty-third round): `planned` resolves to the same launch
    (plan key) as the timed candidate the H100 rule picks, w4s2t at 8 / 4 splits up to base 80, w16s2t at one
    split from base 96 to one CTA per SM; the H200 keeps the w16s2t plan it had (the old H100 plan)."""
    cands = [sw.parse_candidate(s, head_dim=64) for s in ("planned", "w4s2t@8", "w4s2t@4", "w16s2t@1")]
    want = {16: 1, 32: 1, 48: 2, 64: 2, 80: 2, 96: 3, 112: 3, 128: 3}  # index of the candidate planned
    old = {16: 8, 32: 4, 48: 5, 64: 2, 80: 3, 96: 4, 112: 7, 128: 1}  # w16s2t splits before (and on the H200)
    for b, i in want.items():
        for dtype in ("float16", "bfloat16"):
            shape = sw.Shape(b, 4096, dtype, heads=16, kv_heads=1, head_dim=64)
            cells, plans = sw.resolve_all(shape, cands, H100)
            assert cells[0]["key"] == cells[i]["key"], (b, dtype, cells[0]["plan"])
            h200 = sw.resolve_all(shape, cands[:1], H200)[0][0]["plan"]
            assert h200 == f"w16s2t s{old[b]}", (b, h200)
            forced = sw.resolve_all(shape, [sw.parse_candidate(f"w16s2t@{old[b]}", head_dim=64)], H100)[0][0]
            assert forced["plan"] == h200  # the old plan, timed explicitly beside the new one (out/run34/mqa3.sh)
    for b, c in ((32, 16384), (64, 8192), (64, 16384)):
        cells, _ = sw.resolve_all(sw.Shape(b, c, heads=16, kv_heads=1, head_dim=64), cands, H100)
        assert cells[0]["key"] == cells[1 if b == 32 else 2]["key"], (b, c)
    cells, _ = sw.resolve_all(sw.Shape(16, 4096, heads=32, kv_heads=4, head_dim=64), cands, H100)
    assert cells[0]["plan"] == "w4s2t s4" and cells[0]["key"] == cells[2]["key"]
    cells, _ = sw.resolve_all(sw.Shape(256, 4096, heads=16, kv_heads=1, head_dim=64), cands, H100)
    assert cells[0]["plan"] == "w4s2t s2"  # past one CTA per SM: unchanged


def test_split_counts_n_and_half():
    assert [sw.eight_head_splits(sw.Shape(b, c), H100) for b, c in
            ((4, 32768), (8, 8192), (16, 4096), (32, 4096), (40, 4096), (48, 4096), (56, 4096), (64, 4096))] == \
        [31, 15, 8, 4, 3, 5, 7, 2]
    assert [sw.split_count(s, 15) for s in ("n", "n/2", 4)] == [15, 8, 4]
    assert sw.split_count("n/2", 2) == 1 and sw.split_count("n/2", 1) == 1
    with pytest.raises(ValueError, match="Hkv % 8"):  # no 8-head groups at 4 kv heads: no n
        sw.eight_head_splits(sw.Shape(8, 4096, kv_heads=4), H100)


def test_candidate_specs():
    assert sw.parse_candidate("planned") == sw.Candidate("planned")
    assert sw.parse_candidate("w8s2hc@2") == sw.Candidate("w8s2hc@2", (8, 2, 4), 2)
    assert sw.parse_candidate("w4s3t@n/2").variant == (4, 3, 2)
    assert sw.parse_candidate("w4s3b@n").splits == "n"
    for bad, msg in (("w4s2x@4", "expected 'planned'"), ("w4s2h", "expected"), ("planned@2", "expected"),
                     ("w4s2h@n/3", "expected"), ("w16s2h@4", "not compiled at D=128"), ("w4s2h@0", "one split")):
        with pytest.raises(ValueError, match=msg):
            sw.parse_candidate(bad)
    with pytest.raises(ValueError, match="not compiled at D=256"):  # head groups: D 64 / 128 only
        sw.parse_candidate("w4s2h@1", head_dim=256)


def test_same_launch_is_timed_once_and_refusals_are_cells():
    cands = [sw.parse_candidate(s) for s in ("planned", "w4s2h@n/2", "w8s2hc@16", "w8s2h@n")]
    cells, plans = sw.resolve_all(sw.Shape(64, 4096), cands, H100)
    assert len(plans) == 2  # planned = w4s2h s1 on the H100
    assert cells[0]["key"] == cells[1]["key"] and cells[0]["ctas"] == 128
    assert cells[2]["status"].startswith("refused:") and "at most 8 splits" in cells[2]["status"]
    assert cells[3]["plan"] == "w8s2h s2"


def test_shape_specs_and_argument_errors(capsys):
    assert sw.parse_shape("48x4096") == sw.Shape(48, 4096)
    assert sw.parse_shape("8x32768:bf16", block=32).dtype == "bfloat16"
    for bad in ("48-4096", "48x4100", "48x4096:fp32", "0x4096", "4x8"):
        with pytest.raises(ValueError, match="shape"):
            sw.parse_shape(bad)
    a = sw.parse_args(["--set", "wave", "--dtype", "bf16", "--passes", "5"])
    assert len(a.shapes_) == 10 and {s.dtype for s in a.shapes_} == {"bfloat16"} and len(a.candidates) == 4
    a = sw.parse_args(["--shapes", "48x4096", "--heads", "16/4"])
    assert a.shapes_ == [sw.Shape(48, 4096, heads=16, kv_heads=4)]
    assert [c.spec for c in a.candidates] == list(sw.DEFAULT_PLANS)
    for argv, msg in ((["--passes", "2"], "name a --set or give --shapes"),
                      (["--set", "h200", "--passes", "0"], "at least 1"),
                      (["--set", "h200", "--heads", "32/7"], "HKV dividing HQ"),
                      (["--set", "h200", "--plans", "w4s2q@4"], "expected 'planned'"),
                      (["--set", "wave", "--head-dim", "80"], "'w4s2h@3': w4s2h is not compiled at D=80"),
                      (["--shapes", "48x4096", "--block", "12"], "multiple of the block (12)"),
                      (["--set", "nope"], "invalid choice")):
        with pytest.raises(SystemExit) as e:
            sw.parse_args(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err, argv


def test_markdown_table():
    def cell(spec, plan, med, status="ok"):
        return {"spec": spec, "plan": plan, "status": status, "median": med, "gbs": [med] if med else []}
    results = [{"shape": "B48 ctx4096", "n": 5, "sdpa": {"median": 3058.0},
                "cells": [cell("planned", "w8s2h s5", 2972.0), cell("w4s2h@4", "w4s2h s4", 3027.4),
                          cell("w4s3h@n/2", "w4s3h s3", None, "WRONG (rel err full 3.0e-02 > 4e-03): not timed")]},
               {"shape": "B64 ctx4096 bf16", "n": None, "sdpa": {"median": 3000.0},
                "cells": [cell("planned", "w4s2h s1", 3000.0), {"spec": "w8s2hc@16", "status": "refused: at most 8"}]}]
    lines = sw.markdown_table(results).splitlines()
    assert lines[0] == "| B, ctx (n) | `planned` | `w4s2h@4` | `w4s3h@n/2` | `w8s2hc@16` | torch SDPA |"
    assert lines[1] == "|---|---|---|---|---|---|"
    assert lines[2] == ("| B48 ctx4096 (n 5) | 2972 (97.2 %) `w8s2h s5` | **3027 (99.0 %)** `w4s2h s4` | "
                        "w4s3h s3 WRONG (rel err full 3.0e-02 > 4e-03): not timed |  | 3058 |")
    assert lines[3] == "| B64 ctx4096 bf16 | **3000 (100.0 %)** `w4s2h s1` |  |  | refused: at most 8 | 3000 |"


class _FakeLib:
    """paged_decode on the CPU: the plan's answer from the gathered pool (NaN slots past each length are
    masked as the kernels do); plans of three splits answer wrong. Records the plans it runs."""

    def __init__(self, torch):
        self.torch, self.calls = torch, []

    def paged_decode(self, q, k_pool, v_pool, tables, seq, out, *, plan, workspace):
        torch = self.torch
        self.calls.append(plan.num_splits)
        B, Hq, D = q.shape
        _, bs, Hkv, _ = k_pool.shape
        k = k_pool[tables.long()].reshape(B, -1, Hkv, D).transpose(1, 2).float().repeat_interleave(Hq // Hkv, 1)
        v = v_pool[tables.long()].reshape(B, -1, Hkv, D).transpose(1, 2).float().repeat_interleave(Hq // Hkv, 1)
        live = torch.arange(k.shape[2])[None, :] < seq.long()[:, None]
        s = (q.float()[:, :, None] @ k.transpose(2, 3))[:, :, 0] / math.sqrt(D)
        p = s.masked_fill(~live[:, None], float("-inf")).softmax(-1)
        o = (p[:, :, None] @ v.nan_to_num().masked_fill(~live[:, None, :, None], 0))[:, :, 0]
        out.copy_(o * (1.5 if plan.num_splits == 3 else 1.0))
        return plan

    def paged_decode_fp8(self, q, k8, v8, ks, vs, tables, seq, out, *, plan, workspace):
        assert k8.dtype == v8.dtype == self.torch.uint8 and plan.kv_fp8

        def deq(b8, sc):
            return b8.view(self.torch.float8_e4m3fn).float() * sc[None, None, :, None]
        return self.paged_decode(q, deq(k8, ks), deq(v8, vs), tables, seq, out, plan=plan, workspace=workspace)


def test_check_then_time_with_a_stand_in_library():
    torch = pytest.importorskip("torch")
    lib = _FakeLib(torch)
    timed = []

    def bench(fn):  # a stand-in timer: one call, a fixed time per callable
        fn()
        timed.append(fn)
        return 1.0
    cands = [sw.parse_candidate(s) for s in ("planned", "w4s2h@n/2", "w4s2h@3", "w8s2h@n", "w8s2hc@16")]
    shape = sw.Shape(32, 1024, heads=8, kv_heads=8)  # n = 4 splits of 8-head groups in one wave on the H100
    r = sw.run_shape(lib, bench, shape, cands, H100, passes=2, dev="cpu")
    by = {c["spec"]: c for c in r["cells"]}
    assert r["n"] == 4 and by["planned"]["plan"] == by["w4s2h@n/2"]["plan"] == "w4s2h s2"
    assert by["w4s2h@3"]["status"].startswith("WRONG") and by["w4s2h@3"]["median"] is None
    assert by["w8s2hc@16"]["status"].startswith("refused")
    gb = shape.kv_bytes() / 1e-3 / 1e9  # 1 ms per call
    for spec in ("planned", "w4s2h@n/2", "w8s2h@n"):
        assert by[spec]["status"] == "ok" and by[spec]["gbs"] == [gb, gb] and by[spec]["rel_err"]["ragged"] < 1e-3
    assert r["sdpa"]["median"] == gb and r["sdpa"]["rel_err"] < 4e-3
    # the checks ran the three distinct plans on full and ragged lengths, the wrong one among them; the
    # timed passes ran the right ones only: (2 plans + SDPA) x 2 passes
    assert sorted(lib.calls[:6]) == [2, 2, 3, 3, 4, 4]
    assert 3 not in lib.calls[6:] and len(timed) == 6


@pytest.mark.gpu
def test_sweep_on_the_gpu_checks_and_times_the_planned_launch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU and the kernel library (the device run: bash tools/gpu_session.sh sweep)")
    from bench_kernels import load_library
    from bench_timing import KernelTimer

    cands = [sw.parse_candidate(s) for s in ("planned", "w8s2h@n", "w4s2h@n/2")]
    r = sw.run_shape(load_library(), KernelTimer("read", warmup_ms=2, rep_ms=10), sw.Shape(16, 2048), cands,
                     lp.current_device(), passes=1)
    for c in r["cells"]:
        assert c["status"] == "ok" and c["median"] > 0 and max(c["rel_err"].values()) < sw.TOL["float16"], c
    assert r["sdpa"]["median"] > 0


def test_block_orders_of_the_table():
    """--table (session 35): every order hands out each of the pool's blocks once; identity gives sequence b its
    own span in order, local the same span in a random order, shuffled blocks from anywhere in the pool."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    B, nb = 6, 64
    tabs = {o: sw.block_table(torch, B, nb, o, g, "cpu") for o in sw.TABLES}
    span = torch.arange(B * nb, dtype=torch.int32).view(B, nb)
    for o, t in tabs.items():
        assert t.dtype == torch.int32 and t.shape == (B, nb) and t.is_contiguous(), o
        assert torch.equal(t.flatten().sort().values, span.flatten()), o  # a permutation of the pool
    assert torch.equal(tabs["identity"], span)
    assert torch.equal(tabs["local"].sort(1).values, span) and not torch.equal(tabs["local"], span)
    assert not torch.equal(tabs["shuffled"].sort(1).values, span)  # rows draw from other sequences' spans
    with pytest.raises(ValueError):
        sw.block_table(torch, B, nb, "reversed", g, "cpu")
    a = sw.parse_args(["--shapes", "128x4096", "64x4096", "--heads", "16/1", "--head-dim", "64",
                       "--table", "shuffled", "identity", "local"])
    assert [(s.batch, s.table) for s in a.shapes_] == [(b, t) for b in (128, 64) for t in sw.TABLES]
    assert [s.label for s in a.shapes_[:3]] == ["B128 ctx4096", "B128 ctx4096 identity", "B128 ctx4096 local"]
    assert {s.table for s in sw.parse_args(["--shapes", "8x256"]).shapes_} == {"shuffled"}


def test_check_then_time_on_each_block_order():
    torch = pytest.importorskip("torch")
    lib = _FakeLib(torch)
    cands = [sw.parse_candidate("planned", head_dim=64)]
    for order in sw.TABLES:
        shape = sw.Shape(4, 256, heads=16, kv_heads=1, head_dim=64, table=order)
        r = sw.run_shape(lib, lambda fn: (fn(), 1.0)[1], shape, cands, H100, passes=1, dev="cpu")
        cell = r["cells"][0]
        assert r["shape"].endswith("" if order == "shuffled" else order) and cell["status"] == "ok", order
        assert max(cell["rel_err"].values()) < 1e-3 and r["sdpa"]["rel_err"] < 4e-3, order


def test_candidates_on_a_second_library():
    """--lib-b (session 35): a ``b:`` candidate is the same launch on the other library, checked and timed
    apart from the plain one; b: candidates without --lib-b are an argument error."""
    torch = pytest.importorskip("torch")
    c = sw.parse_candidate("b:w16s2t@1", head_dim=64)
    assert (c.lib, c.variant, c.splits) == ("b", (16, 2, 2), 1) and sw.parse_candidate("b:planned").lib == "b"
    assert sw.parse_candidate("planned").lib == "a"
    with pytest.raises(ValueError):
        sw.parse_candidate("b:w16s9t@1", head_dim=64)
    with pytest.raises(SystemExit):
        sw.parse_args(["--shapes", "8x256", "--plans", "planned", "b:planned"])
    a = sw.parse_args(["--shapes", "8x256", "--plans", "planned", "b:planned", "--lib-b", "x.so"])
    assert [c.lib for c in a.candidates] == ["a", "b"] and a.lib_b == "x.so"
    libs = {"a": _FakeLib(torch), "b": _FakeLib(torch)}
    cands = [sw.parse_candidate(s, head_dim=64) for s in ("planned", "w16s2t@1", "b:planned", "b:w16s2t@3")]
    shape = sw.Shape(4, 1024, heads=16, kv_heads=1, head_dim=64)
    r = sw.run_shape(libs, lambda fn: (fn(), 1.0)[1], shape, cands, H100, passes=2, dev="cpu")
    by = {c["spec"]: c for c in r["cells"]}
    assert by["planned"]["plan"] == by["b:planned"]["plan"] and by["planned"]["gbs"] and by["b:planned"]["gbs"]
    assert by["b:w16s2t@3"]["status"].startswith("WRONG")  # the stand-in scales 3-split outputs: never timed
    # each library ran its own candidates' checks (full + ragged) and timed passes (2): planned is w4s2t at 4
    # splits here (the H100's small-grid rule); the wrong 3-split plan was checked on b and never timed
    assert by["planned"]["plan"] == "w4s2t s4"
    assert sorted(libs["a"].calls) == [1] * 4 + [4] * 4 and sorted(libs["b"].calls) == [3] * 2 + [4] * 4


def test_fp8_pool_candidates_and_plans():
    """--kv-dtype fp8 (session 36): the fp8 pool's variants by kernel suffix (cp.async none, t TMA, h head
    groups, hc cluster; no bulk), its planner's launches, the shapes' labels and byte counts."""
    c = sw.parse_candidate("w4s3t@4", head_dim=64, kv_dtype="fp8")
    assert (c.variant, c.splits) == ((4, 3, "tma"), 4)
    assert sw.parse_candidate("w4s6@1", head_dim=96, kv_dtype="fp8").variant == (4, 6)
    assert sw.parse_candidate("w8s2h@n", kv_dtype="fp8").variant == (8, 2, "heads")
    assert sw.parse_candidate("b:w4s4hc@2", kv_dtype="fp8").variant == (4, 4, "cluster")
    for bad, d in (("w4s3b@1", 128), ("w4s3t@1", 96), ("w8s3@1", 256), ("w4s3h@1", 256), ("w4s3@1", 80)):
        with pytest.raises(ValueError, match="not compiled for the fp8 pool"):
            sw.parse_candidate(bad, head_dim=d, kv_dtype="fp8")
    assert [sw.variant_name(v) for v in ((4, 3), (4, 3, "tma"), (8, 2, "heads"), (4, 4, "cluster"), (4, 2, 2))] == [
        "w4s3", "w4s3t", "w8s2h", "w4s4hc", "w4s2t"]
    mqa = sw.Shape(128, 4096, heads=16, kv_heads=1, head_dim=64, kv_dtype="fp8")
    assert mqa.label == "B128 ctx4096 fp8" and 2 * mqa.kv_bytes() == mqa.sdpa_bytes() == 2 * 128 * 4096 * 64 * 2
    cands = [sw.parse_candidate(s, 64, "fp8") for s in ("planned", "w4s3@4", "w8s2h@1")]
    cells, plans = sw.resolve_all(mqa, cands, H100)
    assert [c.get("plan") for c in cells[:2]] == ["w4s3t s4", "w4s3 s4"] and len(plans) == 2
    assert cells[2]["status"].startswith("refused")  # head groups of 8 need Hkv % 8 == 0
    gqa = sw.Shape(64, 4096, head_dim=128, kv_dtype="fp8")
    cells, _ = sw.resolve_all(gqa, [sw.parse_candidate(s, 128, "fp8") for s in ("planned", "w8s2h@n")], H100)
    assert [c["plan"] for c in cells] == ["w4s4hc s2", "w8s2h s4"]
    a = sw.parse_args(["--shapes", "128x4096", "--heads", "16/1", "--head-dim", "64", "--kv-dtype", "fp8",
                       "--plans", "planned", "w4s3t@4"])
    assert a.shapes_ == [mqa] and a.candidates[1].variant == (4, 3, "tma")
    with pytest.raises(SystemExit):  # a bulk variant: no fp8 kernel
        sw.parse_args(["--shapes", "8x256", "--kv-dtype", "fp8", "--plans", "w4s3b@1"])


def test_fp8_pool_check_then_time_with_a_stand_in_library():
    """The fp8 sweep quantizes the pools (e4m3, per-kv-head scales), checks each plan against the reference on
    the dequantized K/V (NaN bytes past the ragged ends) and times the right ones; GB/s count 1 byte per pool
    element, 2 per SDPA cache element."""
    torch = pytest.importorskip("torch")
    lib = _FakeLib(torch)
    cands = [sw.parse_candidate(s, 64, "fp8") for s in ("planned", "w4s3@3", "w4s3@2")]
    shape = sw.Shape(2, 1024, heads=16, kv_heads=2, head_dim=64, kv_dtype="fp8")  # planned: w4s3t s4
    r = sw.run_shape(lib, lambda fn: (fn(), 1.0)[1], shape, cands, H100, passes=2, dev="cpu")
    by = {c["spec"]: c for c in r["cells"]}
    assert by["w4s3@3"]["status"].startswith("WRONG") and by["w4s3@3"]["median"] is None
    for spec in ("planned", "w4s3@2"):
        cell = by[spec]
        assert cell["status"] == "ok" and max(cell["rel_err"].values()) < sw.TOL8["float16"], cell
        assert cell["gbs"] == [shape.kv_bytes() / 1e-3 / 1e9] * 2
    assert r["sdpa"]["gbs"] == [shape.sdpa_bytes() / 1e-3 / 1e9] * 2 and r["sdpa"]["rel_err"] < 4e-3
    assert r["shape"] == "B2 ctx1024 fp8" and by["planned"]["plan"] == "w4s3t s4"
    torch.manual_seed(0)
    pool = torch.randn(3, 16, 2, 64, dtype=torch.float16) * torch.tensor([1.0, 8.0])[None, None, :, None]
    b8, sc = sw.quant_e4m3(torch, pool)
    assert b8.dtype == torch.uint8 and sc.shape == (2,) and sc[1] > 4 * sc[0]  # per kv head
    back = sw.dequant_e4m3(torch, b8, sc, torch.float32)
    assert ((back - pool.float()).abs() <= pool.float().abs() / 16 + sc[None, None, :, None]).all()
