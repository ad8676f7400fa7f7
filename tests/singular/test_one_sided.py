"""A genuine read whose mirrored side is flat says so (s20 trial AO #1).

The cell ``y = a·ReLU(b x)`` at ``a = b = 0`` with inputs ``x > 0`` reads order 2 along the
diagonal ``u = (1, 1)/√2`` and flat along ``−u``: ``K(a, b) = a²b²E[x²]·1{b > 0}`` vanishes on the
open half-plane ``b < 0``. The sweep runs along ``t > 0`` only, so the read checks the mirrored
points ``θ_b − t·u`` of its window and records ``info["one_sided"]``; inputs on both sides of 0
(ReLU) and a tanh unit (either inputs) keep ``F(−t) = F(t)`` and get no such key.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular import Gaussian, directional_fisher, read_direction
from neuromanifold.singular.classify import FLOOR_MARGIN
from neuromanifold.singular.detectors.base import Candidate
from neuromanifold.singular.read_candidate import (
    MIRROR_TOP_POINTS,
    one_sided_check,
    read_candidate,
)
from neuromanifold.singular.reading import Reading

N = 256
WINDOW_REL = 1e-12
"""Relative agreement of the recorded t and F(+t) with the sweep's own values (float64 copies)."""


def _cell(act: nn.Module) -> nn.Module:
    model = nn.Sequential(nn.Linear(1, 1, bias=False), act, nn.Linear(1, 1, bias=False)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model.eval()


def _inputs(one_sided: bool) -> torch.Tensor:
    x = torch.randn(N, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return x.abs() if one_sided else x


def _diagonal(s1: float, s2: float) -> dict[str, torch.Tensor]:
    h = 1 / math.sqrt(2)
    return {
        "0.weight": torch.tensor([[s1 * h]], dtype=torch.float64),
        "2.weight": torch.tensor([[s2 * h]], dtype=torch.float64),
    }


def _read_one(model: nn.Module, x: torch.Tensor) -> Reading:
    return read(model, x, Gaussian(), progress=False)


def test_relu_with_one_sided_inputs_records_the_flat_mirror() -> None:
    reading = _read_one(_cell(nn.ReLU()), _inputs(one_sided=True))
    (rec,) = reading.directions
    assert (rec.detector, rec.klass, rec.k) == ("duality", "genuine_singularity", 2)  # as read
    side = rec.info["one_sided"]
    assert set(side) == {"t", "F_plus", "F_minus"}
    cut = FLOOR_MARGIN * rec.sweep["floor"]
    assert all(f <= cut for f in side["F_minus"]), side["F_minus"]
    assert all(f > cut for f in side["F_plus"]), side["F_plus"]
    # the window's own t and swept F (θ_b + t·u) are the ones compared
    t_all, f_all = rec.sweep["t"], rec.sweep["F"]
    i0 = t_all.index(side["t"][0])
    n = len(side["t"])
    assert n >= 6 and side["t"][0] == pytest.approx(rec.window[0], rel=WINDOW_REL)
    assert side["t"][-1] == pytest.approx(rec.window[1], rel=WINDOW_REL)
    assert side["F_plus"] == pytest.approx(f_all[i0 : i0 + n], rel=WINDOW_REL)
    assert "F vanishes along −u" in rec.reason and "local λ there is 0" in rec.reason
    assert rec.reason.startswith("order k = 2")  # the classification's reason is kept


@pytest.mark.parametrize(
    ("act", "one_sided"),
    [(nn.ReLU(), False), (nn.Tanh(), True), (nn.Tanh(), False)],
    ids=["relu-symmetric-inputs", "tanh-positive-inputs", "tanh-symmetric-inputs"],
)
def test_two_sided_deaths_get_no_one_sided_key(act: nn.Module, one_sided: bool) -> None:
    reading = _read_one(_cell(act), _inputs(one_sided))
    (rec,) = reading.directions
    assert (rec.klass, rec.k) == ("genuine_singularity", 2)
    assert "one_sided" not in rec.info
    assert "vanishes along −u" not in rec.reason


def test_the_reading_round_trips_with_the_key() -> None:
    reading = _read_one(_cell(nn.ReLU()), _inputs(one_sided=True))
    back = Reading.from_dict(json.loads(json.dumps(reading.to_dict())))
    assert back == reading
    assert back.directions[0].info["one_sided"] == reading.directions[0].info["one_sided"]


def test_read_candidate_counts_the_mirror_passes_and_keeps_the_class(
    candidate_kwargs: dict,
) -> None:
    """Along +u: genuine k = 2 with the key, the window's t added to the passes. Along −u the
    sweep is flat; its mirrored side (`flat_side_check`, the sweep's top t) is not, so −(−u) is
    read and reported (``info["flipped"]``): the class no longer depends on the detector's sign."""
    model, x = _cell(nn.ReLU()), _inputs(one_sided=True)
    params = {k: v.detach() for k, v in model.named_parameters()}
    plus, n_plus = read_candidate(
        Candidate(("0", "2"), "duality", _diagonal(1, 1)),
        model,
        params,
        x,
        Gaussian(),
        **candidate_kwargs,
    )
    minus, n_minus = read_candidate(
        Candidate(("0", "2"), "duality", _diagonal(-1, -1)),
        model,
        params,
        x,
        Gaussian(),
        **candidate_kwargs,
    )
    assert (plus.klass, plus.k) == ("genuine_singularity", 2)
    sweep = len(plus.sweep["t"]) + 1  # one sweep: grid points + the floor pass
    assert n_plus == sweep + len(plus.info["one_sided"]["t"])
    assert (minus.klass, minus.k) == ("genuine_singularity", 2)
    assert minus.info["flipped"]["given_sign"]["class"] == "flat_gauge"
    assert len(minus.info["flipped"]["t"]) == MIRROR_TOP_POINTS
    assert min(minus.info["flipped"]["F_minus"]) > 0.0
    assert minus.sweep["F"] == plus.sweep["F"]  # the same read as along +u
    assert minus.info["one_sided"] == plus.info["one_sided"]
    # the flat sweep, its top-t check, the sweep along +u and that read's own mirrored check
    assert n_minus == sweep + MIRROR_TOP_POINTS + n_plus


def test_a_flat_read_flat_on_both_sides_is_not_flipped(candidate_kwargs: dict) -> None:
    """The outgoing weight of the cell's unit, whose incoming weight is 0 (its output is 0 on
    every input): flat along ±u, so only the top-t check is added."""
    model, x = _cell(nn.ReLU()), _inputs(one_sided=False)
    params = {k: v.detach() for k, v in model.named_parameters()}
    u = {"2.weight": torch.ones(1, 1, dtype=torch.float64)}
    rec, n = read_candidate(
        Candidate(("2",), "kfac-A", u), model, params, x, Gaussian(), **candidate_kwargs
    )
    assert rec.klass == "flat_gauge"
    assert "flipped" not in rec.info and "mirrored_read" not in rec.info
    assert n == len(rec.sweep["t"]) + 1 + MIRROR_TOP_POINTS


def test_the_check_starts_from_the_snapped_base_point() -> None:
    """At θ0 = δ·u (δ = 1e-2, above the window's t) a snapped read sweeps from 0: its mirrored
    points 0 − t·u switch the unit off, whereas θ0 − t·u would still have it on."""
    model, x = _cell(nn.ReLU()), _inputs(one_sided=True)
    u = _diagonal(1, 1)
    delta = 1e-2
    params = {k: (delta * u[k]).clone() for k in u}
    r = read_direction(model, params, u, x, Gaussian(), snap=True)
    assert r.snapped and (r.klass.value, r.k) == ("genuine_singularity", 2)
    assert r.fit.t_window[1] < delta
    side, passes = one_sided_check(model, params, u, r, x, Gaussian(), chunk=None, t_batch=8)
    assert side is not None and passes == len(side["t"])
    # from the unsnapped θ0 the same t would land on the live side: the base point matters
    t = side["t"][-1]
    at_theta0 = {k: params[k] - t * u[k] for k in u}
    f_theta0 = float(directional_fisher(model, at_theta0, u, x, Gaussian()))
    assert f_theta0 > FLOOR_MARGIN * r.sweep.floor


def test_a_flat_read_at_a_noise_plateau_is_not_read_again(candidate_kwargs: dict) -> None:
    """A kfac-A-like direction orthogonal to inputs that lie on a line (x₂ = 3x₁) up to the
    float32 rounding of its entries: u·x ≈ 1e-8·x₁, so F sits on a constant plateau ≈ 2e-18, far
    above the floor but below the live threshold (flat by the live rule). The mirrored side has
    the same plateau; before `MIRROR_RATIO`, its check fired on every such read and swept −u for
    nothing (two or three `mirrored_read` records per ViT of the demo)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)).double().eval()
    a = torch.randn(64, 1, dtype=torch.float64)  # after the model's draws: seed 0's sequence
    x = torch.cat([a, 3 * a], 1) * 0.7
    params = {k: v.detach() for k, v in model.named_parameters()}
    w = torch.zeros(3, 2, dtype=torch.float64)
    w[0] = (torch.tensor([3.0, -1.0]) / math.sqrt(10.0)).double()  # float32-rounded entries
    rec, n = read_candidate(
        Candidate(("0",), "kfac-A", {"0.weight": w}),
        model,
        params,
        x,
        Gaussian(),
        **candidate_kwargs,
    )
    assert rec.klass == "flat_gauge"
    assert max(rec.sweep["F"]) > 1e6 * rec.sweep["floor"]  # a plateau, not exact zeros
    assert "flipped" not in rec.info and "mirrored_read" not in rec.info
    assert n == len(rec.sweep["t"]) + 1 + MIRROR_TOP_POINTS


def test_a_flipped_record_keeps_the_given_signs_snap_reads_with_that_sign(
    candidate_kwargs: dict,
) -> None:
    """Two ReLU units, unit 0 dead and the checkpoint 0.01 off the node death along the
    diagonal: snap='auto' reads the given sign twice (unsnapped, then snapped, both flat); the
    flip reads −u. Those snap summaries describe the given sign, so they sit under
    ``flipped["given_sign"]``, not beside the reported −u read (s20 audit AP, suggestion)."""
    x = torch.randn(256, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64).abs()
    model = nn.Sequential(nn.Linear(1, 2, bias=False), nn.ReLU(), nn.Linear(2, 1, bias=False))
    model = model.double().eval()
    h = 1.0 / math.sqrt(2.0)

    def diag(s: float) -> dict[str, torch.Tensor]:
        a, b = torch.zeros(2, 1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)
        a[0, 0] = b[0, 0] = s * h
        return {"0.weight": a, "2.weight": b}

    live = {"0.weight": torch.tensor([[0.0], [1.0]]), "2.weight": torch.tensor([[0.0, 1.0]])}
    params = {k: v.double() - 0.01 * diag(1.0)[k] for k, v in live.items()}
    kwargs = {**candidate_kwargs, "snap": "auto", "project_gauges": True}
    rec, _ = read_candidate(
        Candidate(("0", "2"), "duality", diag(-1.0)), model, params, x, Gaussian(), **kwargs
    )
    assert (rec.klass, rec.k) == ("genuine_singularity", 2) and "one_sided" in rec.info
    given = rec.info["flipped"]["given_sign"]
    assert given["class"] == "flat_gauge"
    # the given sign's first read is flat at the floor below the offset, so it stands and the
    # snapped one is its note (read_candidate._flat_below_offset, s26 trial CNN #6)
    assert given["snapped_read"]["class"] == "flat_gauge" and "unsnapped" not in given
    assert "unsnapped" not in rec.info and "snapped_read" not in rec.info
