#!/usr/bin/env bash
# tilefuse's one entry point for a fresh Debian 12 machine:
#   tools/dev.sh demo    set up, build, install, then run the demo
#   tools/dev.sh test    set up, build, install, then run every test (ctest:
#                        lit + GoogleTest + pytest)
#   tools/dev.sh setup   only install what is missing, configure, build, install
#   tools/dev.sh sanitize  set up, then build everything with AddressSanitizer +
#                        UBSan in <build>-sanitize (TILEFUSE_SANITIZE_DIR) and run
#                        every test under it; slow (an hour on 2 cores), not in CI
# Environment: TILEFUSE_BUILD_DIR (default <repo>/build), TILEFUSE_PREFIX
# (default /usr/local), TILEFUSE_JOBS (default: number of cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TILEFUSE_BUILD_DIR:-$ROOT/build}"
PREFIX="${TILEFUSE_PREFIX:-/usr/local}"
JOBS="${TILEFUSE_JOBS:-$(nproc)}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

log() { printf '\n== %s\n' "$*"; }

install_debian_packages() {
  local wanted=(cmake ninja-build ccache g++ git pkg-config
                llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
                libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libdnnl-dev
                python3 python3-dev python3-pip)
  local missing=()
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # A python3 outside Debian's (pyenv, conda) brings its own pip and headers.
  if [ "$(command -v python3 || true)" != "/usr/bin/python3" ] && command -v python3 >/dev/null; then
    local filtered=()
    for p in "${missing[@]}"; do
      case "$p" in python3|python3-dev|python3-pip) ;; *) filtered+=("$p") ;; esac
    done
    missing=("${filtered[@]}")
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

install_python_packages() {
  local missing=()
  python3 -c "import numpy" 2>/dev/null || missing+=(numpy)
  python3 -c "import pybind11" 2>/dev/null || missing+=(pybind11)
  python3 -c "import pytest" 2>/dev/null || missing+=(pytest)
  python3 -c "import lit" 2>/dev/null || missing+=(lit)
  # The independent reference that gradient tests compare against.
  python3 -c "import jax" 2>/dev/null || missing+=(jax)
  # The reference that mixed-precision and PyTorch-import tests compare
  # against (CPU use).
  python3 -c "import torch" 2>/dev/null || missing+=(torch)
  # Draws memory plans (MemoryPlan.save_png).
  python3 -c "import matplotlib" 2>/dev/null || missing+=(matplotlib)
  # The models users bring (HF transformers, built from configs) and what
  # PyTorch's OpInfo database needs: the PyTorch-import tests run both.
  python3 -c "import transformers" 2>/dev/null || missing+=(transformers)
  python3 -c "import expecttest" 2>/dev/null || missing+=(expecttest)
  python3 -c "import hypothesis" 2>/dev/null || missing+=(hypothesis)
  # Debian's own python3 is "externally managed"; tilefuse installs beside it.
  local flags=()
  python3 -m pip install --help | grep -q -- --break-system-packages && flags+=(--break-system-packages)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Python packages: ${missing[*]}"
    $SUDO python3 -m pip install -q "${flags[@]}" "${missing[@]}"
  fi
  # The vision models users bring (torchvision's ResNet-18, timm's
  # EfficientNet-B0): their model code only, without their dependency pins
  # (a torchvision wheel pins the torch it was built with; its models run on
  # the torch installed above).
  local vision=()
  python3 -c "import torchvision" 2>/dev/null || vision+=(torchvision)
  python3 -c "import timm" 2>/dev/null || vision+=(timm)
  if [ "${#vision[@]}" -gt 0 ]; then
    log "installing Python packages without their dependencies: ${vision[*]}"
    $SUDO python3 -m pip install -q --no-deps "${flags[@]}" "${vision[@]}"
  fi
}

build_and_install() {
  log "configuring in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$PREFIX" -DPython3_EXECUTABLE="$(command -v python3)"
  log "building with $JOBS jobs"
  cmake --build "$BUILD" -j "$JOBS"
  log "installing to $PREFIX and the python3 site-packages"
  $SUDO cmake --install "$BUILD" > /dev/null
}

setup() {
  install_debian_packages
  install_python_packages
  build_and_install
}

# A separate, uninstalled build: the instrumented tools and Python module are
# only ever run from their build folder.
sanitize() {
  install_debian_packages
  install_python_packages
  local dir="${TILEFUSE_SANITIZE_DIR:-$BUILD-sanitize}"
  log "configuring an AddressSanitizer + UBSan build in $dir"
  # -O1 -g1: readable sanitizer stacks at about half the build time of -O2 -g.
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" \
        -DTILEFUSE_SANITIZE=address,undefined -DPython3_EXECUTABLE="$(command -v python3)"
  log "building with $JOBS jobs"
  cmake --build "$dir" -j "$JOBS"
  log "tests under the sanitizers"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS"
}

case "${1:-}" in
  setup) setup ;;
  demo) setup; log "demo"; cd "$ROOT" && python3 tools/demo.py ;;
  test) setup; log "tests"; ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" ;;
  sanitize) sanitize ;;
  *) echo "usage: $0 demo|test|setup|sanitize" >&2; exit 2 ;;
esac
