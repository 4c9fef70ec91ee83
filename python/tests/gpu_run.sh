#!/bin/bash
# gpu_run.sh - the Python package on a GPU machine, offline: build and install dcpack with the CUDA
# kernels and the NCCL backend against the torch already installed, then run dcpack.torch's and
# dcpack.megatron.DataPath's GPU tests (python/tests/test_torch_cuda.py) and the rest of the Python
# suite on that build.  Every log goes to OUT.
#
#   bash python/tests/gpu_run.sh [OUT (default $OUT or gpu-python-logs)] [PARTS]
#
# PARTS: any of build, torch, suite, megatron, comma-separated (default all four).  megatron runs
# test_megatron_gpu.py (dcpack.megatron.DataPath against Megatron-LM's own reference data path, bit
# for bit, and the timing of both on one batch, dcpack's with and without DataPath(plan_ahead=True),
# written to OUT/megatron_bench.json); it needs
# DCPACK_MEGATRON_DIR, a Megatron-LM checkout (or a folder holding the three files
# megatron_loader.DATA_PATH_FILES names), and is skipped with a note without it.
# Needs: an NVIDIA GPU, nvcc (CUDA 12 or 13), NCCL (torch's own libnccl is used when torch loads
# one), cmake >= 3.20, ninja, gcc, and in the Python that runs it (PYTHON, default python3) torch
# with CUDA, numpy, pytest and scikit-build-core.  Nothing is downloaded: pip runs with --no-index
# and --no-build-isolation.  The package goes into build-python-gpu/site (--target, so the
# machine's environment is left as it is; PYTHONPATH points the tests at it); its CMake build
# folder, build-python-gpu/cmake, is reused by a later run.  DCPACK_TEST_GPUS caps the GPUs the
# tests use (default: all, at most 4; test_megatron_gpu.py: at most 8).  DCPACK_MEGATRON_DIR, when
# set, adds the Megatron-LM comparisons of the schedulers (test_megatron.py) and of wrap_data_iterator
# (test_megatron_wrap.py, on the CPU) to the suite.
#
# Exit status 0 when the package built and every test ran and passed; with a GPU present, GPU
# tests that were all skipped count as a failure.  OUT/summary.txt says what happened.
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
O="${1:-${OUT:-gpu-python-logs}}"
parts=",${2:-build,torch,suite,megatron},"
mkdir -p "$O" && O="$(cd "$O" && pwd)"
W="$SRC/build-python-gpu"
mkdir -p "$W"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
SUMMARY="$O/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
failed=0
fail() { note "FAIL: $*"; failed=1; }

# NVLink SHARP (multicast) stays off: not every host lends it.  No index, no prompts.
export NCCL_NVLS_ENABLE=0 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export PYTHONDONTWRITEBYTECODE=1

# ---- the machine ----------------------------------------------------------
if ! command -v nvcc > /dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin /usr/local/cuda-12*/bin; do
    if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
  done
