"""The labelled-loss check of the read (`neuromanifold.singular.minimum_check`): is θ0 a minimum
of the probe loss along each genuine and live direction read? (s20 trial AO #2: a saddle read
λ = 1/2, m = 2 with no note.)"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from neuromanifold.singular.assembly import assemble_from_reading
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.minimum_check import (
    curvature_threshold,
    loss_along,
    loss_along_reference,
)
from neuromanifold.singular.read import read
from neuromanifold.singular.reading import Reading

#: forward-over-forward against reverse-over-reverse, float64, samples of order-one losses
DERIVATIVE_RTOL = 1e-10


def _tanh_cell(n: int, signal: float, seed: int = 0):
    """``a·tanh(b·x)`` (a ``Linear(1,1) → Tanh → Linear(1,1)`` net) at ``a = b = 0`` (biases 0)
    with data ``y = signal·tanh(1.2·x) + N(0, 1)``: a saddle of the loss when ``signal ≠ 0``,
    the true parameter when ``signal = 0``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, generator=gen, dtype=torch.float64)
    y = signal * torch.tanh(1.2 * x) + torch.randn(n, 1, generator=gen, dtype=torch.float64)
    net = nn.Sequential(nn.Linear(1, 1), nn.Tanh(), nn.Linear(1, 1)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    return net, x, y


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4)).double()


def _direction(net: nn.Module, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        k: torch.randn(v.shape, generator=gen, dtype=torch.float64)
        for k, v in net.named_parameters()
    }


STAT_KEYS = ("slope", "slope_se", "curvature", "lowest_curvature", "lowest_curvature_se")


def _assert_like_oracle(fast: dict, slow: dict) -> None:
    assert fast["n"] == slow["n"] and fast["span_dim"] == slow["span_dim"]
    for key in STAT_KEYS:
        assert fast[key] == pytest.approx(slow[key], rel=DERIVATIVE_RTOL), key
    assert fast["lowest_direction"] == pytest.approx(slow["lowest_direction"], rel=1e-8)
    assert fast["not_critical"] == slow["not_critical"]
    assert fast["curved_down"] == slow["curved_down"]
    json.loads(json.dumps(fast, allow_nan=False))  # JSON-ready


@pytest.mark.parametrize("family", [Gaussian(0.5), Categorical()], ids=["gaussian", "categorical"])
@pytest.mark.parametrize("chunk", [None, 5])
def test_the_forward_derivatives_match_reverse_over_reverse(family, chunk) -> None:
    net = _mlp()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(12, 3, generator=gen, dtype=torch.float64)
    if isinstance(family, Gaussian):
        y = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    else:
        y = torch.randint(0, 4, (12,), generator=gen)
    params, u = dict(net.named_parameters()), _direction(net)
    fast = loss_along(net, params, u, (x, y), family, chunk_size=chunk)
    slow = loss_along_reference(net, params, u, (x, y), family)
    assert fast["n"] == 12 and fast["span_dim"] == 4  # parts: the 4 tensors
    _assert_like_oracle(fast, slow)


def _layer_norm_net() -> nn.Module:
    torch.manual_seed(4)
    return nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Tanh(), nn.Linear(6, 3)).double()


def _instance_norm_net() -> nn.Module:
    torch.manual_seed(5)
    return nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.InstanceNorm2d(3, affine=True), nn.Flatten(), nn.Linear(48, 3)
    ).double()


@pytest.mark.parametrize(
    ("make", "shape"),
    [(_layer_norm_net, (10, 4)), (_instance_norm_net, (8, 1, 6, 6))],
    ids=["layer_norm", "instance_norm"],
)
def test_second_derivatives_through_norm_layers_match_the_oracle(make, shape) -> None:
    """s21 trial AS #1: torch's forward-over-forward formula for layer norm is wrong (the
    curvature through ``Linear → LayerNorm → Linear`` was −0.36 against the oracle's +0.09);
    the check computes the norms from elementwise operations."""
    net = make()
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (shape[0],), generator=gen)
    params = {k: v.detach() for k, v in net.named_parameters()}
    u = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in params.items()}
    fast = loss_along(net, params, u, (x, y), Categorical())
    _assert_like_oracle(fast, loss_along_reference(net, params, u, (x, y), Categorical()))


