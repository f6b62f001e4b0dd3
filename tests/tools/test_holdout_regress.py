"""tools/holdout_regress.py: each set's parts (float32, and the half plan's dtype), and `run` + `compare` end to end
on a real corpus file measured by tools/coverage.py: the same run compares equal (exit 0); a cell with an
attention op fewer, a node more or its verify lost is a regression (exit 1); one with a node fewer is leaner."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path

import pytest
from tests.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/data/corpus"
FILE = "falcon__kv__trained16.onnx"  # the corpus's smallest file (73 kB): 2 attention layers, fused at ort-O3


@pytest.fixture(scope="module")
def hr():
    return load_tool("holdout_regress", "holdout_regress_tool")


def test_parts_follow_the_half_plans(hr):
    assert hr.parts(49) == [("out", "float32"), ("half", "float16")]
    assert hr.parts(43) == [("out", "float32"), ("half", "bfloat16")]  # HALF31 is a bf16 plan
    assert hr.parts(38) == [("out", "float32")]  # set 38's half files are set 39's plan (HALF_FROM)


def test_unknown_set_is_an_error(hr):
    with pytest.raises(SystemExit, match="no hold-out set 9999"):
        hr.parts(9999)


@pytest.fixture(scope="module")
def measured(hr, tmp_path_factory):
    """ROOT/99/out holds one corpus file and its manifest entry; `run --label a` measures it at ort-O3."""
    root = tmp_path_factory.mktemp("hold")
    part = root / "99" / "out"
    part.mkdir(parents=True)
    shutil.copy(CORPUS / FILE, part / FILE)
    entry = json.loads((CORPUS / "manifest.json").read_text())["files"][FILE]
    (part / "manifest.json").write_text(json.dumps({"files": {FILE: entry}, "failed": {}}))
    assert hr.main(["run", "--label", "a", "--sets", "99", "--columns", "ort-O3", "--root", str(root)]) == 0
    data = json.loads((root / "results" / "a_99_out.json").read_text())
    res = data["rows"][0]["columns"]["ort-O3"]
    assert res["counts"]["attn"] == 2 and res["verify"]["passed"] is True, res
    return root, data


def _compare(hr, root, data, edit=None):
    new = copy.deepcopy(data)
    if edit:
        edit(new["rows"][0]["columns"]["ort-O3"])
    (root / "results" / "b_99_out.json").write_text(json.dumps(new))
    out = io.StringIO()
    code = hr.compare(root, "a", "b", out=out)
    return code, out.getvalue()


def test_same_run_is_equal(hr, measured):
    code, text = _compare(hr, *measured)
    assert code == 0 and "| 99 out | 1 | 1 | 1 | 0 | 0 | 0 |" in text, text


def _attention_op(res):
    return next(k for k in res["ops"] if "Attention" in k)


def test_fewer_fused_is_a_regression(hr, measured):
    def unfuse(res):
        res["ops"][_attention_op(res)] -= 1
        res["ops"]["MatMul"] = res["ops"].get("MatMul", 0) + 1  # same node total: the count alone must tell

    code, text = _compare(hr, *measured, unfuse)
    assert code == 1 and "REGRESSION" in text and "attn 2 -> 1" in text, text


def test_more_nodes_is_a_regression(hr, measured):
    code, text = _compare(hr, *measured, lambda res: res["ops"].update(Identity=res["ops"].get("Identity", 0) + 1))
    nodes = sum(measured[1]["rows"][0]["columns"]["ort-O3"]["ops"].values())
    assert code == 1 and f"nodes {nodes} -> {nodes + 1} (Identity +1)" in text, text


def test_verify_lost_is_a_regression(hr, measured):
    code, text = _compare(hr, *measured, lambda res: res["verify"].update(passed=False, reason="max diff 1"))
    assert code == 1 and "verify lost" in text, text


def test_crash_is_a_regression(hr, measured):
    def crash(res):
        res.clear()
        res["error"] = "boom"

    code, text = _compare(hr, *measured, crash)
    assert code == 1 and "crashed" in text, text


def test_fewer_nodes_is_leaner(hr, measured):
    def lean(res):
        op = next(k for k, v in res["ops"].items() if k not in ("Identity",) and "Attention" not in k and v)
        res["ops"][op] -= 1

    code, text = _compare(hr, *measured, lean)
    assert code == 0 and "LEANER" in text and "| 99 out | 1 | 1 | 0 | 1 | 0 | 0 |" in text, text


def test_same_total_other_histogram_is_other(hr, measured):
    def swap(res):
        op = next(k for k, v in res["ops"].items() if "Attention" not in k and v)
        res["ops"][op] -= 1
        res["ops"]["Squeeze"] = res["ops"].get("Squeeze", 0) + 1

    code, text = _compare(hr, *measured, swap)
    assert code == 0 and "| 99 out | 1 | 1 | 0 | 0 | 1 | 0 |" in text, text


def test_missing_old_label_is_an_error(hr, measured, capsys):
    assert hr.compare(measured[0], "nosuch", "a") == 2


def test_snapshot_maps_the_package(hr, tmp_path):
    import subprocess
    import sys

    dest = tmp_path / "snap"
    assert hr.main(["snapshot", "HEAD", str(dest)]) == 0
    code = "import onnx_fuse, onnx_fuse.rules, onnx_fuse.plugins; print(onnx_fuse.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(dest / "PKG"), "PATH": ""},
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith(str(dest / "PKG" / "onnx_fuse")), out
    assert (dest / "tools" / "coverage.py").exists()
    assert hr.main(["snapshot", "HEAD", str(dest)]) == 0  # an earlier snapshot is replaced


def test_snapshot_refuses_another_folder(hr, tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    assert hr.main(["snapshot", "HEAD", str(tmp_path)]) == 2
    assert (tmp_path / "keep.txt").exists()
