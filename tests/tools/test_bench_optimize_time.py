"""tools/bench_optimize_time.py: each candidate runs in its own process and the table reports what it fused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tool_modules import load_tool

MODEL = Path(__file__).resolve().parents[1] / "data" / "models" / "llama_sdpa_dynamo.onnx"


@pytest.fixture(scope="module")
def bench():
    return load_tool("bench_optimize_time", "bench_optimize_time_under_test")


def test_one_round_reports_time_and_fusions(bench, tmp_path, capsys):
    assert bench.main(["--model", str(MODEL), "--rounds", "1", "--only", "fuse-ort", "fuse-trt",
                       "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines()
            if line.startswith("| fuse-")}
    assert set(rows) == {"fuse-ort", "fuse-trt"}
    for cells in rows.values():
        wall, cpu, ratio, rss, nodes, attention, norm = (c.strip() for c in cells)
        assert float(wall) > 0 and float(cpu) > 0 and int(rss) > 0
        assert int(attention) == 2 and int(norm) >= 1  # the 2-layer export's attention, fused
    assert rows["fuse-ort"][2].strip() == "1.00x"
    # the second table splits onnx-fuse's CPU: rule set load, optimize (its passes named), save
    phases = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
              for line in out.splitlines() if line.startswith(("| ort |", "| trt |"))}
    assert set(phases) == {"ort", "trt"}
    for rules, optimize, save, top in phases.values():
        assert float(rules) > 0 and float(optimize) > 0 and float(save) >= 0
        named = [part.rsplit(" ", 1) for part in top.split(", ")]
        assert len(named) == 5 and all(float(sec) >= 0 for _, sec in named)
        assert "rewrite" in dict(named) or "shape-inference" in dict(named)
    assert (tmp_path / "fuse-ort.onnx").exists() and (tmp_path / "fuse-trt.onnx").exists()


def test_a_failing_candidate_is_a_row_not_a_crash(bench, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(Exception):
        bench.count_ops(bad)  # the parent cannot even count its nodes
    row = bench.run_one("fuse-ort", bad, tmp_path)
    assert set(row) == {"error"} and row["error"]