def test_the_curvature_is_the_second_difference_of_the_mean_loss() -> None:
    """A law of the mean: ``c̄ = d²L_N/dt²`` and ``ḡ = dL_N/dt`` along the unit direction."""
    net = _mlp(3)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (30,), generator=gen)
    params, u = {k: v.detach() for k, v in net.named_parameters()}, _direction(net, 5)
    norm = torch.sqrt(sum((v**2).sum() for v in u.values()))

    def mean_loss(t: float) -> float:
        moved = {k: v + t * u[k] / norm for k, v in params.items()}
        out = torch.func.functional_call(net, moved, (x,))
        return float(-Categorical().log_likelihood(out, y).mean())

    h = 1e-3
    slope = (mean_loss(h) - mean_loss(-h)) / (2 * h)
    curve = (mean_loss(h) - 2 * mean_loss(0.0) + mean_loss(-h)) / h**2
    got = loss_along(net, params, u, (x, y), Categorical())
    # central differences: truncation h²/6·L''' and h²/12·L'''' with derivatives of order one
    assert got["slope"] == pytest.approx(slope, abs=1e-6)
    assert got["curvature"] == pytest.approx(curve, abs=1e-5)


def test_a_saddle_is_flagged_in_the_record_the_note_and_the_assembly() -> None:
    """s20 trial AO #2: at a = b = 0 with y ≈ 0.8·tanh(1.2x) the gradient is exactly 0 and the
    loss curves down along one diagonal of the chain: the read's genuine k = 2 record must say
    θ0 is not a minimum there, and so must the reading and the assembly."""
    net, x, y = _tanh_cell(1000, 0.8)
    reading = read(net, (x, y), Gaussian(), progress=False)
    genuine = [r for r in reading.directions if r.klass == "genuine_singularity"]
    assert genuine and genuine[0].k == 2
    check = genuine[0].info["loss_along_u"]
    assert not check["not_critical"] and check["slope"] == 0.0  # a critical point …
    assert check["span_dim"] == 3 and check["curved_down"]  # … a saddle of the chain's span
    z = check["curvature_threshold"]
    assert (
        z == curvature_threshold(3)
        and check["lowest_curvature"] < -z * check["lowest_curvature_se"]
    )
    assert "θ0 is not a minimum of the labelled probe loss along u" in genuine[0].reason
    assert "θ0 is not a minimum of the labelled probe loss along 1 of the" in reading.note
    result = assemble_from_reading(reading, regular_dims=0)
    assert any("θ0 is not a minimum of the labelled probe loss" in n for n in result.notes)
    text = json.dumps(reading.to_dict(), allow_nan=False)  # the check survives the JSON trip
    assert Reading.from_dict(json.loads(text)).directions == reading.directions


