#!/usr/bin/env bash
# One device call: Nsight Compute reports of the planned prefill / decode kernels beside their
# torch anchors (tools/profile_kernels.py runs each once inside a profiler range). Text exports
# (details page per kernel, hot SASS lines of our kernels) land in $OUT/ncu/.
#   usage: bash tools/ncu_session.sh [case ...]   (default: every case)
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/ncu"
ROOT=$(pwd)
PKG=/tmp/of_pkg/onnx_fuse; rm -rf /tmp/of_pkg; mkdir -p "$PKG"
for f in "$ROOT"/optimizer/*; do ln -s "$f" "$PKG/$(basename "$f")"; done
ln -s "$ROOT/plugins" "$PKG/plugins"; ln -s "$ROOT/rules" "$PKG/rules"
export PYTHONPATH=/tmp/of_pkg${PYTHONPATH:+:$PYTHONPATH}
CASES=${*:-prefill prefill-causal cudnn cudnn-causal decode mqa sdpa-decode sdpa-mqa}
for c in $CASES; do
  rep="$OUT/ncu/$c"
  timeout 150 ncu --clock-control none --profile-from-start off --set full --import-source no \
    -f -o "$rep" python3 tools/profile_kernels.py "$c" > "$OUT/ncu/$c.run.log" 2>&1 \
    || { echo "ncu $c failed"; tail -5 "$OUT/ncu/$c.run.log"; continue; }
  ncu --import "$rep.ncu-rep" --page details > "$OUT/ncu/$c.details.txt" 2>&1
  case $c in prefill*|decode|mqa)
    ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/$c.sass.csv" 2>/dev/null \
      && gzip -f "$OUT/ncu/$c.sass.csv" || echo "no source page for $c";;
  esac
  rm -f "$rep.ncu-rep"
  echo "ncu $c: $(grep -c 'Section: GPU Speed Of Light' "$OUT/ncu/$c.details.txt") kernels"
done
# the device tool returns a limited number of files: one archive
(cd "$OUT" && tar czf ncu.tgz ncu && rm -rf ncu)
