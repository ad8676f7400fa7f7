"""Grouped and depthwise convolutions: per-group K-FAC blocks and their detector.

Laws: the per-group views compute the grouped convolution; the per-group factors equal those of
the same network written with one plain convolution per group (the structural oracle); a
depthwise filter whose input channel is dead is an exact flat direction, found as that group's
``kfac-A`` kernel and written into the group's rows only.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular.detectors import DetectionContext
from neuromanifold.singular.detectors.grouped_conv import GroupedConvDetector
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.groups import embed_group_direction, group_views, is_grouped_conv

ATOL_FACTORS = 1e-13  # the same sums formed from the same slices; only the order may differ
D = torch.float64


class Grouped(nn.Module):
    """conv → tanh → grouped conv (``groups`` groups) → tanh → mean → Linear."""

    def __init__(self, dim: int, groups: int, *, bias: bool = True) -> None:
        super().__init__()
        conv = nn.Conv2d if dim == 2 else nn.Conv1d
        self.c1 = conv(2, 6, 3, padding=1)
        self.gc = conv(6, 6, 3, padding=1, groups=groups, bias=bias)
        self.head = nn.Linear(6, 4)
        self.dims = tuple(range(2, 2 + dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.gc(torch.tanh(self.c1(x))))
        return self.head(h.mean(self.dims))


class Split(nn.Module):
    """`Grouped` with the grouped convolution replaced by one plain convolution per group."""

    def __init__(self, net: Grouped) -> None:
        super().__init__()
        self.c1, self.head, self.dims = net.c1, net.head, net.dims
        self.groups = net.gc.groups
        self.parts = nn.ModuleList()
        for view in group_views(net.gc):
            conv = type(view)(*view.weight.shape[1::-1][:2], view.kernel_size, padding=1)
            conv.weight = nn.Parameter(view.weight.clone())
            conv.bias = None if view.bias is None else nn.Parameter(view.bias.clone())
            self.parts.append(conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.c1(x)).chunk(self.groups, dim=1)
        y = torch.cat([p(hg) for p, hg in zip(self.parts, h, strict=True)], 1)
        return self.head(torch.tanh(y).mean(self.dims))


def _data(dim: int, n: int = 6) -> torch.Tensor:
    shape = (n, 2, 5, 4) if dim == 2 else (n, 2, 7)
    return torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=D)


@pytest.mark.parametrize(("dim", "groups", "bias"), [(2, 3, True), (2, 6, False), (1, 2, True)])
def test_group_factors_equal_those_of_one_plain_conv_per_group(dim, groups, bias) -> None:
    torch.manual_seed(0)
    net = Grouped(dim, groups, bias=bias).to(D).eval()
    split = Split(net).to(D).eval()
    x = _data(dim)
    torch.testing.assert_close(net(x), split(x), rtol=0, atol=ATOL_FACTORS)
    for family in (Categorical(), Gaussian()):
        fg, fs = kfac_factors(net, x, family), kfac_factors(split, x, family)
        assert sorted(fg.blocks) == sorted(["c1", "head"] + [f"gc[{g}]" for g in range(groups)])
        for g in range(groups):
            a, b = fg[f"gc[{g}]"], fs[f"parts.{g}"]
            torch.testing.assert_close(a.A, b.A, rtol=0, atol=ATOL_FACTORS)
            torch.testing.assert_close(a.G, b.G, rtol=0, atol=ATOL_FACTORS)
            assert (a.weight_shape, a.has_bias, a.n_positions) == (
                b.weight_shape,
                b.has_bias,
                b.n_positions,
            )
        torch.testing.assert_close(fg["c1"].G, fs["c1"].G, rtol=0, atol=ATOL_FACTORS)


def _depthwise_net(activation: type[nn.Module] = nn.Tanh) -> nn.Sequential:
    """conv → activation → depthwise conv → tanh → pointwise conv → tanh → mean → Linear."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1),
        activation(),
        nn.Conv2d(6, 6, 3, padding=1, groups=6),
        nn.Tanh(),
        nn.Conv2d(6, 8, 1),
        nn.Tanh(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ).to(D)


