"""A write that fails part way (disk full, a file size limit, a read-only file system) is one
line and exit 2, like a folder that is not there: the environment's problem, not a bug (it used
to be "internal error: OSError ..."). The atomic write leaves neither the output nor a temp file."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from onnx_fuse.cli.main import main

from tests.test_bad_input import good_model


def _limited_cli(*args: str, limit: int, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI with files capped at ``limit`` bytes (RLIMIT_FSIZE): a bigger write fails with
    EFBIG, since Python ignores SIGXFSZ."""
    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "onnx_fuse.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120, preexec_fn=cap)


@pytest.mark.parametrize("external", ["no", "yes"])
def test_output_over_the_file_size_limit_is_one_line_and_leaves_nothing(tmp_path, external):
    src = tmp_path / "m.onnx"
    src.write_bytes(good_model().SerializeToString())   # 16 KiB of weights
    before = src.read_bytes()
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    proc = _limited_cli("optimize", str(src), "-o", str(out), "-O", "1", "-q",
                        "--external-data", external, limit=4096, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "cannot write the output model" in lines[0] and "too large" in lines[0].lower()
    assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(out.parent)) == []       # no output, no temp file or folder
    assert src.read_bytes() == before


def test_report_on_a_full_disk_is_one_line(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    src.write_bytes(good_model().SerializeToString())
    code = main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "-O", "1", "-q",
                 "--report", "/dev/full"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "error: /dev/full: cannot write the report (No space left on device)"


def test_run_save_outputs_checks_the_path_first_and_writes_atomically(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    src.write_bytes(good_model().SerializeToString())
    assert main(["run", str(src), "--shape", "N=2", "--save-outputs", str(tmp_path / "no" / "o.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["run", str(src), "--shape", "N=2", "--save-outputs", "/dev/full"]) == 2
    assert capsys.readouterr().err.strip() == ("error: /dev/full: cannot write the outputs "
                                               "(No space left on device)")
    # the name given, not np.savez's NAME.npz
    assert main(["run", str(src), "--shape", "N=2", "--save-outputs", str(tmp_path / "outs")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "outs"]
