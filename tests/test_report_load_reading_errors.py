"""`load_reading` raises the documented ValueError naming the file for every non-Reading file.

s17 trial AF #5: a torch ``.pt`` passed by mistake raised ``UnicodeDecodeError`` (not naming the
file) instead of the ValueError its docstring promises.
"""

from __future__ import annotations

import functools
import json
import re

import pytest
import torch

from neuromanifold import read
from neuromanifold.cells import planted_mlp
from neuromanifold.report import load_reading, reading_json


def _named(path) -> str:
    return re.escape(f"{path} does not hold a Reading as JSON")


def test_binary_file_is_a_value_error_naming_it(tmp_path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.arange(4.0)}, path)  # a zip archive: not UTF-8 text
    with pytest.raises(ValueError, match=_named(path) + r": not UTF-8 text \(byte 0x") as err:
        load_reading(path)
    # the message stays one short line: the decode error's repr held the whole file (audit AH #2)
    big = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(250_000)}, big)  # ~1 MB
    with pytest.raises(ValueError, match=_named(big)) as err:
        load_reading(big)
    assert len(str(err.value)) < 300 + len(str(big))


@functools.cache
def _valid_json() -> str:
    """A real Reading's JSON (the planted MLP's read, one genuine record)."""
    planted = planted_mlp()
    reading = read(planted.model, planted.data, planted.family)
    assert reading.directions
    return reading_json(reading)


def _valid() -> dict:
    return json.loads(_valid_json())


def test_the_valid_dict_of_these_tests_loads(tmp_path) -> None:
    """The cases below break one part of this dict: it must load as it is, or they test nothing."""
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_valid()))
    assert reading_json(load_reading(path)) == _valid_json()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ([1, 2], "expected an object, got list"),
        ("a string", "expected an object, got str"),
        (3.5, "expected an object, got float"),
    ],
)
def test_json_that_is_not_an_object_is_a_value_error_naming_it(tmp_path, content, why) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=_named(path) + ".*" + re.escape(why)):
        load_reading(path)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("directions", ["not a record"], "AttributeError"),
        ("record", {"extra": 1}, "unexpected keyword argument 'extra'"),
        ("meta", "ab", "ValueError"),
        ("not_covered", None, "KeyError('not_covered')"),
    ],
)
def test_json_that_is_not_a_reading_is_a_value_error_naming_it(tmp_path, key, value, why) -> None:
    content = _valid()
    if key == "record":
        content["directions"][0].update(value)
    elif value is None:
        del content[key]
    else:
        content[key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=_named(path) + ".*" + re.escape(why)):
        load_reading(path)
