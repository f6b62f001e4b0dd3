"""tools/rule_usage.py (the rule-generality audit) counts each built-in rule's files and architectures from
coverage JSON, flags rules that fired on one architecture only and built-ins that never fired, honours
--columns, and turns bad input into a one-line error with exit 2."""

from __future__ import annotations

import json

import pytest
from tests.tool_modules import load_tool


@pytest.fixture(scope="module")
def ru():
    return load_tool("rule_usage", "rule_usage_tool")


def _row(file, arch, **cols):
    return {"file": file, "arch": arch, "columns": {c: {"rule_fires": f} for c, f in cols.items()}}


def _cov(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text(json.dumps({"header": {}, "summary": {}, "rows": rows}))
    return str(p)


ROWS = [_row("a__kv__trained.onnx", "a", **{"ort-O3": {"skip-layer-norm": 2, "gelu-tanh": 0}}),
        _row("a__dyn_mask__trained.onnx", "a", **{"trt-O4": {"skip-layer-norm": 1}}),
        _row("b__kv__trained.onnx", "b", **{"ort-O3": {"rms-norm": 3}, "trt-O4": {"skip-layer-norm": 1}})]


def test_counts_files_archs_single_and_never(ru, tmp_path):
    known = ru.builtin_rules()
    assert {"skip-layer-norm", "rms-norm", "gelu-tanh"} <= set(known)
    facts = ru.audit(ru.load_rows([_cov(tmp_path, "c.json", ROWS)]), known)
    assert facts["files"] == 3 and facts["archs"] == 2
    assert facts["rules"]["skip-layer-norm"]["files"] == 3 and facts["rules"]["skip-layer-norm"]["archs"] == ["a", "b"]
    assert "gelu-tanh" not in facts["rules"]  # zero fires do not count
    assert set(facts["single_arch"]) == {"rms-norm"} and facts["single_arch"]["rms-norm"]["archs"] == ["b"]
    assert "gelu-tanh" in facts["never_fired"] and facts["never_fired"]["gelu-tanh"].startswith("rules/")
    assert "skip-layer-norm" not in facts["never_fired"]


def test_columns_filter_and_later_file_wins(ru, tmp_path):
    known = ru.builtin_rules()
    first = _cov(tmp_path, "one.json", ROWS)
    facts = ru.audit(ru.load_rows([first]), known, ["trt-O4"])
    assert set(facts["rules"]) == {"skip-layer-norm"} and "rms-norm" in facts["never_fired"]
    # the same file in a later JSON replaces the earlier row
    second = _cov(tmp_path, "two.json", [_row("b__kv__trained.onnx", "b", **{"ort-O3": {"gelu-tanh": 1}})])
    facts = ru.audit(ru.load_rows([first, second]), known)
    assert "rms-norm" not in facts["rules"] and facts["rules"]["gelu-tanh"]["archs"] == ["b"]
    assert facts["rules"]["skip-layer-norm"]["archs"] == ["a"]


def test_cli_writes_markdown_and_json(ru, tmp_path, capsys):
    md, js = tmp_path / "usage.md", tmp_path / "usage.json"
    assert ru.main([_cov(tmp_path, "c.json", ROWS), "--markdown", str(md), "--json", str(js), "--note", "corpus at abc"]) == 0
    out = capsys.readouterr().out
    assert "3 files, 2 architectures" in out and "one architecture: rms-norm" in out
    text = md.read_text()
    assert "| `rms-norm` |" in text and "## Built-in rules that fired on none of these files" in text
    assert "\ncorpus at abc\n" in text
    assert json.loads(js.read_text())["single_arch"]["rms-norm"]["files"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "usage.json", "usage.md"]  # no temp left


@pytest.mark.parametrize("content,needle", [(None, "cannot read"), ("{not json", "is not JSON"),
                                            ('{"rows": 3}', "no 'rows' list"), ('{"rows": []}', "no coverage rows")])
def test_bad_input_is_one_line_and_exit_2(ru, tmp_path, capsys, content, needle):
    p = tmp_path / "bad.json"
    if content is not None:
        p.write_text(content)
    md = tmp_path / "out.md"
    assert ru.main([str(p), "--markdown", str(md)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err
    assert not md.exists()
