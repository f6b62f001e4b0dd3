"""The export corpus (tests/data/corpus, made by tools/export_corpus.py) matches its manifest.

Every listed file exists with the recorded sha256 and size, loads with onnx and passes the checker;
no unlisted file lies there; every planned export is either present or recorded as failed with a
reason; the corpus stays under its size cap; trained-like files carry no constant weight vectors
(a norm scale of all ones would let cleanup delete the norm); two files run in ONNX Runtime on
inputs built from the manifest alone.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/data/corpus"
MANIFEST = CORPUS / "manifest.json"
# weights tag: trained | default, suffixed 16 for exports from the float16 model (--dtype float16)
NAME = re.compile(r"^(?P<arch>[a-z0-9_]+?)__(?P<style>[a-z_]+)__(?P<weights>(?:trained|default)(?:16)?)\.onnx$")

pytestmark = pytest.mark.skipif(not MANIFEST.exists(), reason="corpus not exported")


def _manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def _exporter():
    sys.path.insert(0, str(ROOT / "tools"))
    import export_corpus

    return export_corpus


def test_files_match_manifest():
    files = _manifest()["files"]
    on_disk = {p.name for p in CORPUS.glob("*.onnx")}
    assert on_disk == set(files), f"unlisted: {sorted(on_disk - set(files))}, missing: {sorted(set(files) - on_disk)}"
    for name, entry in files.items():
        data = (CORPUS / name).read_bytes()
        assert entry["file"] == name
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert len(data) == entry["bytes"], name
        m = NAME.match(name)
        assert m, name
        assert (m["arch"], m["style"], m["weights"]) == (entry["arch"], entry["style"], entry["weights"])
        assert entry["ort_check"]["ran"] is True, name


@pytest.mark.parametrize("name", sorted(_manifest()["files"]) if MANIFEST.exists() else [])
def test_file_loads_and_checks(name):
    entry = _manifest()["files"][name]
    proto = onnx.load(str(CORPUS / name))
    onnx.checker.check_model(proto)
    assert [i.name for i in proto.graph.input] == [i["name"] for i in entry["inputs"]]
    assert [o.name for o in proto.graph.output] == [o["name"] for o in entry["outputs"]]
    outs = [o.name for o in proto.graph.output]
    assert outs[0] in ("logits", "last_hidden_state")
    if entry["kind"] == "decoder" and entry["style"] in ("kv", "optimum"):
        assert sum(o.startswith("present.") for o in outs) == 2 * entry["num_layers"]
    if entry["weights"].startswith("trained"):
        # a non-parametric LayerNorm (OLMo) has no weights: the exporter's constant scale/bias are
        # the model's own, not an untrained parameter
        own = {i for n in proto.graph.node if n.op_type == "LayerNormalization" for i in n.input[1:]} \
            if "layernorm-nonparametric" in entry["features"] else set()
        for init in proto.graph.initializer:
            if init.name in own:
                continue
            arr = numpy_helper.to_array(init)
            if arr.dtype.kind == "f" and arr.ndim == 1 and arr.size >= 16:
                assert not np.all(arr == arr.flat[0]), f"{name}: {init.name} is constant ({arr.flat[0]})"


def test_every_planned_export_is_present_or_explained():
    ex = _exporter()
    man = _manifest()
    for arch, style, weights in ex.plan(list(ex.SPECS), None, ["trained", "default"]):
        name = f"{arch}__{style}__{weights}"
        assert name + ".onnx" in man["files"] or man["failed"].get(name), name


def test_corpus_breadth_and_size():
    files = _manifest()["files"].values()
    archs = {e["arch"] for e in files}
    assert len(archs) >= 24, sorted(archs)
    styles = {a: {e["style"] for e in files if e["arch"] == a} for a in archs}
    # an exporter that fails on an architecture is recorded, not hidden (T5 fails under dynamo);
    # the hold-out samples (tools/holdout_specs.py) are single files by design
    holdout = set(_exporter().HOLDOUT)
    assert all(len(s) >= 2 for a, s in styles.items() if a not in holdout), styles
    assert sum(len(s) >= 4 for s in styles.values()) >= 24, styles
    total = sum(e["bytes"] for e in files)
    assert total <= 40 * 2**20, f"corpus is {total / 2**20:.1f} MiB (cap 40 MiB)"
    assert {"dyn_mask", "static_nomask", "kv", "optimum"} <= {e["style"] for e in files}
    assert {"trained", "default"} <= {e["weights"] for e in files}


@pytest.mark.parametrize("style", ["kv", "optimum"])
def test_runs_in_ort_from_manifest(style):
    ort = pytest.importorskip("onnxruntime")
    ex = _exporter()
    files = _manifest()["files"]
    name = next(n for n, e in sorted(files.items()) if e["style"] == style and e["kind"] == "decoder")
    entry = files[name]
    sess = ort.InferenceSession(str(CORPUS / name), providers=["CPUExecutionProvider"])
    outs = sess.run(None, ex.feeds_from_manifest(entry, entry["vocab_size"]))
    assert [list(o.shape) for o in outs] == entry["ort_check"]["output_shapes"]
    assert all(np.isfinite(o).all() for o in outs)


def test_dim_values():
    ex = _exporter()
    assert ex.dim_value("past_sequence_length + sequence_length") == ex.PAST + ex.SEQ
    assert ex.dim_value(16) == 16
    assert ex.dim_value("2*batch") == 2 * ex.BATCH   # BLOOM 4.38's folded cache [2*batch, D, P]
    with pytest.raises(KeyError):
        ex.dim_value("unknown_dim")
    with pytest.raises(KeyError):
        ex.dim_value("2*unknown_dim")