@pytest.mark.parametrize("seed", range(8))
def test_the_saddle_is_flagged_whatever_sign_the_read_gave_its_chain(seed) -> None:
    """s21 trial AS #2: along u alone the check saw the upward diagonal (a, −b) of the saddle
    in 4 of 16 data draws (the chain's relative sign is the detector's); on the span of the
    chain's parts the downward diagonal is always there."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1000, 1, generator=gen, dtype=torch.float64)
    y = 0.8 * torch.tanh(1.2 * x) + 0.1 * torch.randn(1000, 1, generator=gen, dtype=torch.float64)
    net, _, _ = _tanh_cell(1, 0.0)
    reading = read(net, (x, y), Gaussian(), progress=False)
    checks = [r.info["loss_along_u"] for r in reading.directions if "loss_along_u" in r.info]
    assert checks and all(c["curved_down"] for c in checks), checks


def test_the_saddle_has_curvature_minus_e_xy_on_both_diagonals() -> None:
    """Closed form: ``a·tanh(b·x) = a·b·x + O(3)``, so the Gaussian (σ = 1) loss is
    ``L(0) − E[x·y]·a·b + O(3)``: along the unit diagonal (a, ±b) slope 0 and curvature
    ``∓E[x·y]``, and on the span of a and b the Hessian [[0, −m], [−m, 0]], m = E[x·y], whose
    lowest eigenvalue ``−|m|`` both directions report, along (a, b) ∝ (1, 1) for m > 0."""
    net, x, y = _tanh_cell(1000, 0.8)
    exy = float((x * y).mean())
    params = dict(net.named_parameters())
    one = torch.ones(1, 1, dtype=torch.float64)
    for sign in (1.0, -1.0):
        got = loss_along(net, params, {"0.weight": one, "2.weight": sign * one}, (x, y), Gaussian())
        assert got["slope"] == 0.0 and got["slope_se"] == 0.0 and not got["not_critical"]
        assert got["curvature"] == pytest.approx(-sign * exy, rel=DERIVATIVE_RTOL)
        assert got["lowest_curvature"] == pytest.approx(-abs(exy), rel=DERIVATIVE_RTOL)
        # in the coordinates of the parts as given (û_b = sign·e_b): (1, sign)/√2
        assert got["lowest_direction"] == pytest.approx([2**-0.5, sign * 2**-0.5], rel=1e-12)
        # the residual's null variance: f̈ along (1, 1)/√2 is x, so se = √(Σ x²)/N (σ = 1)
        se = float((x * x).sum().sqrt()) / 1000
        assert got["lowest_curvature_se"] == pytest.approx(se, rel=DERIVATIVE_RTOL)
        assert got["curved_down"]


def test_a_true_parameter_is_not_flagged() -> None:
    """With y pure noise, a = b = 0 is the true parameter: the same genuine read, no flag."""
    net, x, y = _tanh_cell(1000, 0.0)
    reading = read(net, (x, y), Gaussian(), progress=False)
    genuine = [r for r in reading.directions if r.klass == "genuine_singularity"]
    assert genuine and genuine[0].k == 2
    check = genuine[0].info["loss_along_u"]
    assert not check["curved_down"] and not check["not_critical"], check
    assert "not a minimum" not in reading.note and "not a minimum" not in genuine[0].reason
    result = assemble_from_reading(reading, regular_dims=0)
    assert not any("not a minimum" in n for n in result.notes)


#: draws of labels from the model at θ0 in the calibration tests, and the bounds on what they
#: show: the z statistics of a Gaussian family are exactly N(0, 1) under the null, so over
#: CALIBRATION_DRAWS draws their sample variance lies within Z_VARIANCE_TOL of 1 (4.4 standard
#: deviations of a sample variance, √(2/400) = 0.071)
CALIBRATION_DRAWS = 400
Z_VARIANCE_TOL = 0.31


def test_the_slope_statistic_is_standard_normal_at_a_true_parameter() -> None:
    """s21 trial AS #4: with the sample standard error, 3 samples flagged a true parameter in
    1.3 % of draws; the model-based one makes ``slope/slope_se`` exactly N(0, 1) under the null
    (Gaussian scores), at any N."""
    net = _mlp(7)[:2]  # Linear(3, 5) → Tanh, read as a 5-output Gaussian regression
    params = {k: v.detach() for k, v in net.named_parameters()}
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    u = {"0.weight": torch.randn(5, 3, generator=gen, dtype=torch.float64)}  # one part: 2 passes
    with torch.no_grad():
        mean = net(x)
    zs, flags = [], 0
    for _ in range(CALIBRATION_DRAWS):
        y = mean + torch.randn(mean.shape, generator=gen, dtype=torch.float64)
        got = loss_along(net, params, u, (x, y), Gaussian())
        zs.append(got["slope"] / got["slope_se"])
        flags += got["not_critical"]
    z = torch.tensor(zs)
    assert abs(float(z.var()) - 1.0) <= Z_VARIANCE_TOL, float(z.var())
    assert flags == 0


def test_a_confident_teacher_is_not_flagged_at_small_n() -> None:
    """s21 trial AS #4: a logistic teacher with logits (0, 0.5 + 2x) and labels drawn from its
    own softmax was flagged 'not critical' in 2.4 % of draws at N = 30 (one-signed scores when
    the rare class is missing collapse a sample standard error); the model-based one does not
    collapse (expected flags at 6·10⁻⁵ each: 0.01 in 200 draws)."""
    teacher = nn.Linear(1, 2).double()
    with torch.no_grad():
        teacher.weight.copy_(torch.tensor([[0.0], [2.0]]))
        teacher.bias.copy_(torch.tensor([0.0, 0.5]))
    params = {k: v.detach() for k, v in teacher.named_parameters()}
    u = {"weight": torch.tensor([[0.0], [1.0]], dtype=torch.float64)}
    gen = torch.Generator().manual_seed(9)
    flags = 0
    for _ in range(CALIBRATION_DRAWS // 2):
        x = torch.randn(30, 1, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            p = torch.softmax(teacher(x), -1)
        y = torch.multinomial(p, 1, generator=gen)[:, 0]
        got = loss_along(teacher, params, u, (x, y), Categorical())
        flags += got["not_critical"] or got["curved_down"]
    assert flags == 0


def test_without_labels_nothing_is_checked() -> None:
    net, x, _ = _tanh_cell(200, 0.8)
    reading = read(net, x, Gaussian(), progress=False)
    assert reading.directions
    assert all("loss_along_u" not in r.info for r in reading.directions)


def test_loss_along_needs_labels() -> None:
    net, x, _ = _tanh_cell(10, 0.8)
    params, u = dict(net.named_parameters()), _direction(net)
    with pytest.raises(ValueError, match=r"loss_along needs labelled data \(x, y\)"):
        loss_along(net, params, u, x, Gaussian())
    with pytest.raises(TypeError, match="data labels y must be a Tensor; got NoneType"):
        loss_along(net, params, u, (x, None), Gaussian())


def test_the_read_refuses_labels_the_loss_cannot_take() -> None:
    """Labels were once ignored; now the check reads them, so bad ones fail before the read."""
    net, x, y = _tanh_cell(20, 0.8)
    with pytest.raises(ValueError, match=r"Gaussian targets y must have the output's shape"):
        read(net, (x, y[:, 0]), Gaussian(), progress=False)
    clf = nn.Sequential(nn.Linear(1, 3)).double()
    with pytest.raises(ValueError, match="Categorical labels y must be integer class indices"):
        read(clf, (x, torch.zeros(20, dtype=torch.float64)), Categorical(), progress=False)


def labelled_saddle() -> SimpleNamespace:
    """Factory for `launch_local` (importable in the spawned ranks): the saddle on 256 labelled
    samples, sharded as pairs."""
    net, x, y = _tanh_cell(256, 0.8)
    return SimpleNamespace(model=net, data=(x, y), family=Gaussian())


#: all-reduced sums against one process: only the summation order differs
RTOL_SUMS = 1e-12


def test_two_gloo_ranks_check_the_loss_on_the_whole_probe_set() -> None:
    """Each rank holds half of the labelled probe set; the slope and curvature sums and their
    squares are all-reduced, so both ranks report the single process's check."""
    from neuromanifold.singular.distributed import launch_local, read_sharded

    net = labelled_saddle()
    single = read_sharded(net.model, net.data, net.family, progress=False).to_dict()
    want = [d["info"]["loss_along_u"] for d in single["directions"] if "loss_along_u" in d["info"]]
    assert want and want[0]["curved_down"] and want[0]["n"] == 256
    kw = {"progress": False}
    per_rank = launch_local(2, "test_minimum_check:labelled_saddle", read_kwargs=kw)
    for rank in per_rank:
        got = [
            d["info"]["loss_along_u"]
            for d in rank["reading"]["directions"]
            if "loss_along_u" in d["info"]
        ]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g["n"] == w["n"] and g["curved_down"] == w["curved_down"]
            assert g["not_critical"] == w["not_critical"]
            for key in STAT_KEYS:
                assert g[key] == pytest.approx(w[key], rel=RTOL_SUMS, abs=1e-300), key


