"""Resumable reads and labels: the read log's fingerprint covers the labels (s21 trial AS #3).

Before, it hashed the inputs x only, so a log written by a read with labels was resumed by a
read with other labels, or with none (and the other way round), and its records kept the
labelled-loss checks (``info["loss_along_u"]``) of the labels that wrote it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.cli import app
from neuromanifold.report.resume import LOG_NAME, fingerprint_parts, output_probe, resumable_read
from neuromanifold.singular import read_candidate as candidate_mod

GRID = np.logspace(-3, 0, 14).tolist()
NOISE = 0.1  # label noise around the model's own outputs
OPTIONS = {"grid": GRID, "progress": False, "max_directions": 1}


@pytest.fixture(scope="module")
def net():
    """planted_mlp on 48 samples, with float64 Gaussian labels and a second draw of them."""
    p = planted_mlp(n=48, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        mean = p.model(p.data)
    y = mean + NOISE * torch.randn(mean.shape, dtype=torch.float64, generator=gen)
    y_other = mean + NOISE * torch.randn(mean.shape, dtype=torch.float64, generator=gen)
    return p.model, p.data, y, y_other, p.family


def _header(log: Path) -> dict:
    return json.loads(log.read_text().splitlines()[0])


def test_a_log_written_with_labels_refuses_other_labels_and_none(net, tmp_path, monkeypatch):
    m, x, y, y_other, fam = net
    log = tmp_path / LOG_NAME
    first = resumable_read(m, (x, y), fam, log_path=log, **OPTIONS)
    assert "loss_along_u" in first.directions[0].info
    with pytest.raises(ValueError, match=r"different read .*differing: labels\)"):
        resumable_read(m, (x, y_other), fam, log_path=log, resume=True, **OPTIONS)
    with pytest.raises(ValueError, match=r"differing: labels \(given → none\)\)"):
        resumable_read(m, x, fam, log_path=log, resume=True, **OPTIONS)
    # the same labels resume, reusing the logged direction: nothing is swept again
    swept: list[int] = []
    original = candidate_mod.read_direction

    def counting(*args, **kwargs):
        swept.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(candidate_mod, "read_direction", counting)
    again = resumable_read(m, (x, y), fam, log_path=log, resume=True, **OPTIONS)
    assert swept == []
    assert again == first


def test_a_log_written_without_labels_refuses_a_resume_with_labels(net, tmp_path):
    m, x, y, _, fam = net
    log = tmp_path / LOG_NAME
    plain = resumable_read(m, x, fam, log_path=log, **OPTIONS)
    assert "loss_along_u" not in plain.directions[0].info
    assert _header(log)["parts"]["labels"] is None
    with pytest.raises(ValueError, match=r"differing: labels \(none → given\)\)"):
        resumable_read(m, (x, y), fam, log_path=log, resume=True, **OPTIONS)


def test_the_fingerprint_sees_each_label_value_and_dtype(net):
    m, x, y, _, fam = net
    base = fingerprint_parts(m, (x, y), fam, {})
    assert base["labels"] is not None and base["data"] == fingerprint_parts(m, x, fam, {})["data"]
    nudged = y.clone()
    nudged[-1, -1] += 1e-12  # the last entry, one ulp-scale change
    assert fingerprint_parts(m, (x, nudged), fam, {})["labels"] != base["labels"]
    assert fingerprint_parts(m, (x, y.float()), fam, {})["labels"] != base["labels"]
    assert fingerprint_parts(m, (x, y.clone()), fam, {})["labels"] == base["labels"]


def test_a_data_parallel_log_fingerprints_the_whole_sets_labels(net, tmp_path):
    """Rank 0 reads its shard and logs under the whole probe set (``fingerprint_data``): the
    whole set's labels are in the fingerprint, so a single-process resume with the same labels
    is accepted and one with other labels refused."""
    m, x, y, y_other, fam = net
    log = tmp_path / LOG_NAME
    half = x.shape[0] // 2
    resumable_read(m, (x[:half], y[:half]), fam, log_path=log, fingerprint_data=(x, y), **OPTIONS)
    parts = dict(_header(log)["parts"])
    assert parts.pop("outputs") == output_probe(m, (x, y))  # the whole set's first samples
    assert parts == fingerprint_parts(m, (x, y), fam, OPTIONS)
    resumable_read(m, (x, y), fam, log_path=log, resume=True, **OPTIONS)  # accepted
    with pytest.raises(ValueError, match=r"differing: labels\)"):
        resumable_read(m, (x, y_other), fam, log_path=log, resume=True, **OPTIONS)


@pytest.mark.parametrize("labelled", ["data", "fingerprint_data"])
def test_fingerprint_data_without_the_labels_of_data_is_refused(net, tmp_path, labelled):
    m, x, y, _, fam = net
    data, whole = ((x, y), x) if labelled == "data" else (x, (x, y))
    with pytest.raises(ValueError, match=r"fingerprint_data must be an \(x, y\) pair exactly when"):
        resumable_read(
            m, data, fam, log_path=tmp_path / LOG_NAME, fingerprint_data=whole, **OPTIONS
        )
    assert not (tmp_path / LOG_NAME).exists()


def test_the_cli_refuses_to_resume_a_labelled_log_without_labels(tmp_path):
    """The CLI fingerprints the probe set it loaded (``x_all``): a pair (x, y) when the file
    holds labels."""
    p = planted_mlp()
    with torch.no_grad():
        mean = p.model(p.data)
    gen = torch.Generator().manual_seed(3)
    y = mean + NOISE * torch.randn(mean.shape, dtype=torch.float64, generator=gen)
    torch.save((p.data, y), tmp_path / "xy.pt")
    torch.save(p.data, tmp_path / "x.pt")
    runner = CliRunner()
    base = ["read", "--model", "zoo:planted-mlp", "--max-directions", "1"]
    base += ["--out", str(tmp_path / "o")]
    done = runner.invoke(app, [*base, "--data", str(tmp_path / "xy.pt")], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    again = [*base, "--data", str(tmp_path / "x.pt"), "--resume"]
    refused = runner.invoke(app, again, env={"COLUMNS": "300"})
    assert refused.exit_code == 2, refused.output
    assert "differing: labels (given → none)" in refused.stderr
