#!/usr/bin/env bash
# GPU-machine half of the GPU check (needs the CUDA toolkit, CMake, a C++
# compiler, Python with numpy; pybind11 or torch's copy of it and torch for
# the benchmarks; no LLVM/MLIR):
#  1. builds the runtime alone (TILEFUSE_RUNTIME_ONLY) with the CUDA executor
#     and the runtime-only Python module;
#  2. runs every corpus artifact against its expected output (verify.py);
#  3. benchmarks kernels and training steps against torch eager and
#     torch.compile (bench.py);
# and prints one table last, also written to $RESULTS_DIR/gpu_check.md when
# RESULTS_DIR is set.
#
#   [RESULTS_DIR=dir] bench/gpu_check.sh [PREPARED]     (default bench/gpu_artifacts)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREP=${1:-$ROOT/bench/gpu_artifacts}
BUILD=${TILEFUSE_GPU_BUILD:-$ROOT/build-gpu}
RESULTS=${RESULTS_DIR:-$(mktemp -d)}
mkdir -p "$RESULTS"
[ -f "$PREP/manifest.json" ] || { echo "gpu_check: no $PREP/manifest.json; run bench/gpu_prepare.sh on a build machine first" >&2; exit 2; }

start=$(date +%s)
# Everything within TILEFUSE_GPU_CHECK_SECONDS (default 450 s: a lent GPU's
# call is limited), most important first: correctness, then benchmarks
# without torch.compile, then the torch.compile rows. A step out of time is
# cut short and the table still prints.
deadline=$(( start + ${TILEFUSE_GPU_CHECK_SECONDS:-450} ))
left() { local s=$(( deadline - $(date +%s) )); [ $s -gt 0 ] && echo $s || echo 1; }

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
timeout "$(left)" cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DTILEFUSE_RUNTIME_ONLY=ON \
  -DTILEFUSE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release ${TILEFUSE_GPU_CMAKE_ARGS:-} \
  > "$RESULTS/build.log" 2>&1 &&
  timeout "$(left)" cmake --build "$BUILD" -j "$(nproc)" >> "$RESULTS/build.log" 2>&1
build_rc=$?
build_s=$(( $(date +%s) - start ))
if [ $build_rc -ne 0 ] || [ ! -x "$BUILD/bin/tilefuse-run" ]; then
  tail -30 "$RESULTS/build.log"
  echo "gpu_check: the runtime-only build failed (log: $RESULTS/build.log)" >&2
  exit 1
fi
echo "[gpu_check] runtime-only build: ${build_s} s" >&2
export PYTHONPATH="$BUILD/python"
# cuBLAS is loaded at run time; the toolkit's lib64 may not be on the
# loader's path (the runtime also looks there itself).
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${CUDA_HOME:-/usr/local/cuda}/lib64"
# cuDNN (the convolutions) and NCCL: PyTorch's CUDA wheels bring them, in
# folders tilefuse-run would not search.
for lib in cudnn nccl; do
  dir=$(python3 -c "import nvidia.$lib, os; print(os.path.join(list(nvidia.$lib.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$dir" ] && [ -d "$dir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
done
# Without pybind11 (nor PyTorch's copy) the Python module is not built:
# artifacts are then checked through tilefuse-run, and nothing is benchmarked.
python_module=yes
ls "$BUILD"/python/tilefuse/_runtime*.so > /dev/null 2>&1 || python_module=no

first=$(ls "$PREP"/kernels/*.tfa 2>/dev/null | head -1)
if [ -n "$first" ]; then
  timeout "$(left)" "$BUILD/bin/tilefuse-run" "$first" --repeat=3 > "$RESULTS/tilefuse-run.txt" 2>&1
  run_rc=$?
else
  run_rc=0
fi
verify_args=()
[ "$python_module" = no ] && verify_args=(--tilefuse-run "$BUILD/bin/tilefuse-run")
timeout "$(left)" python3 "$ROOT/bench/gpu/verify.py" --prepared "$PREP" --results-dir "$RESULTS" \
  "${verify_args[@]}"
verify_rc=$?
bench_rc=0
compile_note="torch.compile rows: not run"
if [ "$python_module" = yes ]; then
  timeout "$(left)" python3 "$ROOT/bench/gpu/bench.py" --prepared "$PREP" --quick --no-compile \
    --results-dir "$RESULTS" > "$RESULTS/bench.out" 2>&1
  bench_rc=$?
  if [ "$(left)" -gt 60 ]; then
    mkdir -p "$RESULTS/with_compile"
    if timeout "$(left)" python3 "$ROOT/bench/gpu/bench.py" --prepared "$PREP" --quick \
         --results-dir "$RESULTS/with_compile" > "$RESULTS/bench_compile.out" 2>&1; then
      cp "$RESULTS/with_compile/gpu_results.md" "$RESULTS/gpu_results.md"
      compile_note="torch.compile rows: included"
    else
      compile_note="torch.compile rows: cut short (time limit or error; see bench_compile.out)"
    fi
  fi
fi
total_s=$(( $(date +%s) - start ))

{
  echo "## tilefuse GPU check"
  echo
  echo "runtime-only build ${build_s} s; whole check ${total_s} s; tilefuse-run rc ${run_rc}; verify rc ${verify_rc}; bench rc ${bench_rc}; Python module: ${python_module}; ${compile_note}"
  echo
  echo "### Corpus against the reference interpreter"
  echo
  cat "$RESULTS/verify.md" 2>/dev/null || echo "(verify.py wrote no table)"
  echo
  if [ "$python_module" = yes ]; then
    cat "$RESULTS/gpu_results.md" 2>/dev/null || { echo "(bench.py wrote no table)"; tail -20 "$RESULTS/bench.out"; }
  else
    echo "(no benchmarks: the Python module was not built; see build.log)"
  fi
} > "$RESULTS/gpu_check.md"
cat "$RESULTS/gpu_check.md"
[ $run_rc -eq 0 ] && [ $verify_rc -eq 0 ] && [ $bench_rc -eq 0 ]
