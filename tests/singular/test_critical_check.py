"""The whole-gradient check (`neuromanifold.singular.critical_check`): the split-sample statistic
against its per-sample-Jacobian oracle, its calibration at a true parameter, its power away from
one, and its place in `read` and the assembly."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from neuromanifold.singular import distributed as dp
from neuromanifold.singular.assembly import assemble_from_reading
from neuromanifold.singular.critical_check import (
    NULL_RATE,
    critical_check,
    critical_check_reference,
    critical_note,
    split_halves,
)
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.minimum_check import MIN_Z, loss_along
from neuromanifold.singular.read import read
from neuromanifold.singular.reading import Reading

RTOL = 1e-10  # forward mode against per-sample reverse-mode Jacobians, float64
CHUNK_RTOL = 1e-12  # the same sums in other chunks
DRAWS = 300  # label draws at a true parameter
MEAN_TOL = 4 / math.sqrt(DRAWS)  # 4 standard errors of the mean of DRAWS standard normals
STD_TOL = 4 / math.sqrt(2 * DRAWS)  # and of their standard deviation


def _mlp(seed: int = 0, out: int = 2) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, out)).double()


def _x(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters())


def _close(a: dict, b: dict, rtol: float) -> None:
    assert a["n_direction"] == b["n_direction"] and a["n_test"] == b["n_test"]
    assert a["not_critical"] == b["not_critical"]
    for key in ("z", "slope", "slope_se", "gradient_norm"):
        assert a[key] == pytest.approx(b[key], rel=rtol), key


@pytest.mark.parametrize("family", [Gaussian(sigma=0.7), Categorical()])
def test_the_check_matches_its_per_sample_jacobian_oracle(family) -> None:
    model, x = _mlp(), _x(21)
    y = (
        torch.randn(21, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        if isinstance(family, Gaussian)
        else torch.randint(0, 2, (21,), generator=torch.Generator().manual_seed(2))
    )
    fast = critical_check(model, _params(model), (x, y), family)
    _close(fast, critical_check_reference(model, _params(model), (x, y), family), RTOL)
    assert (fast["n_direction"], fast["n_test"]) == (11, 10)  # even and odd indices
    for chunk in (1, 4):
        _close(
            critical_check(model, _params(model), (x, y), family, chunk_size=chunk),
            fast,
            CHUNK_RTOL,
        )


def test_sequence_logits_match_the_oracle() -> None:
    """Categorical logits (N, T, C): the loss and the quadratic form sum over positions."""

    class Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 4 * 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.lin(x)).reshape(x.shape[0], 4, 3)

    torch.manual_seed(0)
    model, x = Seq().double(), _x(9)
    y = torch.randint(0, 3, (9, 4), generator=torch.Generator().manual_seed(3))
    fast = critical_check(model, _params(model), (x, y), Categorical())
    _close(fast, critical_check_reference(model, _params(model), (x, y), Categorical()), RTOL)


@pytest.mark.parametrize("family", [Gaussian(), Categorical()])
def test_z_is_a_standard_normal_at_a_true_parameter(family) -> None:
    """Labels drawn from the model at θ0: over `DRAWS` draws z has mean 0 and standard deviation
    1 within 4 standard errors, and the one-sided threshold `MIN_Z` flags none."""
    model, x = _mlp(), _x(40)
    with torch.no_grad():
        out = model(x)
    gen = torch.Generator().manual_seed(5)
    zs = []
    for _ in range(DRAWS):
        if isinstance(family, Gaussian):
            y = out + torch.randn(out.shape, generator=gen, dtype=torch.float64)
        else:
            y = torch.multinomial(torch.softmax(out, -1), 1, generator=gen)[:, 0]
        check = critical_check(model, _params(model), (x, y), family)
        assert not check["not_critical"]
        zs.append(check["z"])
    z = torch.tensor(zs)
    assert abs(float(z.mean())) < MEAN_TOL
    assert abs(float(z.std()) - 1.0) < STD_TOL
    assert NULL_RATE == pytest.approx(3.17e-5, rel=1e-2)


def _teacher_data(n: int, seed: int = 7) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    teacher, x = _mlp(seed=3), _x(n, seed)
    with torch.no_grad():
        y = teacher(x) + 0.1 * torch.randn(
            n, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
        )
    return teacher, x, y


def test_a_point_off_the_minimum_is_flagged_and_the_minimum_is_not() -> None:
    """Data from a teacher with noise σ = 0.1: the empirical minimum (L-BFGS from the teacher)
    passes; the teacher moved by 0.2 along a random direction is flagged far beyond the
    threshold."""
    _, x, y = _teacher_data(400)
    family = Gaussian(sigma=0.1)
    fitted = _mlp(seed=3)
    opt = torch.optim.LBFGS(
        fitted.parameters(),
        lr=1,
        max_iter=500,
        tolerance_grad=1e-12,
        tolerance_change=0,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = ((fitted(x) - y) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    at_min = critical_check(fitted, _params(fitted), (x, y), family)
    assert not at_min["not_critical"] and abs(at_min["z"]) < MIN_Z
    moved = _mlp(seed=3)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    off = critical_check(moved, _params(moved), (x, y), family)
    assert off["not_critical"] and off["z"] > 5 * MIN_Z
    note = critical_note(off)
    assert note.startswith("θ0 is not a critical point of the labelled probe loss")
    assert f"z = {off['z']:.1f}" in note


def test_untestable_cases_give_no_z_and_no_flag() -> None:
    model, x = _mlp(), _x(6)
    with torch.no_grad():
        y = model(x)  # zero residual: the gradient over the even half is exactly 0
    check = critical_check(model, _params(model), (x, y), Gaussian())
    assert check["z"] is None and not check["not_critical"] and check["gradient_norm"] == 0.0
    one = critical_check(model, _params(model), (x[:1], y[:1] + 1.0), Gaussian())
    assert one["n_test"] == 0 and one["z"] is None and not one["not_critical"]
    assert critical_note(check) == "" and critical_note(None) == ""
    assert critical_note({"error": "RuntimeError: boom"}).startswith(
        "the whole-gradient check could not run (RuntimeError: boom)"
    )


def test_the_check_needs_labels() -> None:
    model, x = _mlp(), _x(4)
    with pytest.raises(ValueError, match=r"^critical_check needs labelled data \(x, y\)"):
        critical_check(model, _params(model), x, Gaussian())


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_labels_are_refused_by_both_checks(bad: float) -> None:
    """s23 audit TAIL #1: a NaN label gave z = NaN, unflagged, here and a failed eigh in
    `loss_along`; both now refuse it as `read` does."""
    model, x = _mlp(), _x(10)
    with torch.no_grad():
        y = model(x) + 0.1
    y[4, 1] = bad
    said = r"^data labels y hold NaN or Inf values \(first in sample 4\)$"
    with pytest.raises(ValueError, match=said):
        critical_check(model, _params(model), (x, y), Gaussian())
    u = {"2.bias": torch.ones(2, dtype=torch.float64)}
    with pytest.raises(ValueError, match=said):
        loss_along(model, _params(model), u, (x, y), Gaussian())


def test_the_split_follows_global_indices() -> None:
    a, b = split_halves(5, offset=3)
    assert a.tolist() == [1, 3] and b.tolist() == [0, 2, 4]
    a, b = split_halves(4)
    assert a.tolist() == [0, 2] and b.tolist() == [1, 3]


def test_read_records_the_check_and_the_assembly_notes_a_flag() -> None:
    _, x, y = _teacher_data(60)
    moved = _mlp(seed=3)
    with torch.no_grad():
        moved[2].bias.add_(torch.tensor([1.0, -1.0], dtype=torch.float64))
    reading = read(moved, (x, y), Gaussian(sigma=0.1), max_directions=2, progress=False)
    check = reading.meta["critical_check"]
    expected = critical_check(moved, _params(moved), (x, y), Gaussian(sigma=0.1))
    _close(check, expected, CHUNK_RTOL)
    assert check["not_critical"]
    assert critical_note(check) in reading.note
    again = Reading.from_dict(reading.to_dict())
    assert again.meta["critical_check"] == check
    assert critical_note(check) in assemble_from_reading(again).notes
    unlabelled = read(moved, x, Gaussian(sigma=0.1), max_directions=0, progress=False)
    assert unlabelled.meta["critical_check"] is None
    assert "critical point" not in " ".join(assemble_from_reading(unlabelled).notes)


def labelled_seven() -> SimpleNamespace:
    """Factory for `launch_local`: 7 samples, shards [0, 3) and [3, 7): rank 1's first sample
    has an odd global index."""
    _, x, y = _teacher_data(7)
    return SimpleNamespace(model=_mlp(seed=3), data=(x, y), family=Gaussian(sigma=0.1))


def test_two_processes_give_the_one_process_check() -> None:
    case = labelled_seven()
    one = read(case.model, case.data, case.family, max_directions=0, progress=False)
    two = dp.launch_local(
        2,
        "test_critical_check:labelled_seven",
        read_kwargs={"progress": False, "max_directions": 0},
    )
    for rank in two:  # every rank has the all-reduced check
        _close(rank["reading"]["meta"]["critical_check"], one.meta["critical_check"], CHUNK_RTOL)
