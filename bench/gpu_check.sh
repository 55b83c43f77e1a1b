#!/usr/bin/env bash
# The GPU check: one prepared script for a GPU machine that has Python 3.12 with CuPy, NumPy and SciPy
# and nothing else (no Ray, no FastAPI, no network).
#
#   bash bench/gpu_check.sh prepare    # here: record the stream, bundle the pure-Python packages it needs
#   bash bench/gpu_check.sh            # there, with bench/out/ carried over: every step, JSON lines
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SCALE=12 GPU_CHECK_EDGES=40000 bash bench/gpu_check.sh   # the CPU dry run
#
# The steps, each under its own time limit so that one failure leaves the others' figures:
#  1. bench/gpu.py: the ranking engine, CuPy against NumPy (from scratch and incremental), and at
#     scale: one sweep of a 500M-edge R-MAT graph against the device's memory bandwidth, from-scratch
#     solves, an incremental epoch at 0.1% change;
#  2. the compute tests marked ``gpu`` (every algorithm test on the cupy backend);
#  3. bench/replay.py: the compute stage itself (compute/stage.py: merge, both rankings, the
#     applications) replaying the recorded growing stream, CuPy beside NumPy on the machine's CPU,
#     every epoch's scores checked within the two stages' published bounds.
# Sized to end in about 7 minutes on an H200 (a second try fits the device time).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
BUNDLE=bench/out/gpuenv.tar.xz
RECORDING=bench/out/gpu.rec

if [ "${1:-}" = prepare ]; then
  # The packages the tests and the stage import beyond NumPy/SciPy, as wheels for the GPU machine's
  # Python (3.12, x86_64), packed small: what is carried to it is limited to 64 MiB with the recording.
  set -e
  mkdir -p bench/out
  tmp=$(mktemp -d)
  "$PY" -m pip install --quiet --target "$tmp" --python-version "${GPU_PYTHON:-3.12}" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --only-binary=:all: msgspec orjson pydantic pydantic-settings pytest pytest-timeout hypothesis networkx
  tar cJf "$BUNDLE" --exclude=__pycache__ --exclude='networkx/*/tests' -C "$tmp" .
  rm -rf "$tmp"
  # 4M events of the growing stream (~4.9M live edges, 80 epochs of 50k): ~51 MB, the most that fits.
  [ -f "$RECORDING" ] || "$PY" -m bench.replay record --events "${GPU_CHECK_EVENTS:-4000000}" --per-epoch 50000 --out "$RECORDING"
  du -ch "$BUNDLE" "$RECORDING" | tail -1
  exit 0
fi

DEVICE="${GPU_CHECK_DEVICE:-cuda}"
OUT="${OUT:-bench/out/gpu-check}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.jsonl"
: > "$LOG"
if [ -f "$BUNDLE" ]; then
  site=$(mktemp -d)
  tar xJf "$BUNDLE" -C "$site"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

step() {  # step NAME SECONDS COMMAND...: its output to the log; a failure or a timeout is a line too
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "{\"step\": \"$name-exit\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}" | tee -a "$LOG"
}

step machine 20 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; nproc; python3 --version'
step ranking 240 "$PY" -m bench.gpu --device "$DEVICE" --scale "${GPU_CHECK_SCALE:-25}" --edges "${GPU_CHECK_EDGES:-500000000}" \
  --peak-tbs "${GPU_CHECK_PEAK_TBS:-4.8}"
if [ "$DEVICE" = cuda ]; then
  step tests 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/compute
else  # the dry run: the same files on NumPy, to prove the bundle imports
  step tests 120 "$PY" -m pytest -q -p no:cacheprovider tests/compute/test_incremental.py tests/compute/test_tunkrank.py
fi
if [ -f "$RECORDING" ]; then
  step replay "${GPU_CHECK_REPLAY_S:-240}" "$PY" -m bench.replay replay "$RECORDING" --device "$DEVICE" --against cpu \
    --warm "${GPU_CHECK_WARM:-70}" --epochs "${GPU_CHECK_EPOCHS:-10}" --topics-budget 0.2 --json
fi
echo "{\"step\": \"done\", \"log\": \"$LOG\"}"
