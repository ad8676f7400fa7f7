"""Resumable reads: an interrupted read continues from its JSONL log to the same Reading."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.report.resume import (
    LOG_NAME,
    LOG_VERSION,
    OUTPUT_RTOL,
    ReadLog,
    count_logged,
    output_probe,
    read_fingerprint,
    resumable_read,
)
from neuromanifold.singular import read_candidate as candidate_mod
from neuromanifold.singular.read import read

GRID = np.logspace(-3, 0, 14).tolist()
N_DEAD = 3  # dead hidden units: one duality chain each


@pytest.fixture(scope="module")
def net():
    """planted_mlp with two more dead units: three candidates to read."""
    p = planted_mlp(n=48, hidden=7, seed=1)
    m = p.model
    with torch.no_grad():
        live = [i for i in range(7) if m[0].weight[i].abs().sum() > 0][:2]
        for i in live:
            m[0].weight[i] = 0.0
            m[0].bias[i] = 0.0
            m[2].weight[:, i] = 0.0
    return m, p.data, p.family


@pytest.fixture(scope="module")
def uninterrupted(net):
    m, x, fam = net
    return read(m, x, fam, grid=GRID, progress=False)


class _Stop(KeyboardInterrupt):
    pass


def _count_reads(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = candidate_mod.read_direction

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(candidate_mod, "read_direction", counting)
    return calls


def test_interrupted_read_resumes_to_the_same_reading(net, uninterrupted, tmp_path, monkeypatch):
    m, x, fam = net
    assert len(uninterrupted.directions) == N_DEAD
    log = tmp_path / LOG_NAME
    options = {"grid": GRID, "progress": False}
    stop_after = 2
    original_append = ReadLog.append

    def append_then_stop(self, index, record, n_passes):
        original_append(self, index, record, n_passes)
        if index + 1 == stop_after:
            raise _Stop

    monkeypatch.setattr(ReadLog, "append", append_then_stop)
    with pytest.raises(_Stop):
        resumable_read(m, x, fam, log_path=log, **options)
    monkeypatch.setattr(ReadLog, "append", original_append)
    fp = read_fingerprint(m, x, fam, options)
    assert sorted(ReadLog(log, fp).load()) == list(range(stop_after))

    calls = _count_reads(monkeypatch)
    resumed = resumable_read(m, x, fam, log_path=log, resume=True, **options)
    # every direction here reads once (snapped: no re-read), so only the unfinished one is swept
    assert len(calls) == N_DEAD - stop_after
    assert resumed == uninterrupted
    assert sorted(ReadLog(log, fp).load()) == list(range(N_DEAD))


def test_resume_of_a_complete_log_reads_nothing(net, uninterrupted, tmp_path, monkeypatch):
    m, x, fam = net
    log = tmp_path / LOG_NAME
    resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False)
    calls = _count_reads(monkeypatch)
    seen: list[tuple[int, bool]] = []
    again = resumable_read(
        m, x, fam, log_path=log, resume=True, on_resume=_hear(seen), grid=GRID, progress=False
    )
    assert calls == []
    assert again == uninterrupted
    assert seen == [(N_DEAD, False)]  # on_resume: the directions taken from the log, no tear


def _hear(seen: list[tuple[int, bool]]):
    return lambda n, torn: seen.append((n, torn))


def test_on_resume_hears_zero_without_a_log_and_nothing_without_resume(net, tmp_path):
    m, x, fam = net
    seen: list[tuple[int, bool]] = []
    opts = {"grid": GRID, "progress": False, "max_directions": 0}
    resumable_read(
        m, x, fam, log_path=tmp_path / "a.jsonl", resume=True, on_resume=_hear(seen), **opts
    )
    assert seen == [(0, False)]
    resumable_read(m, x, fam, log_path=tmp_path / "b.jsonl", on_resume=_hear(seen), **opts)
    assert seen == [(0, False)]


def test_torn_last_line_is_read_again(net, uninterrupted, tmp_path, monkeypatch):
    m, x, fam = net
    log = tmp_path / LOG_NAME
    resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False)
    text = log.read_text()
    log.write_text(text[: len(text) - 40])  # the process died while writing the last line
    calls = _count_reads(monkeypatch)
    seen: list[tuple[int, bool]] = []
    again = resumable_read(
        m, x, fam, log_path=log, resume=True, on_resume=_hear(seen), grid=GRID, progress=False
    )
    assert len(calls) == 1
    assert again == uninterrupted
    assert all(json.loads(line) for line in log.read_text().splitlines())
    assert seen == [(N_DEAD - 1, True)]  # said, so a user who killed a write knows (VER #4)


def test_count_logged_counts_finished_directions_of_any_read(net, tmp_path):
    m, x, fam = net
    log = tmp_path / LOG_NAME
    assert count_logged(log) == 0  # no log
    resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False)
    assert count_logged(log) == N_DEAD
    mark = read_fingerprint(m, x, fam, {"grid": GRID, "progress": False})
    assert count_logged(log, mark) == N_DEAD  # this read's log
    assert count_logged(log, "0" * 64) == 0  # what --resume of another read would take
    text = log.read_text()
    log.write_text(text[: len(text) - 40])  # a torn last line is no finished direction
    assert count_logged(log) == N_DEAD - 1
    lines = text.splitlines()
    log.write_text(json.dumps({"kind": "x", "fingerprint": "other"}) + "\n" + lines[1] + "\n")
    assert count_logged(log) == 1  # another read's log: counted, not checked
    log.write_bytes(b"\xff\xfe")
    assert count_logged(log) == 0  # not text


class _Scaled(torch.nn.Module):
    """``c · inner(x)``: the same parameters as ``inner`` (``c`` is a plain float)."""

    def __init__(self, inner: torch.nn.Module, c: float) -> None:
        super().__init__()
        self.inner, self.c = inner, c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c * self.inner(x)


def test_a_log_of_the_same_weights_with_another_forward_is_refused(net, tmp_path):
    """s33 trial DIST D1: the fingerprint hashes parameters and buffers, so a log of a model whose
    forward changed (outputs doubled, same weights) was resumed and its records reused."""
    m, x, fam = net
    log = tmp_path / LOG_NAME
    resumable_read(_Scaled(m, 1.0), x, fam, log_path=log, grid=GRID, progress=False)
    doubled = _Scaled(m, 2.0)
    with pytest.raises(ValueError, match=r"outputs on the first probe samples differ .* 0\.5 of"):
        resumable_read(doubled, x, fam, log_path=log, resume=True, grid=GRID, progress=False)
    within = _Scaled(m, 1.0 + OUTPUT_RTOL / 10)  # below the tolerance: the same model
    resumable_read(within, x, fam, log_path=log, resume=True, grid=GRID, progress=False)


def test_a_log_written_before_the_outputs_were_kept_is_still_resumed(net, uninterrupted, tmp_path):
    m, x, fam = net
    log = tmp_path / LOG_NAME
    resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False)
    lines = log.read_text().splitlines()
    header = json.loads(lines[0])
    del header["parts"]["outputs"]
    log.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    again = resumable_read(m, x, fam, log_path=log, resume=True, grid=GRID, progress=False)
    assert again == uninterrupted


def test_output_probe_is_the_float64_eval_copys_and_leaves_the_model_alone(net):
    """s33 review #1–#4: taken on the read's float64 working copy (the caller's model is neither
    run nor put in another mode), spread over the whole output, None when not finite."""
    m, x, _ = net
    bn = torch.nn.BatchNorm1d(x.shape[1]).double().train()
    model = torch.nn.Sequential(bn, m, torch.nn.Dropout(0.5)).train()
    before = bn.running_mean.clone()
    first = output_probe(model, x)
    assert first == output_probe(model, x)  # no dropout noise: eval mode
    assert model.training and bn.training  # untouched: no mode set …
    assert torch.equal(bn.running_mean, before)  # … and no statistics updated
    with torch.no_grad():
        want = torch.nn.Sequential(bn, m).eval()(x[:2]).reshape(-1)
    assert first == [float(v) for v in want]  # 8 values: all of them
    half = copy.deepcopy(m).half()
    assert output_probe(half, x) == output_probe(copy.deepcopy(half).double(), x)  # in float64
    assert output_probe(torch.nn.Linear(3, 2).double(), x) is None  # a forward that fails


def test_output_probe_spreads_its_values_over_samples_and_positions() -> None:
    """s33 review #4: the first 64 values of a sequence model are sample 0 at position 0 only."""

    class Seq(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.double().cumsum(1)[..., None].repeat(1, 1, 3)

    x = torch.arange(2 * 100, dtype=torch.float64).reshape(2, 100)
    values = output_probe(Seq(), x)
    flat = Seq()(x).reshape(-1)
    assert values is not None and len(values) == 64
    assert values[0] == float(flat[0]) and values[-1] == float(flat[-1])  # both samples, all t
    assert output_probe(Seq(), torch.full((2, 3), float("inf"))) is None  # not finite: no check


def test_log_of_another_read_is_refused(net, tmp_path):
    m, x, fam = net
    log = tmp_path / LOG_NAME
    ReadLog(log, "0" * 64).start()
    with pytest.raises(ValueError, match="different read"):
        resumable_read(m, x, fam, log_path=log, resume=True, grid=GRID, progress=False)


def test_fingerprint_sees_parameters_data_and_options(net):
    m, x, fam = net
    base = read_fingerprint(m, x, fam, {"grid": GRID})
    assert read_fingerprint(m, x, fam, {"grid": GRID}) == base
    assert read_fingerprint(m, x[:-1], fam, {"grid": GRID}) != base
    assert read_fingerprint(m, x, fam, {"grid": GRID[:-1]}) != base
    m2 = copy.deepcopy(m)
    with torch.no_grad():
        m2[0].weight[0, 0] += 1e-12
    assert read_fingerprint(m2, x, fam, {"grid": GRID}) != base


def test_malformed_middle_line_raises(net, tmp_path):
    m, x, fam = net
    fp = read_fingerprint(m, x, fam, {})
    log = ReadLog(tmp_path / LOG_NAME, fp)
    log.start()
    with open(log.path, "a") as fh:
        fh.write("{not json\n")
        fh.write('{"index": 0}\n')
    with pytest.raises(ValueError, match="line 2 is malformed"):
        log.load()


def test_bad_header_raises(tmp_path):
    path = tmp_path / LOG_NAME
    path.write_text('{"kind": "something-else"}\n')
    with pytest.raises(ValueError, match="not a 'neuromanifold-read-log' header"):
        ReadLog(path, "x").load()


def test_log_of_another_version_raises(tmp_path):
    from neuromanifold.report.resume import LOG_KIND, LOG_VERSION

    path = tmp_path / LOG_NAME
    path.write_text(json.dumps({"kind": LOG_KIND, "version": 1, "fingerprint": "x"}) + "\n")
    with pytest.raises(
        ValueError, match=rf"read-log version 1 and this library writes version {LOG_VERSION}"
    ):
        ReadLog(path, "x").load()


@pytest.mark.parametrize("old", [15, 16, 17, 18, 19])
def test_a_log_written_before_the_mirrored_side_and_loss_checks_is_refused(tmp_path, old):
    """Version 15 logs hold records read without the mirrored-side checks (one_sided, flipped)
    and with snap='auto' replacing a live read by an unresolved snapped one: resuming one would
    mix them with new records (s20 audit AP #1: a resumed report said 'unresolved' where a fresh
    read says 'live'). Version 16 records lack the labelled-loss check (info['loss_along_u']);
    version 17 ones flagged categorical records by the normal rule alone (s22 audit MIN #1);
    version 18 sweeps lack their base_shift (s22 trial LM #2); version 19 categorical records
    cut at Bernstein's bound where the exact Chernoff cut is smaller (s23 audit TAIL #2)."""
    from neuromanifold.report.resume import LOG_KIND

    path = tmp_path / LOG_NAME
    path.write_text(json.dumps({"kind": LOG_KIND, "version": old, "fingerprint": "x"}) + "\n")
    with pytest.raises(
        ValueError, match=rf"read-log version {old} and this library writes version {LOG_VERSION}"
    ):
        ReadLog(path, "x").load()


def test_header_that_is_not_json_raises(tmp_path):
    path = tmp_path / LOG_NAME
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1 is not a read-log header: Expecting value"):
        ReadLog(path, "x").load()


def test_finished_record_of_another_candidate_raises(net, uninterrupted):
    m, x, fam = net
    rec = uninterrupted.directions[0]
    wrong = dataclasses.replace(rec, detector="kfac-A")
    with pytest.raises(ValueError, match="belongs to a different read"):
        read(m, x, fam, grid=GRID, progress=False, finished={0: (wrong, 0)})


def test_resumable_read_rejects_hook_options(net, tmp_path):
    m, x, fam = net
    with pytest.raises(TypeError, match="sets 'finished' itself"):
        resumable_read(m, x, fam, log_path=tmp_path / LOG_NAME, finished={})
    with pytest.raises(TypeError, match="sets 'on_direction' itself"):
        resumable_read(m, x, fam, log_path=tmp_path / LOG_NAME, on_direction=print)


def test_resumable_read_rejects_options_that_are_not_json(net, tmp_path):
    m, x, fam = net
    with pytest.raises(
        TypeError,
        match=r"read options must be JSON-serialisable to fingerprint them: .*object",
    ):
        resumable_read(m, x, fam, log_path=tmp_path / LOG_NAME, grid=object())
    assert not (tmp_path / LOG_NAME).exists()  # rejected before any log is written


def test_a_read_refused_by_its_input_checks_leaves_the_old_log(net, tmp_path) -> None:
    """Audit s11 #4: the log was replaced before read's input checks ran, so a run with NaN data
    left an empty log in place of a finished one. It is now written from the first direction."""
    m, x, fam = net
    log = tmp_path / LOG_NAME
    resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False)
    before = log.read_bytes()
    bad = x.clone()
    bad[3, 0] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or Inf values \(first in sample 3\)"):
        resumable_read(m, bad, fam, log_path=log, grid=GRID, progress=False)
    assert log.read_bytes() == before
    # a read with nothing left to read still leaves a (complete) log
    empty = tmp_path / "none.jsonl"
    resumable_read(m, x, fam, log_path=empty, grid=GRID, progress=False, max_directions=0)
    assert json.loads(empty.read_text().splitlines()[0])["kind"] == "neuromanifold-read-log"


