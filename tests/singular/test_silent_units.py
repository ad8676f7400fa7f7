"""Silent units (held on a flat part of the activation on every probe) are not duality-linked, so
a dead unit chained to one is read as its own node death (s34 trial MLPREC D1)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import neuromanifold.singular.detectors.linear as lin
import neuromanifold.singular.detectors.silent as silent_mod
from neuromanifold.singular.detectors import DetectionContext, trace_graph
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.silent import (
    GAIN_MAX,
    SILENT_REL,
    PreactivationMoments,
    output_moments,
    preactivation_moments,
    preactivation_moments_reference,
    silent_columns,
    weight_rows,
)
from neuromanifold.singular.factor_spectrum import factor_spectrum
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read
from neuromanifold.singular.support import record_units

RTOL_MOMENT = 1e-10
"""Spectral vs dense (or sampled) pre-activation moments: the same sums in another order and
through an eigendecomposition (rounding ≈ 1e-15 of the largest moment)."""

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
    monkeypatch.setattr(silent_mod, "SILENT_REL", float("inf"))
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
    # each says why: the consumer's input unit never fires, the producer's output has no gradient
    for d in on_silent:
        clause = "never fires on them" if d.detector == "kfac-A" else "a ReLU that never fires"
        assert clause in d.reason, d.reason


def test_a_unit_of_constant_output_is_not_silent() -> None:
    """Zero row, bias 0.7: the ReLU unit outputs 0.7 on every probe (a compensated link); its
    pre-activation is constant, so it stays linked and reads its node death."""
    model, x = _net(1, 1)
    with torch.no_grad():
        model[0].bias[PLANTED] = 0.7
    linked = [_unit(g) for g, _, _ in lin.LinearDetector().linked(_context(model, x), "0")]
    assert linked == [PLANTED]


@pytest.mark.parametrize(
    ("what", "act", "bias", "weights"),
    [
        ("off at a constant pre-activation", nn.ReLU, -1.0, 0.0),  # output 0, z ≡ −1
        ("saturated with a moving pre-activation", nn.ReLU6, 50.0, 1.0),  # output 6, z > 6
    ],
)
def test_units_held_on_a_flat_part_are_silent_too(
    what: str, act: type[nn.Module], bias: float, weights: float
) -> None:
    """s35 review #1 and #2: a unit whose pre-activation is a negative constant (zero row, bias
    −1: E z² > 0 though Var z = 0), and a ReLU6 unit above 6 on every probe (a constant output 6,
    linked with a bias shift, whose pre-activation moves: Var z > 0), are flat for small moves
    of their rows; chained to the planted dead unit of the next layer they hid its node death."""
    model, x = _net(planted=2, silent=1)
    model[1] = act()
    model[3] = act()
    with torch.no_grad():
        model[0].weight[SILENT] *= weights
        model[0].bias[SILENT] = bias
    linked = [_unit(g) for g, _, _ in lin.LinearDetector().linked(_context(model, x), "0")]
    assert SILENT not in linked, what
    reading = read(model, x, Categorical(), progress=False)
    genuine = [d for d in reading.directions if d.klass == "genuine_singularity"]
    assert [(d.layers, d.k) for d in genuine] == [(("2", "4"), 2)], what
    # the producer side: the planted unit's row (with the top input direction of layer 2, which
    # a saturated unit's constant 6 can dominate: "out 3, in 5")
    assert record_units(genuine[0].info, "2").startswith(f"out {PLANTED}")


def test_silent_columns_rule() -> None:
    m = PreactivationMoments(  # column 1: 0.2·SILENT_REL of the mean, below the threshold
        second=torch.tensor([0.0, 0.2 * SILENT_REL, 1.0, 1.0, 1.0]),
        var=torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5]),
        second_mean=1.0,
        var_mean=0.5,
    )
    # column 2: output 0 at E z² = 1 (a ReLU off); 3: output 36 ≈ E z² but Var a = 0 < Var z
    # (saturated); 4: the output follows (a live unit near 0 of a smooth activation)
    out_second = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.25])
    out_var = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.12])
    assert silent_columns(m, out_second, out_var) == [False, False, True, True, False]
    assert silent_columns(m, out_second, None) == [False, False, True, False, False]
    no_bias = PreactivationMoments(m.second, None, 1.0, None)
    assert silent_columns(no_bias, out_second, out_var) == [False, False, True, False, False]
    gain = torch.tensor([0.0, 0.0, GAIN_MAX, 2 * GAIN_MAX, 1.0])  # at, above the gain bound
    assert silent_columns(m, gain, None) == [False, False, True, False, False]
    dead_layer = PreactivationMoments(torch.tensor([0.0]), torch.tensor([0.0]), 0.0, 0.0)
    zero = torch.tensor([0.0])
    assert silent_columns(dead_layer, zero, zero) == [False]  # all rows 0: nothing silent


def test_output_moments_are_the_outputs_second_moment_and_variance() -> None:
    """``E a²`` and ``Var a`` of a consumer's input coordinate from its factor, against the
    activations themselves (the lift of unit 1 of a Linear consumer with a bias: ``(e_1, 0)``;
    the best constant's shift ``q`` from `bias_link.compensated`)."""
    from neuromanifold.singular.detectors.bias_link import compensated

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ctx = _context(model, x)
    a_c = ctx.factors.blocks["2"].A
    comp = compensated(lin.block_spectrum(ctx, "2"))
    v = torch.zeros(4, 1, dtype=torch.float64)
    v[1] = 1.0
    second, var = output_moments(a_c, v, comp.shift)
    with torch.no_grad():
        act = model[1](model[0](x))[:, 1]
    assert float(second[0]) == pytest.approx(float(act.pow(2).mean()), rel=RTOL_MOMENT)
    # the best constant's residual: E (a − c)² for the c the compensation solves for, at least
    # the variance (c = E a minimises it) and at most the second moment (c = 0)
    assert float(act.var(unbiased=False)) * (1 - RTOL_MOMENT) <= float(var[0])
    assert float(var[0]) <= float(second[0])
    assert output_moments(a_c, v, None)[1] is None


def _random_block(conv: bool, bias: bool, seed: int, wide: bool = False):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n = 8 if wide else 40
    if conv:
        mod = nn.Conv2d(3, 5, 3, bias=bias).double()
        x = torch.randn(n, 3, 6, 6, generator=gen, dtype=torch.float64) + 0.3
    else:
        mod = nn.Linear(40 if wide else 7, 5, bias=bias).double()
        x = torch.randn(n, 40 if wide else 7, generator=gen, dtype=torch.float64) + 0.3
    bf = kfac_factors(nn.Sequential(mod), x, Categorical()).blocks["0"]
    return mod, bf, x


def _both(mod: nn.Module, bf, bias: bool, gs: torch.Tensor):
    rows = weight_rows(mod, bias)
    assert rows.shape[1] == bf.A.shape[0]
    sa = factor_spectrum(bf.A, rank_bound=getattr(bf, "a_rank_bound", None))
    spec = BlockSpectrum(sa.evals, sa.vecs, sa.evals, sa.vecs, [], [])
    return (
        preactivation_moments(rows, spec, gs, bias),
        preactivation_moments_reference(rows, bf.A, gs, bias),
        sa.method,
    )


@pytest.mark.parametrize(
    ("conv", "bias", "wide"),
    [
        (False, False, False),
        (False, True, False),
        (True, False, False),
        (True, True, False),
        (False, True, True),
    ],
)
def test_spectral_moments_equal_the_dense_oracle(conv: bool, bias: bool, wide: bool) -> None:
    """Linear and conv producers, with and without bias; ``wide``: a Linear of 41 input
    coordinates read on 8 probes, whose factor takes the low-rank path."""
    mod, bf, _ = _random_block(conv, bias, seed=3, wide=wide)
    gs = torch.linalg.qr(
        torch.randn(5, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    )[0]
    fast, dense, method = _both(mod, bf, bias, gs)
    assert method == ("lowrank" if wide else "dense")
    scale = float(dense.second.abs().max())
    torch.testing.assert_close(fast.second, dense.second, rtol=0, atol=RTOL_MOMENT * scale)
    assert fast.second_mean == pytest.approx(dense.second_mean, rel=RTOL_MOMENT)
    if bias:
        torch.testing.assert_close(fast.var, dense.var, rtol=0, atol=RTOL_MOMENT * scale)
        assert fast.var_mean == pytest.approx(dense.var_mean, rel=RTOL_MOMENT)
    else:
        assert fast.var is None and dense.var is None and fast.var_mean is None


@pytest.mark.parametrize("conv", [False, True])
def test_moments_are_those_of_the_pre_activations(conv: bool) -> None:
    """The closed forms against the pre-activations themselves: mean of ``z_g²`` and variance of
    ``z_g`` over the probes (and a convolution's positions, which ``A`` averages over)."""
    mod, bf, x = _random_block(conv, bias=True, seed=4)
    g = torch.zeros(5, 1, dtype=torch.float64)
    g[2] = 1.0
    m = preactivation_moments_reference(weight_rows(mod, True), bf.A, g, True)
    with torch.no_grad():
        z = mod(x)
    z = z.transpose(0, 1).reshape(5, -1) if conv else z.T  # (units, samples · positions)
    assert float(m.second[0]) == pytest.approx(float(z[2].pow(2).mean()), rel=RTOL_MOMENT)
    assert float(m.var[0]) == pytest.approx(float(z[2].var(unbiased=False)), rel=RTOL_MOMENT)
    assert m.second_mean == pytest.approx(float(z.pow(2).mean()), rel=RTOL_MOMENT)
    assert m.var_mean == pytest.approx(float(z.var(1, unbiased=False).mean()), rel=RTOL_MOMENT)


def _two_behind_one(seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """GELU MLP 6 → 8 → 12 → 4: unit 3 of the first hidden layer and units 5 and 9 of the second
    dead (zero row, bias and outgoing column)."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 12), nn.GELU(), nn.Linear(12, 4)
    ).double()
    with torch.no_grad():
        for prod, cons, j in (
            (model[0], model[2], 3),
            (model[2], model[4], 5),
            (model[2], model[4], 9),
        ):
            prod.weight[j] = 0.0
            prod.bias[j] = 0.0
            cons.weight[:, j] = 0.0
    x = torch.randn(96, 6, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return model, x


def test_a_second_dead_unit_behind_one_starts_its_own_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """s35 trial SILENT D2: the one chain from the first layer walks one of the second layer's
    two dead units (a crossing, k = 3); the other was on no chain and in no record. It now starts
    a chain of its own (its node death, k = 2)."""
    model, x = _two_behind_one()

    def named(reading) -> set[tuple[str, int]]:
        out = set()
        for d in reading.directions:
            if d.klass != "genuine_singularity":
                continue
            for layer in ("0", "2"):
                label = record_units(d.info, layer)
                if label.startswith("out "):
                    out.add((layer, int(label.split(",")[0][4:])))
        return out

    reading = read(model, x, Categorical(), progress=False)
    assert sorted(
        (d.layers, d.k) for d in reading.directions if d.klass == "genuine_singularity"
    ) == [
        (("0", "2", "4"), 3),
        (("2", "4"), 2),
    ]
    assert named(reading) == {("0", 3), ("2", 5), ("2", 9)}
    # without the rule: the arriving chain's count covers every linked vector of layer 2
    monkeypatch.setattr(lin.LinearDetector, "_walked_into", lambda self, ctx, name, n: n)
    before = read(model, x, Categorical(), progress=False)
    assert len(named(before)) == 2


def test_a_chain_started_past_the_arriving_ones_shares_no_later_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dead units: 3 of layer 1, 5 and 9 of layer 2, 7 of layer 3 (GELU). The chain from layer 1
    walks 3 → 5 → 7 (a crossing, k = 4); the chain started at layer 2 for unit 9 finds no linked
    vector of its index in layer 3 and ends there (unit 9's node death, k = 2) rather than
    walking unit 7 a second time."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 8),
        nn.GELU(),
        nn.Linear(8, 12),
        nn.GELU(),
        nn.Linear(12, 10),
        nn.GELU(),
        nn.Linear(10, 4),
    ).double()
    with torch.no_grad():
        for p, c, j in ((0, 2, 3), (2, 4, 5), (2, 4, 9), (4, 6, 7)):
            model[p].weight[j] = 0.0
            model[p].bias[j] = 0.0
            model[c].weight[:, j] = 0.0
    x = torch.randn(96, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def genuine(reading) -> list[tuple[tuple[str, ...], int | None, str]]:
        return sorted(
            (d.layers, d.k, record_units(d.info, "4"))
            for d in reading.directions
            if d.klass == "genuine_singularity"
        )

    assert genuine(read(model, x, Categorical(), progress=False)) == [
        (("0", "2", "4", "6"), 4, "out 7, in 5"),
        (("2", "4"), 2, "in 9"),
    ]
    monkeypatch.setattr(lin.LinearDetector, "_walked_into", lambda self, ctx, name, n: 0)
    # every linked vector of layer 2 starting a chain, walking on (not strict): unit 7 twice
    loose = genuine(read(model, x, Categorical(), progress=False))
    assert sum(label.startswith("out 7") for _, _, label in loose) >= 2
