"""Silent units (never firing on the probes, live pre-activation) are not duality-linked, so a
dead unit chained to one is read as its own node death (s34 trial MLPREC D1)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import neuromanifold.singular.detectors.linear as lin
from neuromanifold.singular.detectors import DetectionContext, trace_graph
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.silent import (
    SILENT_VAR_REL,
    preactivation_variance,
    preactivation_variance_reference,
    weight_rows,
)
from neuromanifold.singular.factor_spectrum import factor_spectrum
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read
from neuromanifold.singular.support import record_units

RTOL_VARIANCE = 1e-10
"""Spectral vs dense pre-activation variances: the same sums in another order and through an
eigendecomposition (rounding ≈ 1e-15 of the largest variance)."""

PLANTED, SILENT = 3, 5  # hidden units of the first layer (or of the second, see `_net`)


def _net(planted: int, silent: int, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """ReLU MLP 6 → 8 → 8 → 4 on 96 Gaussian probes. In hidden layer ``planted`` (1 or 2) unit
    ``PLANTED`` is dead (zero row, bias and outgoing column); in hidden layer ``silent`` unit
    ``SILENT`` has live weights and a bias of −50: its pre-activation varies over the probes,
    never above 0."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)
    ).double()
    prod, cons = model[2 * (planted - 1)], model[2 * planted]
    with torch.no_grad():
        for m in (model[0], model[2]):
            m.bias.uniform_(0.2, 0.5)  # every other unit fires on most probes
        prod.weight[PLANTED] = 0.0
        prod.bias[PLANTED] = 0.0
        cons.weight[:, PLANTED] = 0.0
        model[2 * (silent - 1)].bias[SILENT] = -50.0
    x = torch.randn(96, 6, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return model, x


def _context(model: nn.Module, x: torch.Tensor) -> DetectionContext:
    fam = Categorical()
    return DetectionContext(
        model=model,
        params={k: v.detach() for k, v in model.named_parameters()},
        factors=kfac_factors(model, x, fam),
        graph=trace_graph(model, x[:1]),
        family=fam,
        data=x,
    )


def _unit(g: torch.Tensor) -> int:
    j = int(g.abs().argmax())
    assert float(g.abs()[j]) == pytest.approx(1.0, abs=1e-12)  # a coordinate vector
    return j


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("layer", [1, 2])
def test_the_silent_unit_is_not_linked_and_the_dead_one_is(
    monkeypatch: pytest.MonkeyPatch, reference: bool, layer: int
) -> None:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    model, x = _net(layer, layer)
    ctx = _context(model, x)
    producer = str(2 * (layer - 1))
    with torch.no_grad():
        pre = model[: 2 * layer - 1](x)[:, SILENT]
    assert float(pre.max()) < 0 and float(pre.std()) > 0.1  # silent: off, and moving
    spec = lin.block_spectrum(ctx, producer)
    kernel = lin.columns(spec.g_vecs, spec.ker_g)
    assert {_unit(kernel[:, j]) for j in range(kernel.shape[1])} >= {PLANTED, SILENT}
    linked = [_unit(g) for g, _, _ in lin.LinearDetector().linked(ctx, producer)]
    assert linked == [PLANTED]


def test_without_the_rule_the_silent_unit_would_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case the rule is for: with the threshold out of reach, both units link."""
    monkeypatch.setattr(lin, "SILENT_VAR_REL", float("inf"))
    model, x = _net(1, 1)
    linked = [_unit(g) for g, _, _ in lin.LinearDetector().linked(_context(model, x), "0")]
    assert sorted(linked) == sorted([PLANTED, SILENT])


@pytest.mark.parametrize(("planted", "silent"), [(1, 2), (2, 1), (1, 1), (2, 2)])
def test_the_planted_node_death_reads_order_two_and_the_silent_unit_reads_no_order(
    planted: int, silent: int
) -> None:
    """With the silent unit in the other layer, the old rule chained the two units into one
    ``0+2+4`` direction that read flat, and no record found the node death (MLPREC D1)."""
    model, x = _net(planted, silent)
    reading = read(model, x, Categorical(), progress=False)
    prod, cons = str(2 * (planted - 1)), str(2 * planted)
    genuine = [d for d in reading.directions if d.klass == "genuine_singularity"]
    assert [(d.layers, d.k, d.detector) for d in genuine] == [((prod, cons), 2, "duality")]
    assert record_units(genuine[0].info, prod) == f"out {PLANTED}"
    assert record_units(genuine[0].info, cons) == f"in {PLANTED}"
    s_prod, s_cons = str(2 * (silent - 1)), str(2 * silent)
    on_silent = [
        d
        for d in reading.directions
        if record_units(d.info, s_prod) == f"out {SILENT}"
        or record_units(d.info, s_cons) == f"in {SILENT}"
    ]
    assert on_silent and all(d.detector in ("kfac-G", "kfac-A") for d in on_silent)
    assert all(d.k is None for d in on_silent)


def test_a_unit_of_constant_output_is_not_silent() -> None:
    """Zero row, bias 0.7: the ReLU unit outputs 0.7 on every probe (a compensated link); its
    pre-activation is constant, so it stays linked and reads its node death."""
    model, x = _net(1, 1)
    with torch.no_grad():
        model[0].bias[PLANTED] = 0.7
    linked = [_unit(g) for g, _, _ in lin.LinearDetector().linked(_context(model, x), "0")]
    assert linked == [PLANTED]


def _random_block(conv: bool, bias: bool, seed: int) -> tuple[nn.Module, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if conv:
        mod = nn.Conv2d(3, 5, 3, bias=bias).double()
        x = torch.randn(40, 3, 6, 6, generator=gen, dtype=torch.float64) + 0.3
    else:
        mod = nn.Linear(7, 5, bias=bias).double()
        x = torch.randn(40, 7, generator=gen, dtype=torch.float64) + 0.3
    a = kfac_factors(nn.Sequential(mod), x, Categorical()).blocks["0"].A
    return mod, a


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_spectral_variances_equal_the_dense_oracle(conv: bool, bias: bool) -> None:
    mod, a = _random_block(conv, bias, seed=3)
    rows = weight_rows(mod, bias)
    assert rows.shape[1] == a.shape[0]
    sa = factor_spectrum(a)
    spec = BlockSpectrum(sa.evals, sa.vecs, sa.evals, sa.vecs, [], [])
    gs = torch.linalg.qr(torch.randn(5, 3, dtype=torch.float64))[0]
    fast, fast_mean = preactivation_variance(rows, spec, gs, bias)
    dense, dense_mean = preactivation_variance_reference(rows, a, gs, bias)
    scale = float(dense.abs().max())
    torch.testing.assert_close(fast, dense, rtol=0, atol=RTOL_VARIANCE * scale)
    assert fast_mean == pytest.approx(dense_mean, rel=RTOL_VARIANCE)
    assert dense_mean > 0 and bool((dense >= -RTOL_VARIANCE * scale).all())


def test_variance_is_the_sample_variance_of_the_pre_activation() -> None:
    """The closed form against the pre-activations themselves: ``Var z_g`` over the probes."""
    mod, a = _random_block(conv=False, bias=True, seed=4)
    x = torch.randn(40, 7, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.3
    g = torch.zeros(5, 1, dtype=torch.float64)
    g[2] = 1.0
    var, mean = preactivation_variance_reference(weight_rows(mod, True), a, g, True)
    with torch.no_grad():
        z = mod(x)
    assert float(var[0]) == pytest.approx(float(z[:, 2].var(unbiased=False)), rel=RTOL_VARIANCE)
    assert mean == pytest.approx(float(z.var(0, unbiased=False).mean()), rel=RTOL_VARIANCE)
    assert SILENT_VAR_REL < 1e-3  # far below a live unit's share (≈ 1 of the mean)
