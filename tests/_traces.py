"""A trace written by hand: records (dicts) as coop's JSON lines, shared by the tests."""
import json


def write_trace(path, records):
    """path (a pathlib.Path) holds records, one JSON object per line; returns path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
