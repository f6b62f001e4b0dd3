#!/usr/bin/env bash
# One device call: make onnx_fuse importable, check the kernel library loads (rebuild there if
# not), run the GPU tests, then the kernel benchmark. Logs go to $OUT (or ./out).
#   usage: bash tools/gpu_session.sh [tests|bench|all|prefix|pad|ws256|split] [extra bench args]
#   bench/all: one tools/bench_kernels.py process per family (prefill, prefix, decode, window), logs
#   bench_<family>.log, then tools/bench_paged_plugin.py (bench_plugin.log)
#   prefix: only the paged-prefill GPU tests and the `--only prefix` benchmark rows (a short call)
#   pad: the padded D = 80 / 96 prefill bodies (ovedqp / ovedfcp, planned since run 48a): their GPU tests, then
#   their rows beside FA2 and cuDNN (PAD_SHAPES overrides the shapes; a short call)
#   ws256: the D = 256 warp-specialized bodies (h256wsg planned since run 50a, h256w in run 49a; the candidates h256,
#   h256s, h256ws and,
#   from session 42, h256wsn (no consumer turns), h256wm / h256wmn (K/V multicast in two-CTA clusters), h256wsg
#   (longest-first causal groups)): their
#   GPU tests, then their rows beside m128n64w8 (planned until then), FA2 and cuDNN (WS256_SHAPES overrides the
#   shapes; a short call)
#   split: session 43's split K / V candidates (ldes / ldesg at D = 64, ovedqs / ovedqsg / ovedfcs at D = 128, h256sg
#   at D = 256; tests/plugins/test_fa_split_gpu.py), then their rows beside the planned bodies (lde, ovedq / ovedfc,
#   h256wsg), h256s, FA2 and cuDNN (SPLIT_SHAPES overrides the shapes; a short call, < 400 s)
#   sweep [h200|splits|wave ...] [-- tool args]: tools/sweep_decode_plans.py once per set (default by the GPU's
#   name: h200 on an H200, wave then splits on an H100), logs sweep_<set>.log and sweep_<set>.json
#   all: tests then bench in one device call (<= 600 s): every stage's timeout is also capped by what is left of
#   ALL_BUDGET_S (default 575 s from the start of the script), a stage with under 10 s left is skipped; each
#   stage's seconds go to stdout and $OUT/stages.txt, with "CUT" / "SKIPPED" naming a stage the budget stopped
set -o pipefail
MODE=${1:-all}; shift || true
SWEEP_SETS=""
if [ "$MODE" = sweep ]; then
  while [ $# -gt 0 ] && [ "$1" != -- ]; do SWEEP_SETS="$SWEEP_SETS $1"; shift; done
  [ "${1:-}" = -- ] && shift
fi
OUT=${OUT:-out}; mkdir -p "$OUT"
ALL_BUDGET_S=${ALL_BUDGET_S:-575}
GPU_PYTEST_ARGS=${GPU_PYTEST_ARGS:-}  # tests / all: extra pytest arguments (e.g. --durations=20)
: > "$OUT/stages.txt"
# stage NAME LIMIT_S CMD...: run CMD under `timeout`; in mode all the limit is also capped by the budget left
stage() {
  local name=$1 limit=$2 t=$SECONDS rc
  shift 2
  if [ "$MODE" = all ]; then
    local left=$((ALL_BUDGET_S - SECONDS))
    if [ "$left" -lt 10 ]; then
      echo "stage $name: SKIPPED ($left s of the ${ALL_BUDGET_S} s budget left)" | tee -a "$OUT/stages.txt"
      return 124
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  timeout -k 10 "$limit" "$@"
  rc=$?
  local msg="stage $name: $((SECONDS - t)) s (limit $limit s, exit $rc)"
  [ "$rc" = 124 ] && msg="$msg CUT by its time limit"
  echo "$msg" | tee -a "$OUT/stages.txt"
  return $rc
}
export PYTHONUNBUFFERED=1
ROOT=$(pwd)
# import name onnx_fuse -> optimizer/, onnx_fuse.plugins -> plugins/ (no install needed)
PKG=/tmp/of_pkg/onnx_fuse; rm -rf /tmp/of_pkg; mkdir -p "$PKG"
for f in "$ROOT"/optimizer/*; do ln -s "$f" "$PKG/$(basename "$f")"; done
ln -s "$ROOT/plugins" "$PKG/plugins"; ln -s "$ROOT/rules" "$PKG/rules"
export PYTHONPATH=/tmp/of_pkg${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "from onnx_fuse.plugins.kernel_lib import KernelLib; KernelLib.load()" 2>&1 \
  || { echo "rebuilding kernel library here"; python3 -m onnx_fuse.plugins.build_kernels --what lib --arch 90a 2>&1 | tee "$OUT/build.log"; }
GPU_TESTS="tests/plugins/test_kernels_gpu.py tests/plugins/test_paged_chunked_gpu.py"
TMA_K="fused_attention_tma or paged_decode_tma or paged_decode_fp8_tma"
if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  t0=$SECONDS
  # the AOT twins (tests/plugins/test_fa_aot_gpu.py) in their own process beside the others: its first case waits
  # ~60 s on the CPU for the whole AOT PTX module to load (the --durations of session 44's baseline run, notes run48: 60.8 s in its first case), which
  # overlaps the TMA process's GPU cases instead of adding to the tests' time
  ( stage tests_aot 300 python3 -m pytest -m gpu tests/plugins/test_fa_aot_gpu.py -q --maxfail=20 -p no:cacheprovider \
      $GPU_PYTEST_ARGS > "$OUT/pytest_aot.log" 2>&1 ) &
  AOT_PID=$!
  # TMA cases first, in their own process: a faulting bulk tensor copy leaves a sticky CUDA error
  # that would fail every later test of the same process
  stage tests_tma 320 python3 -m pytest -m gpu tests/plugins/test_kernels_gpu.py -q --maxfail=20 -p no:cacheprovider $GPU_PYTEST_ARGS -k "$TMA_K" 2>&1 | tee "$OUT/pytest_tma.log" | tail -25
  stage tests_rest 300 python3 -m pytest -m gpu $GPU_TESTS -q --maxfail=40 -p no:cacheprovider $GPU_PYTEST_ARGS -k "not ($TMA_K)" 2>&1 | tee "$OUT/pytest.log" | tail -40
  # the paged kernels' sliding-window cases (~420, TMA among them): their own process and log
  stage tests_window 150 python3 -m pytest -m gpu tests/plugins/test_paged_window_gpu.py -q --maxfail=20 -p no:cacheprovider $GPU_PYTEST_ARGS 2>&1 | tee "$OUT/pytest_window.log" | tail -25
  # attention sinks in every paged kernel path (~220 cases): their own process and log
  stage tests_sinks 200 python3 -m pytest -m gpu tests/plugins/test_paged_sinks_gpu.py -q --maxfail=20 -p no:cacheprovider $GPU_PYTEST_ARGS 2>&1 | tee "$OUT/pytest_sinks.log" | tail -25
  wait "$AOT_PID"; tail -8 "$OUT/pytest_aot.log"
  echo "GPU tests: $((SECONDS - t0)) s"
fi
if [ "$MODE" = prefix ]; then
  timeout 200 python3 -m pytest -m gpu tests/plugins/test_kernels_gpu.py -q -k "paged_prefill or 128x128x12" -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -30
  timeout 200 python3 tools/bench_kernels.py --only prefix --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log"
fi
if [ "$MODE" = pad ]; then
  t0=$SECONDS
  timeout 200 python3 -m pytest -m gpu tests/plugins/test_fa_pad_gpu.py -q --maxfail=30 -p no:cacheprovider 2>&1 | tee "$OUT/pytest_pad.log" | tail -30
  echo "pad tests: $((SECONDS - t0)) s"
  PAD_SHAPES=${PAD_SHAPES:-"4x4096x32x32x80 4x4096x32x32x80c 4x4096x32x32x96 4x4096x32x32x96c 8x2048x32x8x80 8x2048x32x8x96c"}
  timeout 240 python3 tools/bench_kernels.py --no-build --only prefill --variants ovedqp ovedfcp --passes 3 --flush zero \
    --prefill-shapes $PAD_SHAPES "$@" 2>&1 | tee "$OUT/bench_pad.log"
  echo "pad: $((SECONDS - t0)) s"
fi
if [ "$MODE" = ws256 ]; then
  t0=$SECONDS
  # with the pad tests and the D = 128 moving-max case, which share the helpers these tests added
  timeout 300 python3 -m pytest -m gpu tests/plugins/test_fa_ws256_gpu.py tests/plugins/test_fa_pad_gpu.py \
    tests/plugins/test_kernels_gpu.py::test_fused_attention_tma_ov_moving_max -q --maxfail=30 -p no:cacheprovider 2>&1 \
    | tee "$OUT/pytest_ws256.log" | tail -30
  echo "ws256 tests: $((SECONDS - t0)) s"
  WS256_SHAPES=${WS256_SHAPES:-"4x4096x16x16x256 4x4096x16x16x256c 8x2048x16x4x256 8x2048x16x4x256c"}
  timeout 300 python3 tools/bench_kernels.py --no-build --only prefill --variants h256 h256w h256s h256ws h256wsn h256wm h256wmn h256wsg m128n64w8 \
    --passes 3 --flush zero \
    --prefill-shapes $WS256_SHAPES "$@" 2>&1 | tee "$OUT/bench_ws256.log"
  echo "ws256: $((SECONDS - t0)) s"
fi
if [ "$MODE" = split ]; then
  t0=$SECONDS
  timeout 170 python3 -m pytest -m gpu tests/plugins/test_fa_split_gpu.py -q --maxfail=30 -p no:cacheprovider 2>&1 \
    | tee "$OUT/pytest_split.log" | tail -30
  echo "split tests: $((SECONDS - t0)) s"
  SPLIT_SHAPES=${SPLIT_SHAPES:-"4x4096x32x32x128 4x4096x32x32x128c 8x2048x32x8x128 8x2048x32x8x128c 4x4096x32x32x64 \
4x4096x32x32x64c 8x2048x32x32x64 8x2048x32x32x64c 4x4096x16x16x256c 8x2048x16x4x256c"}
  timeout 220 python3 tools/bench_kernels.py --no-build --only prefill \
    --variants ldes ldesg ovedqs ovedqsg ovedfcs h256sg lde ovedq ovedfc h256s h256wsg --passes 3 --flush zero \
    --prefill-shapes $SPLIT_SHAPES "$@" 2>&1 | tee "$OUT/bench_split.log"
  echo "split: $((SECONDS - t0)) s"
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  t0=$SECONDS
  # one process per family: a fault in one family's candidates cannot take the others' rows with it.
  # Prefill families under do_bench's zeroing flush, decode under the read flush (docs/PERF.md run 31e: the flush
  # moves prefill 8-15 % for reasons its bytes do not explain, so prefill keeps the harness its targets were set in)
  stage bench_prefill 240 python3 tools/bench_kernels.py --only prefill --flush zero "$@" > "$OUT/bench_prefill.log" 2>&1; tail -3 "$OUT/bench_prefill.log"
  stage bench_prefix 90 python3 tools/bench_kernels.py --only prefix --flush zero "$@" > "$OUT/bench_prefix.log" 2>&1; tail -3 "$OUT/bench_prefix.log"
  stage bench_decode 200 python3 tools/bench_kernels.py --only decode "$@" > "$OUT/bench_decode.log" 2>&1; tail -3 "$OUT/bench_decode.log"
  stage bench_window 120 python3 tools/bench_kernels.py --only window "$@" > "$OUT/bench_window.log" 2>&1; tail -3 "$OUT/bench_window.log"
  stage bench_plugin 60 python3 tools/bench_paged_plugin.py > "$OUT/bench_plugin.log" 2>&1; tail -12 "$OUT/bench_plugin.log"
  echo "benchmark: $((SECONDS - t0)) s"
fi
if [ "$MODE" = sweep ]; then
  t0=$SECONDS
  if [ -z "$SWEEP_SETS" ]; then
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    case "$GPU_NAME" in
      *H200*) SWEEP_SETS=h200 ;;
      *H100*) SWEEP_SETS="wave splits" ;;
      *) SWEEP_SETS=h200; echo "GPU '$GPU_NAME' is neither an H200 nor an H100: the h200 set" ;;
    esac
  fi
  for s in $SWEEP_SETS; do
    echo "== sweep set $s"
    timeout 200 python3 tools/sweep_decode_plans.py --set "$s" --json "$OUT/sweep_$s.json" "$@" > "$OUT/sweep_$s.log" 2>&1
    echo "exit $?"
    if grep -q '^| B, ctx' "$OUT/sweep_$s.log"; then grep '^device:' "$OUT/sweep_$s.log"; sed -n '/^| B, ctx/,$p' "$OUT/sweep_$s.log"
    else tail -20 "$OUT/sweep_$s.log"; fi
  done
  echo "sweep: $((SECONDS - t0)) s"
fi