class _Opaque(torch.autograd.Function):
    """``x ↦ x`` with a backward and no forward-mode formula."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g


class _NoSecondOrder(_Opaque):
    """``x ↦ x`` whose forward-mode formula is `_Opaque`, which has none of its own: one JVP
    runs, a JVP of a JVP raises."""

    @staticmethod
    def jvp(ctx, dx):
        return _Opaque.apply(dx)


def test_a_model_without_second_order_forward_mode_is_read_and_says_so() -> None:
    """The check is a JVP of a JVP; a model whose operators support only one level still reads,
    and the record and the note say the check could not run (not a silent pass)."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(1, 1), nn.Linear(1, 1)

        def forward(self, x):
            return _NoSecondOrder.apply(self.b(torch.tanh(self.a(x))))

    net, x, y = _tanh_cell(100, 0.8)
    model = Net().double()
    names = {"0.weight": "a.weight", "0.bias": "a.bias", "2.weight": "b.weight", "2.bias": "b.bias"}
    model.load_state_dict({names[k]: v for k, v in net.state_dict().items()})
    reading = read(model, (x, y), Gaussian(), progress=False)
    checks = [r.info["loss_along_u"] for r in reading.directions if "loss_along_u" in r.info]
    assert checks and all("error" in c for c in checks)
    assert "the labelled-loss check could not run along" in reading.note


