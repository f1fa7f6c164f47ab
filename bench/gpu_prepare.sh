#!/usr/bin/env bash
# Build-machine half of the GPU check (no GPU needed): builds tilefuse if
# needed, then compiles the CUDA test corpus, the benchmark kernels and the
# training workloads to artifacts for sm_90 with their expected outputs,
# into one folder (default bench/gpu_artifacts, git-ignored, < 50 MB).
#
#   bench/gpu_prepare.sh [OUT] [--no-gpt2-small]
#
# Then, on the GPU machine: bench/gpu_check.sh [OUT]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/bench/gpu_artifacts}
shift || true
BUILD=${TILEFUSE_BUILD:-$ROOT/build}
if [ ! -f "$BUILD/python/tilefuse/__init__.py" ]; then
  "$ROOT/tools/dev.sh" setup
fi
rm -rf "$OUT"
mkdir -p "$OUT"
PYTHONPATH="$BUILD/python" python3 "$ROOT/bench/gpu/prepare.py" "$OUT" --arch "${TILEFUSE_GPU_ARCH:-sm_90}" "$@"
du -sh "$OUT"