def _dead_channel_net(channel: int = 2) -> nn.Module:
    """`_depthwise_net` with ReLU and the first conv's output channel ``channel`` dead (zero
    weights, bias −1): its depthwise filter sees zeros on every input."""
    net = _depthwise_net(nn.ReLU)
    with torch.no_grad():
        net[0].weight[channel] = 0.0
        net[0].bias[channel] = -1.0
    return net.eval()


def test_dead_input_channel_reads_its_depthwise_filter_as_flat() -> None:
    net, x = _dead_channel_net(), torch.randn(24, 1, 6, 6, dtype=D)
    reading = read(net, x, Categorical(), progress=False)
    assert all(nc.name != "2" for nc in reading.not_covered)
    dw = [d for d in reading.directions if d.layers == ("2",)]
    assert dw and all(d.detector == "kfac-A" and d.info["group"] == 2 for d in dw)
    assert all(d.klass == "flat_gauge" for d in dw)
    # A of the dead group is e_b e_bᵀ (bias only): the 9 taps are its kernel, 2 kept (the cap)
    assert dw[0].info["truncated"] == {"cap": 2, "found": 9, "kept": 2}
    assert reading.note == (
        "grouped convolutions (2) are read per group: a dead unit feeding one, or fed by one, "
        "shows as one-sided records on each side, not as one duality chain; detector caps left "
        "14 found direction(s) unread (duality 1, kfac-A 13) on 3 (detector, layer) pair(s) "
        "(meta['truncated'] names them)"
    )


def test_unread_depthwise_output_channel_reads_as_its_group_kfac_g_flat() -> None:
    """The pointwise conv ignores depthwise channel 3 (zero column): that group's G vanishes,
    so its filter direction is a flat ``kfac-G`` candidate of group 3."""
    net = _depthwise_net()
    with torch.no_grad():
        net[4].weight[:, 3] = 0.0
    reading = read(net.eval(), torch.randn(24, 1, 6, 6, dtype=D), Categorical(), progress=False)
    dw = [d for d in reading.directions if d.layers == ("2",)]
    assert [(d.detector, d.info["group"], d.klass) for d in dw] == [("kfac-G", 3, "flat_gauge")]


def test_candidates_live_in_their_group_rows_and_the_cap_is_per_module() -> None:
    net, x = _dead_channel_net(), torch.randn(24, 1, 6, 6, dtype=D)
    ctx = DetectionContext.from_model(net, x, Categorical())
    cands = GroupedConvDetector(max_one_sided=1).propose("2", net[2], ctx)
    assert [c.detector for c in cands] == ["kfac-A"]
    (c,) = cands
    w = c.u["2.weight"]
    assert w.shape == net[2].weight.shape and float(w[2].norm()) == pytest.approx(
        1.0, abs=ATOL_FACTORS
    )
    assert float(torch.cat([w[:2], w[3:]]).abs().max()) == 0.0 and float(c.u["2.bias"][2]) == 0.0
    assert c.info["truncated"] == {"cap": 1, "found": 9, "kept": 1}
    # moving the dead channel's filter changes no output (the input it reads is zero)
    moved = _dead_channel_net()
    with torch.no_grad():
        moved[2].weight.add_(3.0 * w)
    torch.testing.assert_close(moved(x), net(x), rtol=0, atol=0)


def test_embed_group_direction_places_the_group_rows() -> None:
    gc = nn.Conv1d(4, 6, 3, groups=2)
    u = {"gc[1].weight": torch.ones(3, 2, 3), "gc[1].bias": torch.full((3,), 2.0)}
    full = embed_group_direction("gc", gc, 1, u)
    assert torch.equal(full["gc.weight"][3:], u["gc[1].weight"])
    assert float(full["gc.weight"][:3].abs().sum()) == 0.0
    assert full["gc.bias"].tolist() == [0.0, 0.0, 0.0, 2.0, 2.0, 2.0]


