"""`neuromanifold read`'s table numbers its directions and names where each sits in a layer,
and an interrupted ``--out`` read says where its directions are kept (s20 trial AN, suggestions:
a chain's two rows looked like two node deaths, the dead unit was only in the JSON, and Ctrl-C
exited 130 with no word of ``--resume``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.singular.support import layer_units

RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│").split("│")]


def test_every_row_carries_its_direction_number(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--json", str(out)], env=ENV)
    assert res.exit_code == 0, res.output
    directions = json.loads(out.read_text())["directions"]
    header = next(line for line in res.stdout.splitlines() if "detector" in line)
    assert _cells(header.replace("┃", "│"))[:2] == ["#", "layer: units"]
    rows = [_cells(line) for line in res.stdout.splitlines() if line.startswith("│")]
    expected = sorted(
        (str(i), layer_units(d["info"]["support"], layer))
        for i, d in enumerate(directions)
        for layer in d["layers"]
    )
    assert sorted((r[0], r[1].partition(": ")[2]) for r in rows) == expected
    chain = next(i for i, d in enumerate(directions) if len(d["layers"]) > 1)  # planted: 0+2
    # planted_mlp's dead hidden unit 2: out 2 of layer 0, input 2 of layer 2 (its outgoing
    # direction sits on output 3)
    assert [r[1] for r in rows if r[0] == str(chain)] == ["0: out 2", "2: out 3, in 2"]


@pytest.mark.parametrize(("n_logged", "ours"), [(0, True), (1, True), (2, True), (2, False)])
def test_an_interrupted_read_with_out_points_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_logged: int, ours: bool
) -> None:
    """The finished directions of this read's log are counted; a read stopped before its first
    one, beside no log or another read's, is told that there is nothing to resume (s33 trial
    DIST D3: it was pointed at a log that did not exist; s33 review #5: at another read's log,
    which --resume then refused)."""
    import neuromanifold.report.resume as resume

    real = resume.read_fingerprint
    hooks = ("log_path", "resume", "fingerprint_data", "on_resume", "on_vector")

    def interrupted(model, data, family, **kwargs: object) -> None:
        options = {k: v for k, v in kwargs.items() if k not in hooks}
        mark = real(model, kwargs["fingerprint_data"], family, options) if ours else "other"
        if n_logged:  # a header and n_logged finished directions
            lines = [{"kind": "k", "fingerprint": mark}] + [{"index": i} for i in range(n_logged)]
            Path(kwargs["log_path"]).write_text("".join(json.dumps(e) + "\n" for e in lines))
        raise KeyboardInterrupt

    monkeypatch.setattr(resume, "resumable_read", interrupted)
    out = tmp_path / "report"
    out.mkdir()
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--out", str(out)], env=ENV)
    assert res.exit_code == 130
    nothing = "no direction was finished, so there is nothing to resume: run the same read again"
    kept = {
        0: nothing,
        1: f"the direction read so far is kept in {out / 'read.jsonl'}; run the same command "
        "with --resume to continue",
        2: f"the 2 directions read so far are kept in {out / 'read.jsonl'}; run the same "
        "command with --resume to continue",
    }[n_logged]
    assert res.stderr == f"interrupted: {kept if ours else nothing}\n"


def test_a_flat_gauges_plateau_fit_is_marked_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """s30 trial DOCS #4: k̂ = 1.000, r² = 1.0000 beside flat_gauge read like an order; the
    table now shows them in parentheses, as report.md does, and says what they are."""
    import dataclasses

    import neuromanifold.singular.read as read_module
    from neuromanifold.report.markdown import PLATEAU_NOTE
    from neuromanifold.singular.classify import DirectionClass

    real = read_module.read

    def with_a_plateau(*args: object, **kwargs: object):
        reading = real(*args, **kwargs)
        flat = dataclasses.replace(
            reading.directions[0], klass=DirectionClass("flat_gauge"), k=None, k_hat=1.0, r2=0.5
        )
        return dataclasses.replace(reading, directions=(*reading.directions, flat))

    monkeypatch.setattr(read_module, "read", with_a_plateau)
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp"], env=ENV)
    assert res.exit_code == 0, res.output
    rows = [_cells(line) for line in res.stdout.splitlines() if line.startswith("│")]
    flat = [r for r in rows if r[6] == "flat_gauge"]
    genuine = [r for r in rows if r[6] == "genuine_singularity"]
    assert flat and all(r[3:6] == ["—", "(1.000)", "(0.5000)"] for r in flat)
    assert genuine and all(not r[4].startswith("(") for r in genuine)
    assert f"k̂, r² {PLATEAU_NOTE}" in " ".join(res.stdout.split())


def test_no_plateau_note_without_a_plateau_fit() -> None:
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp"], env=ENV)
    assert res.exit_code == 0 and "plateau" not in res.stdout


def test_a_failed_group_without_out_is_said_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """s33 trial DIST D5: a rank that died under a read without --out left rank 0 with gloo's
    65-line traceback; the failed collective is said in one line as with --out (no log to name)."""
    import neuromanifold.cli.read as cli_read
    import neuromanifold.singular.read as read_module

    def lost(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer\nmore")

    monkeypatch.setattr(read_module, "read", lost)
    monkeypatch.setattr(cli_read, "_group_failure", lambda err: True)
    res = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp"], env=ENV)
    assert res.exit_code == 1
    assert res.stderr == (
        "error: a process of the group failed (RuntimeError: [gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer)\n"
    )


def test_an_interrupt_while_the_report_is_written_says_resume_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s33 trial DIST D4: Ctrl-C while the report was written exited 130 with nothing said,
    beside a report.json and no report.md; the log holds the whole read, so --resume writes the
    report without reading a direction again."""
    import neuromanifold.report.write as write_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(write_module, "write_report", interrupted)
    out = tmp_path / "report"
    args = ["read", "--model", "zoo:planted-mlp", "--out", str(out)]
    res = RUNNER.invoke(app, args, env=ENV)
    assert res.exit_code == 130
    assert res.stderr == (
        f"interrupted while writing the report in {out}: its files may be missing or an earlier "
        "read's; the read itself is complete in its log: run the same command with --resume to "
        "write the report (no direction is read again)\n"
    )
    monkeypatch.undo()
    again = RUNNER.invoke(app, [*args, "--resume"], env=ENV)
    assert again.exit_code == 0, again.output
    n = len(json.loads((out / "report.json").read_text())["directions"])
    said = "finished direction" + ("s" if n != 1 else "")
    assert f"--resume: {n} {said} taken from {out / 'read.jsonl'}" in again.output
    assert (out / "report.md").is_file()
