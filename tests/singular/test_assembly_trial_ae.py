"""s17 user trial AE: what `assemble_from_reading` and `triple read` accept and what they state."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.cli.triple import READ_ONLY_NOTE, parse_k_range
from neuromanifold.singular.assembly import (
    READ_ONLY_SCOPE,
    REGULAR_DIMS_SCOPE,
    Assembly,
    BlockTriple,
    Locus,
    assemble,
    assemble_from_reading,
)
from neuromanifold.singular.closed_forms import rrr
from neuromanifold.singular.nu import K_MAX
from neuromanifold.singular.reading import Reading

runner = CliRunner()


def _rec(klass: str, k: int | None, layers: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    return {
        "class": klass,
        "k": k,
        "layer": layers[0],
        "layers": list(layers),
        "detector": "kfac-A",
        **extra,
    }


def _flat(text: str) -> str:
    """The CLI output on one line (rich boxes and wraps the error message)."""
    return " ".join(text.replace("│", " ").split())


LIVE3 = [_rec("live", 1, ("fc",)) for _ in range(3)]


# --- trial AE #2: a regular_dims below the number of live records ---------------------------


@pytest.mark.parametrize("regular_dims", [0, 1, 2])
def test_regular_dims_below_the_live_records_is_refused(regular_dims: int) -> None:
    with pytest.raises(
        ValueError, match=rf"regular_dims = {regular_dims} is below the 3 live directions"
    ):
        assemble_from_reading(LIVE3, regular_dims=regular_dims)


def test_regular_dims_of_at_least_the_live_records_replaces_them() -> None:
    alone = assemble_from_reading(LIVE3)
    assert alone.lam == Fraction(3, 2)  # three live records, 1/2 each (spec §5 rule 1)
    for d in (3, 7):
        a = assemble_from_reading(LIVE3, regular_dims=d)
        assert (a.lam, a.m, a.regular_dims) == (Fraction(d, 2), 1, d)


def test_triple_read_refuses_regular_dims_below_the_live_records(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"directions": LIVE3}))
    res = runner.invoke(
        app,
        ["triple", "read", "--reading", str(path), "--regular-dims", "2"],
        env={"COLUMNS": "300"},
    )
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)  # click's usage error
    text = _flat(res.output)
    assert "--regular-dims 2 is below the 3 live directions" in text and "λ =" not in text
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--regular-dims", "3"])
    assert res.exit_code == 0 and res.output.startswith("λ = 3/2"), res.output


# --- trial AE #3: the scope is in the result and its JSON; Assembly.from_dict ----------------


NODE = _rec("genuine_singularity", 2, ("0", "2"), detector="duality")


def test_assembly_states_whether_regular_dims_was_given() -> None:
    reading = {"directions": [NODE], "note": "factor G of '0' has 16 rows", "meta": {}}
    alone = assemble_from_reading(reading)
    assert (alone.regular_dims_given, alone.scope) == (False, READ_ONLY_SCOPE)
    assert alone.reading_note == "factor G of '0' has 16 rows"
    zero = assemble_from_reading(reading, regular_dims=0)
    assert (zero.regular_dims_given, zero.scope) == (True, REGULAR_DIMS_SCOPE)
    assert (zero.lam, zero.m) == (alone.lam, alone.m)  # same numbers, different scope
    assert zero.to_dict() != alone.to_dict()
    assert assemble_from_reading([NODE]).reading_note == ""  # a bare list has no note
    obj = Reading(directions=(), not_covered=(), meta={}, note="a note")  # the object, not JSON
    assert assemble_from_reading(obj).reading_note == "a note"
    plain = assemble([Locus("x", "regular", dim=2)])  # not from a reading: no scope stated
    assert (plain.regular_dims_given, plain.scope, plain.reading_note) == (None, None, "")


def test_triple_read_json_states_its_scope(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"directions": [NODE], "note": "a reading note", "meta": {}}))
    argv = ["triple", "read", "--reading", str(path), "--json", "-"]
    alone = json.loads(runner.invoke(app, argv).output)
    zero = json.loads(runner.invoke(app, [*argv, "--regular-dims", "0"]).output)
    assert (alone["regular_dims_given"], alone["scope"]) == (False, READ_ONLY_SCOPE)
    assert (zero["regular_dims_given"], zero["scope"]) == (True, REGULAR_DIMS_SCOPE)
    assert alone["reading_note"] == zero["reading_note"] == "a reading note"
    text = runner.invoke(app, argv[:-2]).output
    assert READ_ONLY_NOTE in text and "reading note: a reading note" in text


def _assemblies() -> list[Assembly]:
    records = [
        NODE,
        _rec("genuine_singularity", 3, ("4", "6")),
        _rec("live", 1, ("0",)),
        _rec("flat_gauge", None, ("5",)),
        _rec("genuine_singularity", None, ("9",)),
    ]
    chain = [Locus(f"w{i}", "genuine", orders=(1,), block="chain") for i in range(4)]
    return [
        assemble_from_reading(records),
        assemble_from_reading(records, regular_dims=3, component_dims={1: (2, 1)}),
        assemble_from_reading([]),
        assemble([*chain, Locus("r", "regular", dim=5), Locus("g", "gauge")]),
        assemble([Locus("deep", "genuine", orders=(K_MAX + 1,))]),  # ν not computed: None
    ]


@pytest.mark.parametrize("a", _assemblies())
def test_assembly_round_trips_through_json(a: Assembly) -> None:
    assert Assembly.from_dict(a.to_dict()) == a
    back = Assembly.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a and back.to_dict() == a.to_dict()
    assert all(isinstance(b, BlockTriple) for b in back.blocks)
    assert [BlockTriple.from_dict(b.to_dict()) for b in a.blocks] == list(a.blocks)


# --- trial AE #4: record fields are validated -----------------------------------------------


BASE = {"class": "genuine_singularity", "k": 2, "layer": "fc1"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"layers": "fc1"}, r"directions\[0\] has layers = 'fc1'; expected a list of layer names"),
        ({"layers": ["fc1", 2]}, r"has layers = \['fc1', 2\]; expected a list"),
        ({"layers": ["fc1", "fc2"], "info": {"chain_length": 0}}, r"chain_length'\] = 0;"),
        ({"layers": ["fc1", "fc2"], "info": {"chain_length": -1}}, r"chain_length'\] = -1;"),
        ({"layers": ["fc1", "fc2"], "info": {"chain_length": True}}, r"chain_length'\] = True;"),
        ({"layers": ["fc1", "fc2"], "info": {"chain_length": 2.0}}, r"chain_length'\] = 2.0;"),
    ],
)
def test_malformed_structure_fields_are_errors(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        assemble_from_reading([{**BASE, **extra}])


@pytest.mark.parametrize(
    ("klass", "k"),
    [("genuine_singularity", 1), ("live", 2), ("live", 3), ("flat_gauge", 2), ("curved_gauge", 1)],
)
def test_an_order_its_class_cannot_have_is_an_error(klass: str, k: int) -> None:
    ok = _rec("genuine_singularity", 2, ("0", "2"))
    with pytest.raises(
        ValueError, match=rf"directions\[1\] has class '{klass}' with order k = {k}; a {klass}"
    ):
        assemble_from_reading([ok, _rec(klass, k, ("0",))])


def test_the_orders_the_library_writes_are_accepted() -> None:
    # what the classifier writes (and flat_gauge k = 1, curved_gauge k = 3 of older reads)
    records = [
        _rec("genuine_singularity", 2, ("0", "2")),
        _rec("genuine_singularity", None, ("9",)),  # skipped with a note
        _rec("live", 1, ("0",)),
        _rec("live", None, ("0",)),
        _rec("flat_gauge", None, ("5",)),
        _rec("flat_gauge", 1, ("5",)),
        _rec("curved_gauge", 2, ("5",)),
        _rec("curved_gauge", 3, ("5",)),
        _rec("unresolved", None, ("7",)),
    ]
    a = assemble_from_reading(records)
    # (1, 1) crossing (1/2, 2) + one live direction 1/2 (spec §5 rules 1, 2); the live record
    # without an order is a regular direction too (its class says so)
    assert (a.lam, a.m) == (Fraction(1, 2) + 2 * Fraction(1, 2), 2)
    assert len(a.gauge) == 4


@pytest.mark.parametrize("n", [2, 3])
def test_a_valid_chain_length_sets_the_number_of_factors(n: int) -> None:
    # a depth-n width-one chain read at k = n: components (1, …, 1), λ = 1/2, m = n (spec §5
    # rule 3), whatever `layers` lists
    rec = {**BASE, "k": n, "layers": ["fc1"], "info": {"chain_length": np.int64(n)}}
    a = assemble_from_reading([rec])
    assert (a.lam, a.m) == (Fraction(1, 2), n)


def test_triple_read_refuses_a_layers_string(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"directions": [{**BASE, "k": 3, "layers": "fc2"}]}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    text = _flat(res.output)
    assert "directions[0] has layers = 'fc2'; expected a list of layer names" in text
    assert "λ =" not in text


# --- trial AE #7: `triple nu --k` checks K_MAX before expanding a range ---------------------


@pytest.mark.parametrize("spec", ["1-100000000", "2,5-1000000000000000000000", "31"])
def test_k_beyond_k_max_is_refused_before_the_range_is_expanded(spec: str) -> None:
    # before the fix "1-100000000" built the whole range first (a hang, ~1 GB)
    with pytest.raises(typer.BadParameter, match=rf"--k must be <= {K_MAX}, got '{spec}'"):
        parse_k_range(spec)
    res = runner.invoke(app, ["triple", "nu", "--k", spec], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and f"--k must be <= {K_MAX}" in _flat(res.output)


def test_k_range_up_to_k_max_is_read_whole() -> None:
    assert parse_k_range(f"1-{K_MAX}") == list(range(1, K_MAX + 1))
    assert parse_k_range(f"{K_MAX},2-3,3") == [2, 3, K_MAX]


# --- trial AE #9: NumPy integers are numbers --------------------------------------------------


def test_numpy_integers_are_accepted_for_dimensions_and_regular_dims() -> None:
    # the docs/triple.md §4 example with NumPy sizes: a dead unit of RRR (5, 3, 4, 2) has
    # components (M − r, N − r) = (3, 2) and regular_dims r(M + N − r); it gives rrr(5, 3, 4, 2)
    M, N, r = np.int64(5), np.int64(4), np.int64(2)
    recs = [{"class": "genuine_singularity", "k": 2, "layers": ["0", "1"]}]
    a = assemble_from_reading(
        recs, regular_dims=r * (M + N - r), component_dims={0: (M - r, N - r)}
    )
    cf = rrr(5, 3, 4, 2)
    assert (a.lam, a.m) == (cf.lam, cf.m)
    assert type(a.regular_dims) is int and all(type(d) is int for d in a.blocks[0].dims)
    json.dumps(a.to_dict())  # plain ints: the JSON is writable
    b = assemble_from_reading(
        [{**recs[0], "k": np.int32(2)}], component_dims={np.int64(0): (np.int32(3), 2)}
    )  # a NumPy order k is a genuine record's order for component_dims as well
    assert b.blocks[0].dims == (3, 2)
    loc = Locus("x", "genuine", orders=(np.int64(2), 1), dims=(np.int16(3), 1))
    assert loc.orders == (2, 1) and loc.dims == (3, 1) and type(loc.orders[0]) is int
    assert Locus("y", "regular", dim=np.int64(4)).dim == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"regular_dims": True}, "regular_dims must be an int >= 0 or None, got True"),
        ({"regular_dims": np.float64(4.0)}, "regular_dims must be an int >= 0 or None"),
        ({"regular_dims": np.int64(-1)}, "regular_dims must be an int >= 0 or None"),
        ({"component_dims": {0: (np.True_, 2)}}, r"dims must be ints >= 1"),
        ({"component_dims": {0: (True, 2)}}, r"dims must be ints >= 1"),
        ({"component_dims": {0: (np.int64(0), 2)}}, r"dims must be ints >= 1"),
    ],
)
def test_non_integers_and_bools_are_still_refused(kwargs: dict[str, Any], message: str) -> None:
    recs = [{"class": "genuine_singularity", "k": 2, "layers": ["0", "1"]}]
    with pytest.raises(ValueError, match=message):
        assemble_from_reading(recs, **kwargs)


# --- trial AE #10: nothing counted toward λ is said ------------------------------------------

NOTHING = "no direction counted toward λ"


@pytest.mark.parametrize(
    ("records", "regular_dims", "what"),
    [
        ([], None, "the reading has no direction records"),
        ([], 0, "the reading has no direction records"),
        (
            [_rec("flat_gauge", None, ("0",)), _rec("curved_gauge", 2, ("1",))],
            None,
            "the reading's records are 1 flat_gauge, 1 curved_gauge",
        ),
        (
            [_rec("unresolved", None, ("0",)), _rec("genuine_singularity", None, ("1",))],
            None,
            "the reading's records are 1 unresolved, 1 genuine_singularity",
        ),
    ],
)
def test_an_assembly_that_counts_nothing_says_so(
    records: list[dict[str, Any]], regular_dims: int | None, what: str
) -> None:
    a = assemble_from_reading({"directions": records}, regular_dims=regular_dims)
    # the values of an empty structure (tests/singular/test_assembly.py: assemble([]))
    assert (a.lam, a.m, a.dominant_order, a.nu_universal) == (0, 1, 1, 0.5)
    note = next(n for n in a.notes if NOTHING in n)
    assert what in note and "ν(1) = 1/2" in note


@pytest.mark.parametrize(
    ("records", "regular_dims"),
    [
        ([_rec("live", 1, ("0",))], None),
        ([_rec("flat_gauge", None, ("0",))], 2),
        ([_rec("genuine_singularity", 2, ("0", "1"))], None),
    ],
)
def test_an_assembly_that_counts_a_direction_has_no_such_note(
    records: list[dict[str, Any]], regular_dims: int | None
) -> None:
    a = assemble_from_reading(records, regular_dims=regular_dims)
    assert a.lam > 0 and not any(NOTHING in n for n in a.notes)


def test_triple_read_of_an_empty_reading_says_nothing_was_counted(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"directions": []}))
    res = runner.invoke(app, ["triple", "read", "--reading", str(path)])
    assert res.exit_code == 0 and NOTHING in res.output, res.output
    res = runner.invoke(app, ["triple", "read", "--reading", str(path), "--json", "-"])
    assert any(NOTHING in n for n in json.loads(res.output)["notes"])


def test_a_generator_of_records_is_read_once_and_counted(  # s17 audit AH #1
) -> None:
    recs = [{"class": "live", "k": 1, "layers": [f"fc{i}"]} for i in range(3)]
    from_list = assemble_from_reading(recs)
    assert assemble_from_reading(r for r in recs) == from_list
    with pytest.raises(ValueError, match=r"regular_dims = 0 is below the 3 live directions"):
        assemble_from_reading((r for r in recs), regular_dims=0)
