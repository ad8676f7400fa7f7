"""The read, its K-FAC factor pass and its probe-rank count give the same result in every grad
mode of the caller: plain, under ``torch.no_grad()`` and under ``torch.inference_mode()`` (their
backward passes run under ``inference_mode(False)`` and ``enable_grad()``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.probe_rank import g_rows

D = torch.float64

MODES: dict[str, Callable[[], AbstractContextManager]] = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


def _dead_unit_mlp() -> tuple[nn.Module, torch.Tensor]:
    """The trial's MLP (J#1): unit 2 of the middle layer is dead (zero in-row, bias and
    out-column), which the read finds as a duality chain on blocks '2' and '4'."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    m = m.to(D).eval()
    with torch.no_grad():
        m[2].weight[2] = 0
        m[2].bias[2] = 0
        m[4].weight[:, 2] = 0
    return m, torch.randn(64, 4, dtype=D)


def test_read_is_the_same_reading_in_every_grad_mode() -> None:
    m, x = _dead_unit_mlp()
    plain = read(m, x, Categorical(), progress=False)
    dead = [d for d in plain.directions if d.klass == "genuine_singularity"]
    assert [(d.layers, d.detector, d.k) for d in dead] == [(("2", "4"), "duality", 2)]
    assert plain.meta["n_backward_passes"] > 1  # factor pass + probe-rank pass both ran
    for name, mode in MODES.items():
        with mode():
            got = read(m, x, Categorical(), progress=False)
        # every record, sweep, note and count bitwise: the same code path runs in every mode
        assert got.to_dict() == plain.to_dict(), name


def test_read_of_a_model_and_data_made_under_inference_mode() -> None:
    with torch.inference_mode():
        m, x = _dead_unit_mlp()
    assert x.is_inference() and all(p.is_inference() for p in m.parameters())
    plain_m, plain_x = _dead_unit_mlp()
    want = read(plain_m, plain_x, Categorical(), progress=False).to_dict()
    assert read(m, x, Categorical(), progress=False).to_dict() == want
    with torch.inference_mode():
        assert read(m, x, Categorical(), progress=False).to_dict() == want


@pytest.mark.parametrize("data_mode", ["plain", "inference_mode"])
def test_kfac_factors_and_g_rows_are_the_same_in_every_grad_mode(data_mode: str) -> None:
    made = torch.inference_mode() if data_mode == "inference_mode" else contextlib.nullcontext()
    with made:
        m, x = _dead_unit_mlp()
    want = kfac_factors(m, x, Categorical())
    want_rows = g_rows(m, x, Categorical(), want)
    assert all(float(bf.G.abs().max()) > 0 for bf in want.values())  # G is a real backward
    for name, mode in MODES.items():
        with mode():
            got = kfac_factors(m, x, Categorical())
            got_rows = g_rows(m, x, Categorical(), got)
        assert list(got) == list(want), name
        for n, bf in want.items():
            assert torch.equal(got[n].A, bf.A), (name, n)
            assert torch.equal(got[n].G, bf.G), (name, n)  # was G = 0 under inference_mode
        assert got.n_backward_passes == want.n_backward_passes, name
        assert got_rows == want_rows, name