fi
have_gpu=0
nvidia-smi > /dev/null 2>&1 && have_gpu=1
{
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
  echo "== nvcc"; nvcc --version
  echo "== cmake"; cmake --version | head -1
  echo "== ninja"; ninja --version
  echo "== gcc"; gcc --version | head -1
  echo "== python: $PY"; "$PY" --version
  "$PY" -m pip --version
  "$PY" - <<'EOF'
import importlib
for name in ("torch", "numpy", "pytest", "scikit_build_core"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"), m.__file__)
    except Exception as e:  # noqa: BLE001
        print(name, "NOT IMPORTABLE:", e)
try:
    import torch
    print("torch.version.cuda", torch.version.cuda, "cuda available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count())
    print("torch nccl", torch.cuda.nccl.version())
except Exception as e:  # noqa: BLE001
    print("torch CUDA/NCCL:", e)
EOF
} > "$O/env.txt" 2>&1
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'), " \
     "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc'), python $("$PY" -c 'import sys; print(sys.version.split()[0])')"

# ---- NCCL: the libnccl torch loads, and an nccl.h ---------------------------
# The extension links libnccl.so.2 by its soname, so at run time it shares the one torch loaded.
# Build against that same file when there is one (the nvidia-nccl wheel ships no libnccl.so link,
# so CMake's find_library would not find it by itself).
read -r NCCL_LIB TORCH_NCCL < <("$PY" - <<'EOF' 2> /dev/null
import torch
try:
    version = ".".join(str(v) for v in torch.cuda.nccl.version())
except Exception:  # noqa: BLE001
    version = "-"
paths = set()
with open("/proc/self/maps") as f:
    for line in f:
        p = line.split()[-1]
        if "/libnccl.so" in p:
            paths.add(p)
print(sorted(paths)[0] if paths else "-", version)
EOF
)
NCCL_LIB="${NCCL_LIB:--}"
if [ "$NCCL_LIB" = "-" ]; then
  NCCL_LIB="$(find /usr /opt -name 'libnccl.so.2*' -type f 2>/dev/null | head -1)"
fi
NCCL_INC=""
if [ -n "$NCCL_LIB" ]; then
  for d in "$(dirname "$NCCL_LIB")/../include" "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include" \
           /usr/include /usr/local/include /usr/local/cuda/include; do
    if [ -f "$d/nccl.h" ]; then NCCL_INC="$(cd "$d" && pwd)"; break; fi
  done
  if [ -z "$NCCL_INC" ]; then
    h="$(find /usr /opt -name nccl.h 2>/dev/null | head -1)"
    [ -n "$h" ] && NCCL_INC="$(dirname "$h")"
  fi
fi
header_version="$(grep -h '^#define NCCL_\(MAJOR\|MINOR\|PATCH\)' "$NCCL_INC/nccl.h" 2>/dev/null | awk '{printf "%s.", $3}' | sed 's/\.$//')"
note "nccl: library ${NCCL_LIB:-none} (torch reports ${TORCH_NCCL:--}), header ${NCCL_INC:-none}/nccl.h (${header_version:-?})"
[ -n "$NCCL_LIB" ] && export DCPACK_NCCL_LIBRARY="$NCCL_LIB"

# CUDA architecture of the GPU (CMake's default in this project is 90)
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
arch="${arch:-90}"

# ---- build and install ------------------------------------------------------
SITE="$W/site"
if [[ $parts == *,build,* ]]; then
  cmd=("$PY" -m pip install -v --no-index --no-build-isolation --no-deps --upgrade --target "$SITE"
       --config-settings=build-dir="$W/cmake"
       --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="$arch")
  if [ -n "$NCCL_LIB" ] && [ -n "$NCCL_INC" ]; then
    cmd+=(--config-settings=cmake.define.NCCL_LIBRARY="$NCCL_LIB"
          --config-settings=cmake.define.NCCL_INCLUDE_DIR="$NCCL_INC")
  fi
  cmd+=("$SRC")
  echo "DCPACK_CUDA=1 ${cmd[*]}" > "$O/install.log"
  t0=$SECONDS
  rm -rf "$SITE"
  DCPACK_CUDA=1 timeout 420 "${cmd[@]}" >> "$O/install.log" 2>&1
  rc=$?
  note "build+install: exit $rc, $((SECONDS - t0)) s (log install.log)"
  [ $rc -eq 0 ] || fail "pip install of the package with DCPACK_CUDA=1"
  grep -h "dcpack: \(CUDA\|NCCL\|jemalloc\)" "$O/install.log" | sed 's/^ *//' | tee -a "$SUMMARY"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

# what was installed: the module's build, its libraries, one libnccl once torch is loaded
(
  cd "$W" || exit 1
  ls -l "$SITE"/dcpack/_core*.so && ldd "$SITE"/dcpack/_core*.so
  "$PY" - <<'EOF'
import dcpack
print("dcpack", dcpack.__version__, dcpack.__file__)
print("HAVE_CUDA", dcpack.HAVE_CUDA, "HAVE_NCCL", dcpack.HAVE_NCCL, "cuda_device_count", dcpack.cuda_device_count())
import torch  # noqa: E402
import dcpack.torch as dt  # noqa: E402
print("libnccl mapped:", dt.check_single_libnccl())
EOF
) > "$O/installed.txt" 2>&1
if grep -q "HAVE_CUDA True HAVE_NCCL True" "$O/installed.txt"; then
  note "installed: $(grep -h '^HAVE_CUDA' "$O/installed.txt"); $(grep -h '^libnccl mapped' "$O/installed.txt")"
else
  fail "the installed dcpack lacks CUDA or NCCL, or does not import (installed.txt)"
fi

# ---- tests --------------------------------------------------------------------
# pytest runs from the work folder, so `import dcpack` is the installed package, not the source tree
pytest_run() {  # name, time limit, pytest arguments...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  (cd "$W" && timeout "$limit" "$PY" -m pytest -v -rs -p no:cacheprovider --junitxml="$O/$name.xml" "$@") \
    > "$O/$name.log" 2>&1
  local rc=$?
  note "$name: exit $rc, $((SECONDS - t0)) s, $(tail -1 "$O/$name.log" | sed 's/=//g; s/^ *//')"
  # 5: nothing collected (a module skipped as a whole); whether that is a failure is decided below
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || fail "$name (log $name.log)"
}

if [[ $parts == *,torch,* ]]; then
  pytest_run test_torch_cuda 300 "$SRC/python/tests/test_torch_cuda.py"
  ran="$("$PY" - "$O/test_torch_cuda.xml" <<'EOF' 2>/dev/null
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
print(sum(int(s.get("tests", 0)) - int(s.get("skipped", 0)) for s in suites))
EOF
)"
  if [ $have_gpu -eq 1 ] && [ "${ran:-0}" = "0" ]; then
    fail "a GPU is present but every GPU test was skipped (test_torch_cuda.log says why)"
  fi
fi

if [[ $parts == *,suite,* ]]; then
  # the rest of the suite on the CUDA build (Megatron-LM comparison only with DCPACK_MEGATRON_DIR)
  pytest_run test_suite 240 "$SRC/python/tests" --ignore="$SRC/python/tests/test_torch_cuda.py" \
    --ignore="$SRC/python/tests/test_megatron_gpu.py"
fi

if [[ $parts == *,megatron,* ]]; then
  if [ -z "${DCPACK_MEGATRON_DIR:-}" ]; then
    note "megatron: skipped (DCPACK_MEGATRON_DIR is not set)"
  else
    DCPACK_BENCH_OUT="$O/megatron_bench.json" pytest_run test_megatron_gpu 420 \
      "$SRC/python/tests/test_megatron_gpu.py"
    ran="$("$PY" - "$O/test_megatron_gpu.xml" <<'EOF' 2>/dev/null
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
print(sum(int(s.get("tests", 0)) - int(s.get("skipped", 0)) for s in suites))
EOF
)"
    if [ $have_gpu -eq 1 ] && [ "${ran:-0}" = "0" ]; then
      fail "a GPU is present but every Megatron comparison was skipped (test_megatron_gpu.log says why)"
    fi
  fi
fi

note "result: $([ $failed -eq 0 ] && echo PASS || echo FAIL)"
exit $failed
