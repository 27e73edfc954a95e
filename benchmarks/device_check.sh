#!/usr/bin/env bash
# coop's GPU check: one command, one NVIDIA GPU, under 8 minutes. Run from the repository root:
#     bash benchmarks/device_check.sh
# It builds coop in place, runs the `cuda`-marked tests and tests/test_cupy_*.py, the probes of
# benchmarks/device_probes.py (reservation error, stream reuse while a kernel still writes,
# per-thread default streams, cost model and CUDA-event timing, dropout recompute, embedding
# backward), benchmarks/bench_alloc.py (coop's pool vs CuPy's MemoryPool per allocate + free),
# and benchmarks/gpt_check.py (examples/train_gpt.py's GPT on CuPy, unlimited and at 0.5x, losses
# and final parameters compared bit for bit; without and with dropout).
# Needs: python with cupy, numpy, Cython, setuptools, pytest, a C++17 compiler. Wheels for missing
# build/test packages can be given in $WHEELS (installed with pip --no-index); tqdm and
# matplotlib are optional (stubbed if absent). Env: PYTHON, OUT (default bench-out/device), STEPS (40),
# BUDGET_S (450: the seconds all sections may take together).
# Every section runs under its own timeout and logs to $OUT/<section>.log; $OUT/summary.txt
# collects the tails. Exit status: 0 all passed, 1 a section failed, 3 no GPU, 4 no build.
set -u
cd "$(dirname "$0")/.." || exit 2
[ -f coop/_core.pyx ] || { echo "device_check: run from a coop checkout"; exit 2; }
OUT=${OUT:-$PWD/bench-out/device}
STEPS=${STEPS:-40}
DEADLINE=$((SECONDS + ${BUDGET_S:-450}))   # every section together: 7.5 minutes at most
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
FAILED=()
section() {  # section NAME SECONDS CMD...: run CMD under min(SECONDS, time left), log, keep its tail
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then say "[$name] SKIPPED: out of time"; FAILED+=("$name"); return 99; fi
  say "---- $name (limit ${limit}s) $(date +%T)"
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-25}" "$OUT/$name.log" | tee -a "$SUMMARY"
  say "[$name] exit $rc in $((SECONDS - start))s"
  [ $rc -eq 0 ] || FAILED+=("$name")
  return $rc
}

PY=${PYTHON:-}
for c in python3 python; do
  [ -z "$PY" ] && command -v "$c" > /dev/null && "$c" -c "import cupy" 2> /dev/null && PY=$c
done
[ -n "$PY" ] || { say "device_check: no python that imports cupy (set PYTHON=...)"; exit 3; }
if ! "$PY" -c "import cupy, sys; sys.exit(0 if cupy.cuda.is_available() else 1)" 2> /dev/null; then
  say "device_check: CuPy sees no CUDA device on this machine; this check needs one GPU"
  exit 3
fi
say "python: $(command -v "$PY") ($("$PY" -V 2>&1))"
"$PY" - << 'PYEOF' 2>&1 | tee -a "$SUMMARY"
import cupy
from cupy.cuda import runtime
p = runtime.getDeviceProperties(0)
print("cupy", cupy.__version__, "runtime", runtime.runtimeGetVersion(), "driver",
      runtime.driverGetVersion(), "devices", runtime.getDeviceCount())
print("device 0:", p["name"].decode(), "SMs", p["multiProcessorCount"],
      "memory GiB %.1f" % (p["totalGlobalMem"] / 2**30))
PYEOF

# ---- build -----------------------------------------------------------------------------------
missing=()
for mod in Cython setuptools pytest; do "$PY" -c "import $mod" 2> /dev/null || missing+=("$mod"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ -n "${WHEELS:-}" ]; then
    say "installing ${missing[*]} from $WHEELS"
    PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip install -q --no-index --find-links "$WHEELS" \
      "${missing[@]}" >> "$OUT/pip.log" 2>&1 || say "pip failed: see $OUT/pip.log"
  else
    say "missing ${missing[*]}: give their wheels in WHEELS=dir"
  fi
fi
command -v c++ > /dev/null || command -v g++ > /dev/null || { say "no C++ compiler"; exit 4; }
section build 300 "$PY" setup.py -q build_ext --inplace -j "$(nproc)" || exit 4
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
    def set_postfix(self, *args, **kwargs):
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

# ---- tests, probes, allocation speed, GPT ------------------------------------------------------
CUDA_FILES=$(grep -l "pytest.mark.cuda" tests/test_*.py | tr '\n' ' ')
section tests 150 "$PY" -m pytest -q -rs -p no:cacheprovider -m cuda $CUDA_FILES
section tests_cupy 60 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_cupy_*.py
TAIL=20 section probes 120 "$PY" benchmarks/device_probes.py --out "$OUT"
TAIL=12 section bench_alloc 60 "$PY" benchmarks/bench_alloc.py --n 10000 --repeat 5 --out "$OUT"
TAIL=6 section gpt 150 "$PY" benchmarks/gpt_check.py --backend cupy --steps "$STEPS" --out "$OUT"
TAIL=6 section gpt_dropout 90 "$PY" benchmarks/gpt_check.py --backend cupy \
  --steps $((STEPS / 2)) --dropout 0.1 --out "$OUT"

say "==== done in ${SECONDS}s; outputs in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then say "FAILED: ${FAILED[*]}"; exit 1; fi
say "all sections passed"
