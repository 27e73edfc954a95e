#!/usr/bin/env bash
# coop's GPU check: one command, one NVIDIA GPU, under 8 minutes. Run from the repository root:
#     bash benchmarks/device_check.sh
# It builds coop in place, collects the `cuda`-marked tests (also as if mpi4py had no MPI
# library), runs them file by file (one failing or uncollectable file never stops the others)
# with tests/test_cupy_*.py (tests/test_cupy_host_tier.py among them: the host tier's copies
# raced against reuse of their pieces), the probes of benchmarks/device_probes.py (reservation
# error, stream reuse while a kernel still writes, per-thread default streams, cost model,
# CUDA-event timing and its overhead, dropout recompute, embedding backward, the host link and
# a 256 MiB round trip through the host tier with its rates beside the cost model's; rerun those
# two alone with `device_probes.py --only host_link,host_tier`), benchmarks/bench_alloc.py
# (coop's pool vs CuPy's MemoryPool per allocate + free) and benchmarks/gpt_check.py
# (examples/train_gpt.py's GPT on CuPy, unlimited and at 0.5x, losses and final parameters
# compared bit for bit; without and with dropout; then a larger GPT, GPT_LARGE =
# layers,heads,d_model,block,batch (8,8,512,256,32), at 0.5x (0.6x if that runs out of
# memory), its wall time beside the unlimited run's). It ends with one summary table
# (benchmarks/device_summary.py). Without a GPU (a dry run) every GPU step reads "no device".
# Needs: python with numpy, Cython, setuptools, pytest, a C++17 compiler, and cupy for the GPU
# steps. Wheels for missing build/test packages can be given in $WHEELS (pip --no-index);
# tqdm and matplotlib are optional (stubbed if absent). Env: PYTHON, OUT (default
# bench-out/device), STEPS (40), BUDGET_S (420: the seconds all sections may take together).
# Every section runs under its own timeout and logs to $OUT/<section>.log.
# Exit status: 0 nothing failed (GPU steps may read "no device"), 1 a step failed, 2 misuse.
set -u
cd "$(dirname "$0")/.." || exit 2
[ -f coop/_core.pyx ] || { echo "device_check: run from a coop checkout"; exit 2; }
OUT=${OUT:-$PWD/bench-out/device}
STEPS=${STEPS:-40}
DEADLINE=$((SECONDS + ${BUDGET_S:-420}))
mkdir -p "$OUT"
rm -f "$OUT"/status.tsv "$OUT"/tests_*.log "$OUT"/probes.json "$OUT"/alloc.json "$OUT"/gpt_*.json
STATUS=$OUT/status.tsv
note() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$STATUS"; }
section() {  # section NAME SECONDS CMD...: run CMD under min(SECONDS, time left), log, note
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then echo "[$name] out of time"; note "$name" - - "out of time"; return 99; fi
  echo "---- $name (limit ${limit}s) $(date +%T)"
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-8}" "$OUT/$name.log"
  echo "[$name] exit $rc in $((SECONDS - start))s"
  note "$name" "$rc" "$((SECONDS - start))"
  return $rc
}
nodevice() { for name in "$@"; do note "$name" - - "no device"; done; }

PY=${PYTHON:-}
for c in python3 python; do
  [ -z "$PY" ] && command -v "$c" > /dev/null && "$c" -c "import cupy" 2> /dev/null && PY=$c
done
[ -n "$PY" ] || PY=python3    # no cupy: a dry run of the steps that need no GPU
GPU=0
"$PY" -c "import cupy, sys; sys.exit(0 if cupy.cuda.is_available() else 1)" 2> /dev/null && GPU=1
echo "python: $(command -v "$PY") ($("$PY" -V 2>&1)); GPU: $([ $GPU = 1 ] && echo yes || echo 'no device (dry run)')"
if [ $GPU = 1 ]; then
  "$PY" - << 'PYEOF'
import cupy
from cupy.cuda import runtime
p = runtime.getDeviceProperties(0)
print("cupy", cupy.__version__, "runtime", runtime.runtimeGetVersion(), "driver",
      runtime.driverGetVersion(), "devices", runtime.getDeviceCount())
print("device 0:", p["name"].decode(), "SMs", p["multiProcessorCount"],
      "memory GiB %.1f" % (p["totalGlobalMem"] / 2**30))
PYEOF
fi