def test_under_a_budget_the_check_keeps_the_sweeps_share(monkeypatch) -> None:
    """A JVP of a JVP holds 2.3–2.6× the activations of one JVP lane; under ``max_memory`` its
    chunks are sized for `LOSS_CHECK_LANES` lanes, so its measured peak (live tensors,
    `peak_allocated`) stays within the bytes the plan gives the sweeps (`MemoryPlan.pass_room`).
    Sized like one lane, it went over them."""
    from neuromanifold.singular import read_candidate as rc
    from neuromanifold.singular.memory import MemoryPlan, peak_allocated

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 32), nn.Tanh(), nn.Linear(32, 4)).double()
    with torch.no_grad():  # hidden unit 0 dead both ways: a genuine duality chain to check
        model[0].weight[0] = 0.0
        model[0].bias[0] = 0.0
        model[2].weight[:, 0] = 0.0
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2048, 256, generator=gen, dtype=torch.float64)
    y = torch.randn(2048, 4, generator=gen, dtype=torch.float64)
    peaks: list[int] = []
    real = rc.loss_along

    def measured(*args, **kwargs):
        out: list = []
        peaks.append(peak_allocated(lambda: out.append(real(*args, **kwargs))))
        return out[0]

    monkeypatch.setattr(rc, "loss_along", measured)
    reading = read(model, (x, y), Gaussian(), progress=False, max_memory="12MB")
    plan = reading.meta["memory_plan"]
    assert plan["chunk_size"] < 2048  # the budget chunks the sweeps …
    assert peaks, "the planted chain must be checked"
    room = MemoryPlan(**plan).pass_room()
    assert max(peaks) <= room, (max(peaks), room)  # … and the check within their share


