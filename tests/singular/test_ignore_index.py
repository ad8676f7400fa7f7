"""`Categorical(ignore_index=-100)`: positions whose label is the ignore index are left out of the
labelled statistics (s22 trial LM #3 asked for it; before, such labels were refused).

The oracle is a second model that returns only the labelled positions' logits: a sequence model
whose samples each have ``K`` labelled positions out of ``T``, read with the ignore index, must
give the labelled checks (`loss_along`, `critical_check`) and the empirical Fisher of the model
that gathers those ``K`` positions, read without one. That holds only if the null statistics
(variance, score bound, the exact cut's cumulant generating function) leave the unlabelled
positions out too, not only the loss. The per-sample loss is checked against torch's own
``cross_entropy(ignore_index=...)``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.singular import (
    Categorical,
    directional_fisher,
    directional_fisher_reference,
    family_from_dict,
)
from neuromanifold.singular.critical_check import critical_check, critical_check_reference
from neuromanifold.singular.minimum_check import loss_along, loss_along_reference
from neuromanifold.singular.read import read

D = torch.float64
N, T, K, D_IN, H, C = 12, 5, 3, 4, 6, 5  # samples, positions, labelled per sample, widths
IGNORE = -100
# the same sums over 5 positions (2 of them 0) and over 3: equal up to summation-order rounding
RTOL = 1e-10
ATOL = 1e-13


class SeqNet(nn.Module):
    """``x (N, T, D_IN + 1)`` → logits ``(N, T, C)`` of a per-position tanh MLP on the first
    ``D_IN`` channels; with ``gather``, only the ``K`` positions whose last channel is 1, in
    position order: ``(N, K, C)`` (the positions travel with the samples, so chunks agree)."""

    def __init__(self, gather: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(D_IN, H).to(D)
        self.b = nn.Linear(H, C).to(D)
        self.gather = gather

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.b(torch.tanh(self.a(x[..., :D_IN])))
        if not self.gather:
            return out
        keep = (x[..., D_IN] > 0.5).to(torch.int64)
        idx = torch.argsort(-keep, dim=1, stable=True)[:, :K]
        return out.gather(1, idx.unsqueeze(-1).expand(-1, -1, C))


def _data(adversarial: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, y_full, y_kept)``: ``K`` labelled positions per sample, the others ``IGNORE``;
    the labels drawn from the model (``adversarial``: each the model's least likely class, so
    that θ0 is far from a minimum and the checks flag)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(N, T, D_IN + 1, dtype=D, generator=gen)
    keep = torch.zeros(N, T, dtype=torch.bool)
    for i in range(N):
        keep[i, torch.randperm(T, generator=gen)[:K]] = True
    x[..., D_IN] = keep.to(D)
    with torch.no_grad():
        logits = SeqNet(gather=False)(x)
    if adversarial:
        y = logits.argmin(-1)
    else:
        y = torch.multinomial(torch.softmax(logits, -1).reshape(-1, C), 1, generator=gen)
        y = y.reshape(N, T)
    y_full = torch.where(keep, y, torch.full_like(y, IGNORE))
    y_kept = y[keep].reshape(N, K)  # boolean indexing keeps position order within a row
    return x, y_full, y_kept


def _direction(model: nn.Module, x: torch.Tensor, y_full: torch.Tensor) -> dict[str, torch.Tensor]:
    """The gradient of the labelled loss (computed by torch's ``cross_entropy``): the direction
    along which θ0 is furthest from a minimum."""
    logits = model(x)
    loss = F.cross_entropy(logits.permute(0, 2, 1), y_full, ignore_index=IGNORE, reduction="sum")
    names = [k for k, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return dict(zip(names, grads, strict=True))


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.named_parameters()}


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal structures; floats to ``RTOL``/``ATOL``."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL), (where, a, b)
    else:
        assert a == b, (where, a, b)


# ---------------------------------------------------------------------------------------------
# the family itself


@pytest.mark.parametrize("bad", [0, 3, True, 1.5, -100.0, "-100", -(2**63) - 1])
def test_ignore_index_must_be_a_negative_int64(bad: object) -> None:
    with pytest.raises(ValueError, match=r"ignore_index must be a negative integer"):
        Categorical(ignore_index=bad)  # type: ignore[arg-type]


def test_an_integer_of_another_type_is_stored_as_an_int() -> None:
    """s25 audit IGNORE #3: np.int64(−100) was refused with a message about class indices."""
    import numpy as np

    fam = Categorical(ignore_index=np.int64(IGNORE))  # type: ignore[arg-type]
    assert fam == Categorical(ignore_index=IGNORE) and type(fam.ignore_index) is int
    assert json.dumps(fam.to_dict()) == '{"name": "categorical", "ignore_index": -100}'
    with pytest.raises(ValueError, match=r"got -100.0 of type float"):
        Categorical(ignore_index=-100.0)  # type: ignore[arg-type]


def test_log_likelihood_is_torchs_cross_entropy_with_its_ignore_index() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 7, C, dtype=D, generator=gen)
    y = torch.randint(0, C, (4, 7), generator=gen)
    y[torch.rand(4, 7, generator=gen) < 0.4] = IGNORE
    y[2] = IGNORE  # a sample with no labelled position: log-likelihood 0
    ours = Categorical(ignore_index=IGNORE).log_likelihood(logits, y)
    theirs = -F.cross_entropy(
        logits.permute(0, 2, 1), y, ignore_index=IGNORE, reduction="none"
    ).sum(1)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-14)
    assert float(ours[2]) == 0.0


