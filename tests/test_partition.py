"""Partitioned placement in replays: a CHEAP output takes the highest of the equally small free
pieces (docs/design.md, Cheap-tensor partitioning), so cheap tensors that die leave holes next
to each other; exact offsets and outcomes under coop and coop-no-partition."""

import pytest

import coop.trace.replay as R
from coop._core import Arena
from coop.trace._replay import Replayer
from coop.trace import load
from _traces import write_trace

UNIT = 512   # the trace's alignment: every value below takes one unit, the stack two


def trace(path):
    """Eight cheap values fill an eight-unit arena from the top (coop) or the bottom
    (no-partition); two die, leaving two one-unit holes; value 8 takes one of them; value 6 dies;
    then a two-unit stack reads every live value, so all of them are pinned: it fits only where
    value 6's hole and a free neighbor are adjacent."""
    records = [{"op": "meta", "alignment": UNIT}]
    call = {"op": "call", "inputs": [], "cost": 1.0, "cls": "cheap"}
    records += [{**call, "name": f"f{i}", "outputs": [{"id": i, "size": UNIT}]}
                for i in range(8)]
    records += [{"op": "release", "id": 1}, {"op": "release", "id": 5}]
    records.append({**call, "name": "g", "outputs": [{"id": 8, "size": UNIT}]})
    records.append({"op": "release", "id": 6})
    records.append({**call, "name": "stack", "inputs": [0, 2, 3, 4, 7, 8],
                    "outputs": [{"id": 9, "size": 2 * UNIT}]})
    return write_trace(path, records)


def offsets(path, policy, stop):
    """Offsets (in units) of the values held after the first `stop` records."""
    program = load(path)
    arena = Arena(8 * UNIT, UNIT)
    rp = Replayer(program, arena, policy, 0.0, R.copy_cost(program))
    rp.run(0, stop)
    arena.check()
    return {v: rp.engine.info(rp.storage_of(v))["offset"] // UNIT
            for v in rp.resident_values()}


@pytest.mark.parametrize("policy, placed", [
    # cheap at the high end: values 0..7 at units 7..0; the holes at units 6 and 2 tie, and
    # value 8 takes the higher one (the lower one before ties broke toward the placement's end)
    ("coop", {0: 7, 2: 5, 3: 4, 4: 3, 6: 1, 7: 0, 8: 6}),
    # every output EXPENSIVE: values 0..7 at units 0..7; value 8 takes the lower hole
    ("coop-no-partition", {0: 0, 2: 2, 3: 3, 4: 4, 6: 6, 7: 7, 8: 1}),
])
def test_a_cheap_output_takes_the_highest_equally_small_hole(tmp_path, policy, placed):
    assert offsets(trace(tmp_path / "t.jsonl"), policy, 11) == placed


@pytest.mark.parametrize("policy", ["coop", "coop-no-move", "coop-no-partition", "coop-loop"])
def test_the_stack_fits_where_the_dead_values_left_adjacent_holes(tmp_path, policy):
    # coop: value 6 dies at unit 1, next to the hole at unit 2 that value 8 left free; had value
    # 8 taken unit 2 (the lowest hole), the free units 1 and 6 would be apart, every live value
    # pinned by the stack: out of memory
    path = trace(tmp_path / "t.jsonl")
    result = R.replay(path, budget=8 * UNIT, policy=policy, check=True)
    assert (result["status"], result["evictions"], result["peak_used_bytes"]) == \
        ("ok", 0, 8 * UNIT)
