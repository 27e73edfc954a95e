#!/bin/sh
# NumPy's own core tests with NumPy's allocator, then with coop's NEP 49 handler installed for
# the whole session (a pytest plugin written to a temporary folder). Not run in CI: about
# 15,000 tests each way. Prints pytest's summary line of each run.
#   sh benchmarks/numpy_suite.sh [budget, default 4GiB]
set -u
BUDGET=${1:-4GiB}
NUMPY=$(python -c "import numpy, os; print(os.path.dirname(numpy.__file__))")
TESTS="test_multiarray.py test_regression.py test_nditer.py test_indexing.py test_shape_base.py"
PLUGIN_DIR=$(mktemp -d)
cat > "$PLUGIN_DIR/coop_handler.py" <<PY
import coop

_backend = None


def pytest_configure(config):
    global _backend
    _backend = coop.numpy_allocator("$BUDGET")
    _backend.install()


def pytest_unconfigure(config):
    _backend.uninstall()
    _backend.arena.check()
PY
cd "$NUMPY/_core/tests" || exit 1
for mode in numpy coop; do
    if [ "$mode" = coop ]; then plugin="-p coop_handler"; else plugin=""; fi
    echo "== $mode: python -m pytest -q -p no:cacheprovider $plugin $TESTS"
    PYTHONPATH="$PLUGIN_DIR${PYTHONPATH:+:$PYTHONPATH}" python -m pytest -q -p no:cacheprovider \
        -rxXf $plugin $TESTS > "$PLUGIN_DIR/$mode.txt" 2>&1
    grep -E "^(XFAIL|XPASS|FAILED|ERROR)" "$PLUGIN_DIR/$mode.txt" | sort > "$PLUGIN_DIR/$mode.short"
    tail -n 1 "$PLUGIN_DIR/$mode.txt"
done
echo "== outcomes that differ (< numpy, > coop)"
diff "$PLUGIN_DIR/numpy.short" "$PLUGIN_DIR/coop.short"
rm -rf "$PLUGIN_DIR"