def test_empirical_quadratic_at_ignored_positions_is_that_of_the_labelled_ones() -> None:
    x, y_full, y_kept = _data(adversarial=False)
    jv = torch.randn(N, T, C, dtype=D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = SeqNet(gather=False)(x)
    keep = y_full != IGNORE
    ours = Categorical(ignore_index=IGNORE).empirical_quadratic(out, jv, y_full)
    kept = Categorical().empirical_quadratic(
        out[keep].reshape(N, K, C), jv[keep].reshape(N, K, C), y_kept
    )
    torch.testing.assert_close(ours, kept, rtol=RTOL, atol=ATOL)


def test_labels_other_than_the_ignore_index_must_still_be_classes() -> None:
    out = torch.zeros(2, 3, C, dtype=D)
    y = torch.tensor([[0, IGNORE, 1], [C, 2, IGNORE]])
    with pytest.raises(ValueError, match=rf"from 0 to {C} \(or be the ignore index -100\)"):
        Categorical(ignore_index=IGNORE).check_labels(out, y)
    other = torch.tensor([[0, -1, 1], [1, 2, IGNORE]])  # −1 is not the ignore index −100
    with pytest.raises(ValueError, match=r"got values from -1 to 2 \(or be the ignore index"):
        Categorical(ignore_index=IGNORE).check_labels(out, other)


def test_without_an_ignore_index_a_negative_label_names_the_option() -> None:
    out = torch.zeros(1, 3, C, dtype=D)
    with pytest.raises(ValueError, match=r"Categorical\(ignore_index=-100\) or --ignore-index"):
        Categorical().log_likelihood(out, torch.tensor([[0, IGNORE, 1]]))


def test_labels_shifted_against_every_positions_logits_get_the_padding_hint() -> None:
    """s30 trial DOCS #1: y = labels[:, 1:] for a model that returns all T positions' logits is
    one position short; the refusal says how to pad it, and the padded labels are accepted."""
    out = torch.zeros(2, 4, C, dtype=D)
    labels = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
    with pytest.raises(ValueError, match=r"pad y's last position with an ignore index") as err:
        Categorical().check_labels(out, labels[:, 1:])
    assert "of shape (2, 4) (the logits' shape without the class axis); got shape (2, 3)" in str(
        err.value
    )
    padded = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE)], 1)
    Categorical(ignore_index=IGNORE).check_labels(out, padded)
    for wrong in (labels[:, :2], labels[:1], labels.float()):  # no shift: no hint
        with pytest.raises(ValueError) as other:
            Categorical().check_labels(out, wrong)
        assert "pad y's last position" not in str(other.value)


def test_the_family_round_trips_through_its_dict() -> None:
    fam = Categorical(ignore_index=IGNORE)
    assert fam.to_dict() == {"name": "categorical", "ignore_index": IGNORE}
    assert family_from_dict(json.loads(json.dumps(fam.to_dict()))) == fam
    assert Categorical().to_dict() == {"name": "categorical"}  # old read logs still match
    assert family_from_dict({"name": "categorical"}) == Categorical()


