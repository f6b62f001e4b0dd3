"""Bad rules fail at load with `file:line: what is wrong`; YAML is read safely and within limits."""

from __future__ import annotations

import textwrap

import pytest

from onnx_fuse.errors import UserError
from onnx_fuse.rewrite import load_rule_set, load_text
from onnx_fuse.rewrite._loader import builtin_files, load_builtin
from rw_testing import RELU_RELU as GOOD


def errors_of(text: str) -> list[str]:
    rules, errors = load_text(textwrap.dedent(text), "f.yaml")
    return [str(e) for e in errors]


def with_lines(match: str = "a = Relu(x)\ny = Relu(a)", rewrite: str = "y = Relu(x)", extra: str = "") -> str:
    ind = lambda s: textwrap.indent(s, " " * 6)  # noqa: E731
    return ("rules:\n  - name: r-one\n    doc: d\n    targets: [ort]\n" + extra +
            f"    match: |\n{ind(match)}\n    rewrite: |\n{ind(rewrite)}\n")


def test_good_file_loads():
    rules, errors = load_text(GOOD, "f.yaml")
    assert not errors and [r.name for r in rules] == ["relu-relu"]
    assert rules[0].source.startswith("name: relu-relu")


@pytest.mark.parametrize("text,expected", [
    # line numbers: 1 rules, 2 name, 3 doc, 4 targets, 5 [extra...] match, ...
    (with_lines(match="a = Reluu(x)\ny = Relu(a)"), "f.yaml:6: unknown ONNX op 'Reluu'"),
    (with_lines(match="a = relu(x)\ny = Relu(a)"), "f.yaml:6: unknown ONNX op 'relu' (did you mean Relu?)"),
    (with_lines(rewrite="y = Relu(z)"), "f.yaml:9: rewrite uses 'z', which is not bound"),
    (with_lines(match="a = Relu(b)\nb = Relu(a)\ny = Add(a, b)", rewrite="y = Relu(a)"),
     "f.yaml:6: cycle in the pattern"),
    (with_lines(extra="    where:\n      check: ['x.__class__ : no']\n"), "f.yaml:6: attribute access"),
    (with_lines(extra="    where:\n      check: ['open(x) : no']\n"), "f.yaml:6: unknown function 'open'"),
    (with_lines(extra="    where:\n      check: ['rank(q) == 2']\n"), "f.yaml:6: check uses 'q'"),
    (with_lines(extra="    where:\n      q: {dtype: float}\n"), "f.yaml:6: constraint on 'q'"),
    (with_lines(extra="    where:\n      x: {dtype: floaty}\n"), "f.yaml:6: x: unknown dtype 'floaty'"),
    (with_lines(extra="    where:\n      x: {colour: red}\n"), "f.yaml:6: constraint on 'x': unknown key"),
    (with_lines(extra="    level: 9\n"), "f.yaml:5: `level` must be 1..4"),
    (with_lines(extra="    wibble: 1\n"), "f.yaml:5: unknown key `wibble`"),
    (with_lines(extra="    outputs: [y, q]\n"), "f.yaml:5: output 'q' is not produced"),
    (with_lines(match="a = Relu(x)\nb = Neg(x)\ny = Relu(a)"), "f.yaml:7: statement 'b = Neg(x)' is not an input"),
    (with_lines(match="a = Relu(x)\na = Neg(x)\ny = Relu(a)"), "f.yaml:7: 'a' is produced twice"),
    (with_lines(match="a = Relu(x, alpha=1.0)\ny = Relu(a)"), "f.yaml:6: Relu has no attribute 'alpha'"),
    (with_lines(match="a = Relu(x, x)\ny = Relu(a)"), "f.yaml:6: Relu takes at most 1 inputs"),
    (with_lines(match="a = Relu(x\ny = Relu(a)"), "f.yaml:6: "),
    (with_lines(rewrite="z = Relu(x)"), "f.yaml:9: the rewrite does not define pattern output 'y'"),
    (with_lines(rewrite="a = Relu(x)\ny = Relu(a)"), "f.yaml:9: 'a' is an intermediate"),
    (with_lines(rewrite="y = Relu(x, alpha=q)"), "f.yaml:9: attribute alpha uses 'q'"),
    (with_lines(match="y = Cast?(x)"), "f.yaml:6: the pattern's output (anchor) cannot come from an optional op"),
    (with_lines(match="a = Cast?(x) | Neg(x)\ny = Relu(a)"), "f.yaml:6: an optional op cannot be one of"),
    (GOOD.replace("[ort]", "[ort, tpu]"), "f.yaml:4: unknown target 'tpu'"),
    (GOOD.replace("relu-relu", "Relu_Relu"), "f.yaml:2: rule name 'Relu_Relu' must be kebab-case"),
    (GOOD.replace("    doc: Relu(Relu(x)) -> Relu(x)\n", ""), "f.yaml:2: rule 'relu-relu' needs a one-line `doc`"),
    (GOOD.replace("    targets: [ort]\n", ""), "f.yaml:2: rule is missing `targets`"),
    (GOOD + GOOD[7:], "f.yaml:10: rule 'relu-relu' is defined twice"),
    ("rules:\n  - name: a\n   bad indent: [\n", "f.yaml:"),
    ("rules: 3\n", "f.yaml:1: expected a list of rules"),
    ("other: []\n", "f.yaml:1: a rule file holds `rules: [...]`"),
    ("rules:\n  - !!python/object:os.system {}\n", "f.yaml:2: "),
])
def test_load_errors_have_file_line_and_reason(text, expected):
    errs = errors_of(text)
    assert errs, "expected a load error"
    assert errs[0].startswith(expected), errs


