"""A `Reading` as JSON: the archival format (Markdown and PNG are views of it).

``reading_json(r)`` is ``json.dumps(r.to_dict())``; `load_reading` inverts it exactly:
``load_reading(p) == r`` (JSON keeps Python floats exactly, tuples come back as tuples through
`Reading.from_dict`). Non-finite floats are written as ``NaN``/``Infinity`` (Python's JSON
dialect) rather than dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

from neuromanifold.report._atomic import atomic_write_text
from neuromanifold.singular.reading import Reading

__all__ = ["load_reading", "reading_json", "write_reading_json"]


def reading_json(reading: Reading, *, indent: int | None = 1) -> str:
    """``json.dumps(reading.to_dict())`` (keys in the order of the dataclass fields)."""
    if not isinstance(reading, Reading):
        raise TypeError(f"reading must be a Reading; got {type(reading).__name__}")
    return json.dumps(reading.to_dict(), indent=indent)


def write_reading_json(reading: Reading, path: str | Path) -> Path:
    """Write `reading_json` to ``path`` atomically (the old file survives a failed write)."""
    return atomic_write_text(path, reading_json(reading) + "\n")


def load_reading(path: str | Path) -> Reading:
    """Read a JSON file written by `write_reading_json` back into a `Reading`.

    Raises ValueError naming the file when it is not UTF-8 text (e.g. a torch ``.pt`` passed by
    mistake), not JSON, or not a Reading's dict (not an object, a missing key, a record that is
    not an object or has other fields); ``OSError`` when it cannot be read at all.
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:  # its repr holds the whole file (s17 audit AH #2)
        raise ValueError(
            f"{p} does not hold a Reading as JSON: not UTF-8 text (byte "
            f"0x{err.object[err.start]:02x} at position {err.start})"
        ) from err
    except ValueError as err:  # JSONDecodeError: a short message with line and column
        raise ValueError(f"{p} does not hold a Reading as JSON: {err}") from err
    if not isinstance(d, dict):
        raise ValueError(
            f"{p} does not hold a Reading as JSON: expected an object, got {type(d).__name__}"
        )
    try:
        return Reading.from_dict(d)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise ValueError(f"{p} does not hold a Reading as JSON: {err!r}") from err