# ---------------------------------------------------------------------------------------------
# the labelled checks: the full model with the ignore index = the gathered model without it


@pytest.mark.parametrize("adversarial", [False, True], ids=["model-labels", "wrong-labels"])
def test_loss_along_equals_that_of_the_labelled_positions_alone(adversarial: bool) -> None:
    x, y_full, y_kept = _data(adversarial)
    full, kept = SeqNet(gather=False), SeqNet(gather=True)
    u = _direction(full, x, y_full)
    ours = loss_along(full, _params(full), u, (x, y_full), Categorical(ignore_index=IGNORE))
    theirs = loss_along(kept, _params(kept), u, (x, y_kept), Categorical())
    _assert_same(ours, theirs)
    if adversarial:  # the case exercises the flags and the exact cuts, not only the sums
        assert ours["not_critical"] and ours["curved_down"], ours
        assert ours["exact_cuts"] == ["curvature"], ours
    else:
        assert not ours["not_critical"] and not ours["curved_down"], ours


def test_loss_along_with_the_ignore_index_matches_its_oracle() -> None:
    x, y_full, _ = _data(adversarial=True)
    full = SeqNet(gather=False)
    u, fam = _direction(full, x, y_full), Categorical(ignore_index=IGNORE)
    _assert_same(
        loss_along(full, _params(full), u, (x, y_full), fam, chunk_size=5),
        loss_along_reference(full, _params(full), u, (x, y_full), fam),
    )