def test_each_bad_rule_is_reported_and_good_ones_survive():
    text = GOOD + textwrap.indent(with_lines(match="a = Reluu(x)\ny = Relu(a)").split("\n", 1)[1], "")
    rules, errors = load_text(text, "f.yaml")
    assert [r.name for r in rules] == ["relu-relu"] and len(errors) == 1


def test_scientific_notation_is_a_number():
    text = with_lines(extra="    where:\n      c: {scalar: 1e-3, rtol: 1e-4}\n",
                      match="y = Mul(x, c)", rewrite="y = Mul(c, x)")
    rules, errors = load_text(text, "f.yaml")
    assert not errors and rules[0].where["c"].rtol == 1e-4 and rules[0].where["c"].scalar == 1e-3


def test_billion_laughs_is_refused():
    lol = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lol.append(f"{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]")
    errs = errors_of("\n".join(lol) + "\nrules: [*i]\n")
    assert errs and ("YAML nodes" in errs[0] or "aliases nested" in errs[0])


def test_large_file_is_refused(tmp_path):
    from onnx_fuse.rewrite import load_file
    f = tmp_path / "big.yaml"
    f.write_text("# " + "x" * (1 << 20) + "\n" + GOOD)
    rules, errors = load_file(f)
    assert not rules and "larger than" in str(errors[0])


def test_load_rule_set_raises_user_error_with_location(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(with_lines(rewrite="y = Relu(z)"))
    with pytest.raises(UserError, match=r"mine\.yaml:9: rewrite uses 'z'"):
        load_rule_set(user_files=[f])
    with pytest.raises(UserError, match="no such rule file"):
        load_rule_set(user_files=[tmp_path / "missing.yaml"])
    with pytest.raises(UserError, match="unknown target"):
        load_rule_set(target="tpu")


def test_user_rule_overrides_builtin_by_name_and_disable(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(GOOD.replace("relu-relu", "gelu-erf").replace("[ort]", "[onnx]"))
    rs = load_rule_set(user_files=[f])
    assert rs.get("gelu-erf").file == str(f) and not rs.get("gelu-erf").builtin
    rs = load_rule_set(disable=["gelu-erf"])
    assert "gelu-erf" not in rs and "gelu-ort" in rs


def test_all_builtin_rule_files_load_cleanly():
    rules, errors = load_builtin()
    assert not errors, [str(e) for e in errors]
    assert {"gelu-erf", "gelu-ort", "gelu-onnx"} <= {r.name for r in rules}
    assert all(path.startswith("rules/") for path, _ in builtin_files())


def test_target_and_level_selection():
    rs = load_rule_set(target="ort", max_level=2)
    assert "gelu-ort" in rs and "gelu-onnx" not in rs
    assert all(r.level <= 2 and "ort" in r.targets for r in rs)
    assert len(load_rule_set(target="ort", max_level=1)) == sum(
        1 for r in load_rule_set(target="ort") if r.level <= 1)


def test_yaml_anchors_and_merge_keys_share_blocks_between_rules():
    text = """\
rules:
  - name: relu-relu
    doc: Relu(Relu(x)) -> Relu(x)
    targets: [ort]
    match: &chain |
      a = Relu(x)
      y = Relu(a)
    where: &shared
      x: {dtype: float}
      a: {escape: false}
    rewrite: |
      y = Relu(x)
  - name: relu-relu-f16
    doc: Relu(Relu(x)) -> Relu(x), float16
    targets: [ort]
    match: *chain
    where:
      <<: *shared
      x: {dtype: float16}
    rewrite: |
      y = Relu(x)
"""
    rules, errors = load_text(text, "f.yaml")
    assert not errors, [str(e) for e in errors]
    assert rules[1].where["x"].dtypes == ("float16",) and "a" in rules[1].where