class _DirectNorms(nn.Module):
    """A model that calls ``torch.layer_norm`` (with ``cudnn_enable``) and ``torch.instance_norm``
    itself, in their own argument orders, not through ``F``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3)
        self.w, self.b = nn.Parameter(torch.ones(3)), nn.Parameter(torch.zeros(3))
        self.head = nn.Linear(48, 3)

    def forward(self, x):
        h = torch.instance_norm(self.conv(x), self.w, self.b, None, None, True, 0.1, 1e-5, False)
        h = torch.layer_norm(h.flatten(1), (48,), None, None, 1e-5, False)
        return self.head(torch.tanh(h))


def test_direct_torch_norm_calls_match_the_oracle() -> None:
    """s21 audit AU #4: the elementwise norms took ``F``'s argument lists, so a model calling
    ``torch.layer_norm(…, cudnn_enable)`` or ``torch.instance_norm(…)`` itself crashed the check
    with a TypeError (and with it the whole labelled read)."""
    torch.manual_seed(11)
    net = _DirectNorms().double()
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(6, 1, 6, 6, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (6,), generator=gen)
    params = {k: v.detach() for k, v in net.named_parameters()}
    u = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in params.items()}
    fast = loss_along(net, params, u, (x, y), Categorical())
    _assert_like_oracle(fast, loss_along_reference(net, params, u, (x, y), Categorical()))


def _dead_unit_net() -> nn.Module:
    """``1 → 3 → 1`` tanh net whose hidden unit 2 is dead (in-weight, bias and out-weight 0)."""
    torch.manual_seed(13)
    net = nn.Sequential(nn.Linear(1, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    with torch.no_grad():
        net[0].weight[2] = 0.0
        net[0].bias[2] = 0.0
        net[2].weight[0, 2] = 0.0
    return net


#: bounds on the fraction of draws whose lowest curvature is below −2 standard errors on the
#: dead unit's span: χ²₂'s tail e⁻² = 0.135, ± 3.4 binomial standard deviations over 200 draws
CHI2_TAIL_AT_2 = (0.053, 0.217)


def test_a_dead_unit_span_at_a_true_parameter_is_calibrated() -> None:
    """s21 audit AU #2: on a dead unit's span (``0.weight``, ``0.bias`` and ``2.weight`` rows of
    the unit) the Gauss–Newton part is 0 and the lowest eigenvalue is ``−√(X² + Y²)`` of two
    cross terms: its z is χ₂-distributed, so P(z < −2) ≈ e⁻² (not a normal's 0.023), and a normal
    threshold of 4 flagged at e⁻⁸ = 3.4·10⁻⁴. `curvature_threshold(3)` = 5.39 keeps it at most
    6·10⁻⁵: no flag in 200 draws of labels from the model itself."""
    net = _dead_unit_net()
    params = {k: v.detach() for k, v in net.named_parameters()}
    u = {k: torch.zeros_like(v) for k, v in params.items()}
    u["0.weight"][2], u["0.bias"][2], u["2.weight"][0, 2] = 1.0, 1.0, 1.0
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(200, 1, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        mean = net(x)
    below_2, flags = 0, 0
    for _ in range(CALIBRATION_DRAWS // 2):
        y = mean + 0.5 * torch.randn(mean.shape, generator=gen, dtype=torch.float64)
        got = loss_along(net, params, u, (x, y), Gaussian(0.5))
        assert got["span_dim"] == 3
        below_2 += got["lowest_curvature"] < -2 * got["lowest_curvature_se"]
        flags += got["curved_down"] or got["not_critical"]
    assert CHI2_TAIL_AT_2[0] <= below_2 / (CALIBRATION_DRAWS // 2) <= CHI2_TAIL_AT_2[1], below_2
    assert flags == 0


def test_rounding_on_a_linear_span_is_not_a_downward_curvature() -> None:
    """s21 audit AU #3: a ``Linear(3, 4)`` with the constant input feature 0.7, read along its
    weight column 0 and its bias, spans a direction the output does not see: the span Hessian
    is PSD with a null eigenvector, f̈ = 0 makes the standard error 0, and eigh's −2·10⁻¹⁶ there
    was flagged in 10 of 40 seeds; the rounding margin now scales with the span Hessian's
    largest entry."""
    flagged = []
    for seed in range(40):
        torch.manual_seed(seed)
        net = nn.Linear(3, 4).double()
        x = torch.randn(30, 3, dtype=torch.float64)
        x[:, 0] = 0.7
        family = Categorical() if seed % 2 else Gaussian(0.5)
        y = torch.randint(0, 4, (30,)) if seed % 2 else torch.randn(30, 4, dtype=torch.float64)
        column = torch.zeros(4, 3, dtype=torch.float64)
        column[:, 0] = torch.randn(4, dtype=torch.float64)
        u = {"weight": column, "bias": -0.7 * column[:, 0] * (1 + 0.5 * seed)}
        params = {k: v.detach() for k, v in net.named_parameters()}
        got = loss_along(net, params, u, (x, y), family)
        assert got["lowest_curvature_se"] == 0.0 and got["span_dim"] == 2
        flagged += [seed] if got["curved_down"] else []
    assert flagged == []