def test_loss_along_without_masking_the_null_reads_other_statistics() -> None:
    """The check above is not vacuous: the same losses with the unlabelled positions' tangents
    left in the null (a family whose ``labelled_only`` is the identity) give another standard
    error, so the equality above needs the null restricted."""

    class Unmasked(Categorical):
        def labelled_only(self, jv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return jv

    x, y_full, _ = _data(adversarial=False)
    full = SeqNet(gather=False)
    u = _direction(full, x, y_full)
    masked = loss_along(full, _params(full), u, (x, y_full), Categorical(ignore_index=IGNORE))
    unmasked = loss_along(full, _params(full), u, (x, y_full), Unmasked(ignore_index=IGNORE))
    assert math.isclose(masked["slope"], unmasked["slope"], rel_tol=RTOL)  # the loss is masked
    assert unmasked["slope_se"] > 1.1 * masked["slope_se"], (masked, unmasked)


@pytest.mark.parametrize("adversarial", [False, True], ids=["model-labels", "wrong-labels"])
def test_critical_check_equals_that_of_the_labelled_positions_alone(adversarial: bool) -> None:
    x, y_full, y_kept = _data(adversarial)
    full, kept = SeqNet(gather=False), SeqNet(gather=True)
    ours = critical_check(full, _params(full), (x, y_full), Categorical(ignore_index=IGNORE))
    theirs = critical_check(kept, _params(kept), (x, y_kept), Categorical())
    _assert_same(ours, theirs)
    assert ours["not_critical"] == adversarial, ours
    oracle = critical_check_reference(
        full, _params(full), (x, y_full), Categorical(ignore_index=IGNORE)
    )
    _assert_same(ours, oracle)


def test_empirical_fisher_equals_that_of_the_labelled_positions_alone() -> None:
    x, y_full, y_kept = _data(adversarial=False)
    full, kept = SeqNet(gather=False), SeqNet(gather=True)
    u, fam = _direction(full, x, y_full), Categorical(ignore_index=IGNORE)
    ours = directional_fisher(full, _params(full), u, (x, y_full), fam, empirical=True)
    theirs = directional_fisher(kept, _params(kept), u, (x, y_kept), Categorical(), empirical=True)
    oracle = directional_fisher_reference(full, _params(full), u, (x, y_full), fam, empirical=True)
    torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(ours, oracle, rtol=RTOL, atol=ATOL)


def test_no_labelled_position_leaves_nothing_to_test() -> None:
    x, y_full, _ = _data(adversarial=True)
    y_none = torch.full_like(y_full, IGNORE)
    full, fam = SeqNet(gather=False), Categorical(ignore_index=IGNORE)
    along = loss_along(full, _params(full), _direction(full, x, y_full), (x, y_none), fam)
    assert along["slope"] == 0.0 and along["slope_se"] == 0.0
    assert not along["not_critical"] and not along["curved_down"]
    crit = critical_check(full, _params(full), (x, y_none), fam)
    assert crit["z"] is None and not crit["not_critical"]


# ---------------------------------------------------------------------------------------------
# the read and the command line


def test_read_with_an_ignore_index_checks_the_labelled_positions() -> None:
    x, y_full, _ = _data(adversarial=True)
    full = SeqNet(gather=False)
    reading = read(full, (x, y_full), Categorical(ignore_index=IGNORE), progress=False)
    assert family_from_dict(reading.meta["family"]) == Categorical(ignore_index=IGNORE)
    # every label the least likely class: the whole-gradient check on the labelled positions
    # flags θ0, as it does for the gathered model
    x_kept = critical_check(
        SeqNet(gather=True), _params(full), (x, _data(adversarial=True)[2]), Categorical()
    )
    _assert_same(reading.meta["critical_check"], x_kept)
    assert reading.meta["critical_check"]["not_critical"]


def test_read_refuses_labels_that_are_all_the_ignore_index() -> None:
    """s25 audit IGNORE #2: every label −100 read as a pass (slope 0, se 0, z None, no note)."""
    x, y_full, _ = _data(adversarial=True)
    with pytest.raises(ValueError, match=r"^every label is the ignore index -100: the labelled"):
        read(
            SeqNet(gather=False),
            (x, torch.full_like(y_full, IGNORE)),
            Categorical(ignore_index=IGNORE),
            progress=False,
        )


FACTORY = "nm_ignore_index_models"


def _cli_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable ``FACTORY:net`` (the sequence model) and a data file ``{'x', 'y'}`` with
    ``IGNORE`` labels."""
    (tmp_path / f"{FACTORY}.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_ignore_index import SeqNet\n"
        "def net():\n"
        "    return SeqNet(gather=False)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, FACTORY, raising=False)
    x, y_full, _ = _data(adversarial=True)
    path = tmp_path / "xy.pt"
    torch.save({"x": x, "y": y_full}, path)
    return path


def _invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> Any:
    data = _cli_files(tmp_path, monkeypatch)
    args = ["read", "--model", f"{FACTORY}:net", "--data", str(data), "--max-directions", "1"]
    return CliRunner().invoke(app, [*args, *extra], env={"COLUMNS": "200"})


def test_cli_reads_with_the_ignore_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.json"
    args = ("--family", "categorical", "--ignore-index", "-100", "--json", str(out))
    r = _invoke(tmp_path, monkeypatch, *args)
    assert r.exit_code == 0, r.output
    assert "output family: categorical, label -100 = no label (--family)" in r.output
    meta = json.loads(out.read_text())["meta"]
    assert meta["family"] == {"name": "categorical", "ignore_index": IGNORE}


def test_cli_ignore_index_without_labels_is_refused(tmp_path, monkeypatch) -> None:
    """s25 audit IGNORE #2: on data without labels the option changed nothing, without a word."""
    _cli_files(tmp_path, monkeypatch)
    x, _, _ = _data(adversarial=True)
    bare = tmp_path / "x.pt"
    torch.save(x, bare)
    args = ["read", "--model", f"{FACTORY}:net", "--data", str(bare), "--family", "categorical"]
    r = CliRunner().invoke(app, [*args, "--ignore-index", "-100"], env={"COLUMNS": "200"})
    assert r.exit_code == 2, r.output
    assert "the probe data has none" in " ".join(r.output.split())


def test_cli_without_the_ignore_index_refuses_the_label(tmp_path, monkeypatch) -> None:
    r = _invoke(tmp_path, monkeypatch, "--family", "categorical")
    assert r.exit_code == 2, r.output
    assert "--ignore-index -100" in r.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--ignore-index", "-100"), "--ignore-index marks categorical labels; the output family "
         "is gaussian"),
        (("--family", "categorical", "--ignore-index", "3"), "must be a negative integer"),
    ],
)  # fmt: skip
def test_cli_ignore_index_errors(tmp_path, monkeypatch, extra: tuple[str, ...], message) -> None:
    r = _invoke(tmp_path, monkeypatch, *extra)
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()), r.output