# ---- build -------------------------------------------------------------------------------------
missing=()
for mod in Cython setuptools pytest numpy; do "$PY" -c "import $mod" 2> /dev/null || missing+=("$mod"); done
if [ ${#missing[@]} -gt 0 ] && [ -n "${WHEELS:-}" ]; then
  echo "installing ${missing[*]} from $WHEELS"
  PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip install -q --no-index --find-links "$WHEELS" \
    "${missing[@]}" >> "$OUT/pip.log" 2>&1 || echo "pip failed: see $OUT/pip.log"
elif [ ${#missing[@]} -gt 0 ]; then
  echo "missing ${missing[*]}: give their wheels in WHEELS=dir"
fi
BUILT=0
if command -v c++ > /dev/null || command -v g++ > /dev/null; then
  section build 300 "$PY" setup.py -q build_ext --inplace -j "$(nproc)" && BUILT=1
else
  echo "no C++ compiler"; note build 1 0 "no C++ compiler"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# tqdm and matplotlib only draw progress and plots: stub them when absent
STUBS=$OUT/stubs
mkdir -p "$STUBS/matplotlib"
"$PY" -c "import tqdm" 2> /dev/null || cat > "$STUBS/tqdm.py" << 'PYEOF'
class tqdm:
    """A progress bar that draws nothing (tqdm is not installed)."""
    def __init__(self, iterable=None, *args, **kwargs):
        self.iterable = iterable
    def __iter__(self):
        return iter(self.iterable)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def set_postfix(self, *args, **kwargs):
        pass
    def set_description(self, *args, **kwargs):
        pass
    def update(self, *args, **kwargs):
        pass
    def write(self, text, *args, **kwargs):
        print(text)
    def close(self):
        pass
PYEOF
"$PY" -c "import matplotlib" 2> /dev/null || {
  printf 'def use(*a, **k):\n    pass\n' > "$STUBS/matplotlib/__init__.py"
  printf 'def __getattr__(name):\n    raise ImportError("matplotlib is not installed")\n' > "$STUBS/matplotlib/pyplot.py"; }
export PYTHONPATH="$PYTHONPATH:$STUBS"
# an mpi4py whose MPI module cannot load its library (as mpi4py 4 without an MPI installed)
NOMPI=$OUT/nompi
mkdir -p "$NOMPI/mpi4py"
: > "$NOMPI/mpi4py/__init__.py"
echo 'raise RuntimeError("cannot load MPI library")' > "$NOMPI/mpi4py/MPI.py"

PYTEST=("$PY" -m pytest -q -rs -p no:cacheprovider --continue-on-collection-errors)
CUDA_FILES=$(grep -l "pytest.mark.cuda" tests/test_*.py)
TEST_FILES=$( (echo "$CUDA_FILES"; ls tests/test_cupy_*.py) | sort -u)
if [ $BUILT = 1 ]; then
  TAIL=3 section collect 90 "${PYTEST[@]}" --collect-only -m cuda tests/
  TAIL=3 PYTHONPATH="$NOMPI:$PYTHONPATH" section collect_nompi 90 "${PYTEST[@]}" --collect-only -m cuda tests/
else
  note collect 1 0 "not built"; note collect_nompi 1 0 "not built"
fi

# ---- tests, probes, allocation speed, GPT (one GPU) ---------------------------------------------
if [ $GPU = 1 ] && [ $BUILT = 1 ]; then
  start=$SECONDS
  for f in $TEST_FILES; do
    name=tests_$(basename "$f" .py)
    marker=(-m cuda); case "$f" in tests/test_cupy_*) marker=();; esac
    TAIL=1 section "$name" 90 "${PYTEST[@]}" "${marker[@]}" "$f"
  done
  note tests 0 "$((SECONDS - start))"
  TAIL=12 section probes 120 "$PY" benchmarks/device_probes.py --out "$OUT"
  TAIL=6 section bench_alloc 60 "$PY" benchmarks/bench_alloc.py --n 10000 --repeat 5 --out "$OUT"
  TAIL=3 section gpt 150 "$PY" benchmarks/gpt_check.py --backend cupy --steps "$STEPS" --out "$OUT"
  TAIL=3 section gpt_dropout 90 "$PY" benchmarks/gpt_check.py --backend cupy \
    --steps $((STEPS / 2)) --dropout 0.1 --out "$OUT"
  TAIL=6 section gpt_large 150 "$PY" benchmarks/gpt_check.py --backend cupy --steps 20 \
    --model "${GPT_LARGE:-8,8,512,256,32}" --ratio 0.5,0.6 --unlimited 64GiB --out "$OUT"
else
  nodevice tests probes bench_alloc gpt gpt_dropout gpt_large
fi

echo "==== done in ${SECONDS}s; logs in $OUT"
"$PY" benchmarks/device_summary.py "$OUT" | tee "$OUT/summary.txt"
exit "${PIPESTATUS[0]}"