def test_a_read_killed_for_memory_resumes_with_a_budget(net, uninterrupted, tmp_path, monkeypatch):
    """User trial I #3: the budget (like the device and the progress bar) only sizes the passes,
    but it was fingerprinted, so rerunning an interrupted read with --max-memory was refused."""
    m, x, fam = net
    log = tmp_path / LOG_NAME
    original_append = ReadLog.append

    def append_then_stop(self, index, record, n_passes):
        original_append(self, index, record, n_passes)
        raise _Stop

    monkeypatch.setattr(ReadLog, "append", append_then_stop)
    with pytest.raises(_Stop):
        resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False)
    monkeypatch.setattr(ReadLog, "append", original_append)
    calls = _count_reads(monkeypatch)
    resumed = resumable_read(
        m, x, fam, log_path=log, resume=True, grid=GRID, progress=False, max_memory=2**30
    )
    assert len(calls) == N_DEAD - 1  # the finished direction was reused
    assert [(d.layers, d.klass, d.k) for d in resumed.directions] == [
        (d.layers, d.klass, d.k) for d in uninterrupted.directions
    ]


def test_a_refused_log_names_what_differs(net, tmp_path):
    m, x, fam = net
    log = tmp_path / LOG_NAME
    resumable_read(m, x, fam, log_path=log, grid=GRID, progress=False, max_directions=1)
    with pytest.raises(ValueError, match=r"differing: options max_directions \(1 → 2\)"):
        resumable_read(
            m, x, fam, log_path=log, resume=True, grid=GRID, progress=False, max_directions=2
        )
    with pytest.raises(ValueError, match=r"differing: data\)"):
        resumable_read(m, x[:-1], fam, log_path=log, resume=True, grid=GRID, max_directions=1)


def test_the_log_of_a_data_parallel_read_resumes_in_one_process(tmp_path) -> None:
    """s16 trial Y #3: under torchrun, rank 0 logged its shard's fingerprint, so the single-process
    --resume of the log (the only kind allowed) said 'differing: data' for the same data."""
    import os
    import shutil
    import subprocess
    import sys

    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["read", "--model", "zoo:planted-mlp", "--out", str(tmp_path / "o")]
    args += ["--max-directions", "1"]
    two = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "neuromanifold", *args]
    done = subprocess.run(two, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    again = [sys.executable, "-m", "neuromanifold", *args, "--resume"]
    resumed = subprocess.run(again, capture_output=True, text=True, timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "different read" not in resumed.stderr