@pytest.mark.parametrize("groups", [1, 2])
def test_same_and_valid_padding_read_like_the_explicit_padding(groups: int) -> None:
    """``padding="same"`` (odd kernel) and ``"valid"`` are the symmetric zero paddings 1 and 0:
    the factors equal those of the same conv with integer padding."""
    torch.manual_seed(0)
    x = torch.randn(5, 2, 4, 4, dtype=D)
    for text, number in (("same", 1), ("valid", 0)):
        convs = []
        for padding in (text, number):
            torch.manual_seed(1)
            conv = nn.Conv2d(2, 4, 3, groups=groups, padding=padding)
            side = 4 if number else 2
            convs.append(nn.Sequential(conv, nn.Tanh(), nn.Flatten(), nn.Linear(4 * side**2, 3)))
        f_text, f_number = (kfac_factors(c.to(D).eval(), x, Categorical()) for c in convs)
        assert sorted(f_text.blocks) == sorted(f_number.blocks)
        for name in f_text.blocks:
            torch.testing.assert_close(f_text[name].A, f_number[name].A, rtol=0, atol=0)
            torch.testing.assert_close(f_text[name].G, f_number[name].G, rtol=0, atol=0)


@pytest.mark.parametrize(("groups", "dilation", "kernel"), [(1, 2, 3), (2, 3, 3), (1, 1, 5)])
def test_conv1d_same_padding_with_dilation(groups: int, dilation: int, kernel: int) -> None:
    """Conv1d ``padding="same"``: ``dilation·(k − 1)/2`` zeros on each side."""
    x = torch.randn(5, 2, 11, dtype=D, generator=torch.Generator().manual_seed(2))
    pad = dilation * (kernel - 1) // 2
    facs = []
    for padding in ("same", pad):
        torch.manual_seed(1)
        conv = nn.Conv1d(2, 4, kernel, dilation=dilation, groups=groups, padding=padding)
        net = nn.Sequential(conv, nn.Tanh(), nn.Flatten(), nn.Linear(44, 3)).to(D).eval()
        facs.append(kfac_factors(net, x, Categorical()))
    assert sorted(facs[0].blocks) == sorted(facs[1].blocks)
    for name in facs[0].blocks:
        torch.testing.assert_close(facs[0][name].A, facs[1][name].A, rtol=0, atol=0)
        torch.testing.assert_close(facs[0][name].G, facs[1][name].G, rtol=0, atol=0)


@pytest.mark.parametrize("groups", [1, 2])
def test_asymmetric_or_circular_padding_is_not_covered_with_the_reason(groups: int) -> None:
    even = nn.Conv2d(2, 4, 2, groups=groups, padding="same")  # torch pads one more on the right
    circular = nn.Conv2d(2, 4, 3, groups=groups, padding=1, padding_mode="circular")
    for conv in (even, circular):
        assert not is_grouped_conv(conv)
        net = nn.Sequential(conv, nn.Flatten(), nn.Linear(64, 3)).to(D).eval()
        reading = read(net, torch.randn(5, 2, 4, 4, dtype=D), Categorical(), progress=False)
        ((name, reason),) = [(nc.name, nc.reason) for nc in reading.not_covered]
        assert name == "0" and reason.startswith(
            f"convolution with padding={conv.padding!r}, padding_mode={conv.padding_mode!r}: the "
            "read needs the same zero padding on both sides"
        )
    assert not is_grouped_conv(nn.Conv2d(4, 4, 3))


class _FunctionalGrouped(nn.Module):
    """A grouped conv whose weights are applied through ``F.conv1d``: never called as a module."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv1d(4, 4, 3, groups=2)
        self.head = nn.Linear(4 * 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.conv1d(x, self.c.weight, self.c.bias, groups=2)
        return self.head(torch.tanh(h).flatten(1))


def test_grouped_conv_never_called_as_a_module_is_listed() -> None:
    net = _FunctionalGrouped().to(D).eval()
    reading = read(net, torch.randn(6, 4, 7, dtype=D), Categorical(), progress=False)
    assert [(nc.name, nc.reason) for nc in reading.not_covered] == [
        ("c", "not called as a module on the data")
    ]


def test_errors() -> None:
    with pytest.raises(ValueError, match=r"expected a grouped Conv1d/Conv2d; got Conv2d"):
        group_views(nn.Conv2d(2, 2, 3))
    with pytest.raises(ValueError, match=r"max_one_sided"):
        GroupedConvDetector(max_one_sided=0)
    with pytest.raises(ValueError, match=r"max_joint"):
        GroupedConvDetector(max_joint=0)
