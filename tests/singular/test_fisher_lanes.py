"""Lane policy of the batched directional Fisher: the activation probe, chunks, lanes, exactness.

The policy only decides how samples and lanes (directions, t-values) are grouped into passes, so
the tests check (a) the probe's byte count against closed forms, (b) the chunk/lane arithmetic,
and (c) that every grouping gives the same values as one direction / one t at a time and as the
per-sample-gradient oracle.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

import neuromanifold.singular.fisher as fisher_mod
import neuromanifold.singular.passes as passes_mod
from neuromanifold.singular import Categorical, Gaussian
from neuromanifold.singular._validate import prepare
from neuromanifold.singular.fisher import directional_fisher, directional_fisher_reference
from neuromanifold.singular.passes import (
    activation_bytes_per_sample,
    lane_chunk,
    line_lanes,
    tangent_keys,
)
from neuromanifold.singular.sweep import sweep
from neuromanifold.zoo.models import ViTConfig, build_model

RTOL_GROUPING = 1e-12  # regrouping samples/lanes changes only the order of float64 sums
RTOL_ORACLE = 1e-10  # JVP vs per-sample gradients (as in test_fisher.py)
ATOL_ORACLE = 1e-14

D = torch.float64
HIDDEN = 50
BYTES_F64 = 8


def wide_mlp() -> nn.Module:
    """``4 → 50 → 3``: the widest activation is 50 float64 values per sample (400 bytes)."""
    return nn.Sequential(nn.Linear(4, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 3)).to(D)


class Tokens(nn.Module):
    """Token-wise MLP on ``(N, T, 4)``, mean-pooled: the widest activation is ``T·50`` values."""

    def __init__(self) -> None:
        super().__init__()
        self.net = wide_mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).mean(1)


class BatchLoop(nn.Module):
    """Calls a batch-size-dependent number of torch functions (a Python loop over samples)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, HIDDEN)
        self.head = nn.Linear(HIDDEN, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        rows = [torch.tanh(h[i]) for i in range(x.shape[0])]
        return self.head(torch.stack(rows))


class FixedBatch(nn.Module):
    """Refuses every batch size but 6 (so the 2- and 3-sample probe fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = wide_mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != 6:
            raise RuntimeError(f"expected a batch of 6, got {x.shape[0]}")
        return self.net(x)


def directions(model: nn.Module, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        {k: torch.randn(v.shape, generator=gen, dtype=D) for k, v in model.named_parameters()}
        for _ in range(count)
    ]


def prep_of(model: nn.Module, x: torch.Tensor):
    return prepare(model, dict(model.named_parameters()), x)


def test_probe_counts_the_widest_activation() -> None:
    model = wide_mlp()
    assert activation_bytes_per_sample(model, prep_of(model, torch.randn(9, 4, dtype=D))) == (
        HIDDEN * BYTES_F64
    )


def test_probe_scales_with_the_input_shape_and_is_cached_per_shape() -> None:
    model = Tokens().to(D)
    for t in (3, 7):
        prep = prep_of(model, torch.randn(5, t, 4, dtype=D))
        assert activation_bytes_per_sample(model, prep) == t * HIDDEN * BYTES_F64
    cached = passes_mod._ACTIVATION_CACHE[model]
    assert sorted(key[0] for key in cached) == [(3, 4), (7, 4)]


def test_probe_upper_bound_when_the_call_sequence_depends_on_the_batch() -> None:
    """2 and 3 samples make 2 and 3 tanh calls: the bound ``max bytes₃ / 3`` is then used."""
    model = BatchLoop().to(D)
    got = activation_bytes_per_sample(model, prep_of(model, torch.randn(8, 4, dtype=D)))
    assert got == HIDDEN * BYTES_F64  # the (3, 50) linear output over 3 samples


def test_probe_failure_leaves_the_pass_unsplit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 1)
    model = FixedBatch().to(D)
    x = torch.randn(6, 4, dtype=D)
    prep = prep_of(model, x)
    assert activation_bytes_per_sample(model, prep) is None
    assert lane_chunk(model, prep, 4, None) is None
    assert lane_chunk(model, prep, 4, 3) == 3
    dirs = directions(model, 3)
    batched = directional_fisher(model, dict(model.named_parameters()), dirs, x, Gaussian())
    single = [
        directional_fisher(model, dict(model.named_parameters()), d, x, Gaussian()) for d in dirs
    ]
    torch.testing.assert_close(batched, torch.stack(single), rtol=RTOL_GROUPING, atol=0.0)


def test_single_sample_is_not_probed() -> None:
    model = wide_mlp()
    assert activation_bytes_per_sample(model, prep_of(model, torch.randn(1, 4, dtype=D))) is None


def test_lane_chunk_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    model = wide_mlp()
    prep = prep_of(model, torch.randn(40, 4, dtype=D))
    s = HIDDEN * BYTES_F64
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 5 * 4 * s)  # 20 sample-lanes per pass
    assert lane_chunk(model, prep, 4, None) == 5
    assert lane_chunk(model, prep, 4, 3) == 3  # a caller's chunk_size is never raised
    assert lane_chunk(model, prep, 1, None) == 20
    assert lane_chunk(model, prep, 100, None) == 1  # at least one sample
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 40 * s)
    assert lane_chunk(model, prep, 1, None) is None  # all 40 samples fit one pass


def test_line_lanes_prefers_samples_over_t_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = wide_mlp()
    prep = prep_of(model, torch.randn(40, 4, dtype=D))
    s = HIDDEN * BYTES_F64
    monkeypatch.setattr(passes_mod, "SWEEP_LANE_BYTES", 2**62)  # the CPU cap: next test
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 8 * 40 * s)
    assert line_lanes(model, prep, 8, None) == (8, None)  # 8 lanes of all samples fit
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 3 * 40 * s)
    assert line_lanes(model, prep, 8, None) == (3, None)
    assert line_lanes(model, prep, 8, 10) == (8, 10)  # 8 lanes × 10 samples = 80 ≤ 120
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 25 * s)
    assert line_lanes(model, prep, 8, None) == (1, 25)
    assert line_lanes(model, prep, 1, 7) == (1, 7)


def test_line_lanes_cpu_cap_scales_with_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU a group of t-lanes holds at most ``SWEEP_LANE_BYTES`` per intra-op thread (never
    more than ``LANE_BYTES``); other devices use ``LANE_BYTES`` alone."""
    model = wide_mlp()
    prep = prep_of(model, torch.randn(40, 4, dtype=D))
    s = HIDDEN * BYTES_F64
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 8 * 40 * s)
    monkeypatch.setattr(passes_mod, "SWEEP_LANE_BYTES", 2 * 40 * s)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert line_lanes(model, prep, 8, None) == (2, None)
        torch.set_num_threads(2)
        assert line_lanes(model, prep, 8, None) == (4, None)
        monkeypatch.setattr(passes_mod, "SWEEP_LANE_BYTES", 5 * 40 * s)  # 2·5 > 8: LANE_BYTES
        assert line_lanes(model, prep, 8, None) == (8, None)
    finally:
        torch.set_num_threads(threads)
    off_cpu = type("P", (), {"x": torch.empty(1, device="meta")})()
    assert passes_mod._line_budget(off_cpu) == passes_mod.LANE_BYTES


def fake_cache_tree(root, entries: list[tuple[str, str, str | None]]) -> str:
    """A sysfs-like ``cache`` folder, an ``indexI`` per ``(level, type, size)`` (None: no size)."""
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        if size is not None:
            (d / "size").write_text(size + "\n")
    return str(root)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([("1", "Data", "48K"), ("1", "Instruction", "64K"), ("2", "Unified", "2048K")], 2**21),
        ([("1", "Data", "32K"), ("2", "Unified", "1M"), ("3", "Unified", "480M")], 2**20),
        ([("2", "Data", "512K")], 2**19),
        ([("2", "Instruction", "1M")], None),  # no data cache at level 2
        ([("1", "Data", "48K"), ("3", "Unified", "32M")], None),  # no level 2 at all
        ([("2", "Unified", None)], None),  # size unreadable
        ([("2", "Unified", "large")], None),  # size not a number
        ([("2", "Unified", "0K")], None),
    ],
)
def test_l2_bytes_per_core_reads_the_level_two_data_cache(tmp_path, entries, expected) -> None:
    assert passes_mod.l2_bytes_per_core(fake_cache_tree(tmp_path, entries)) == expected


SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def passes_reimported(monkeypatch: pytest.MonkeyPatch, root: str) -> types.ModuleType:
    """A fresh copy of `neuromanifold.singular.passes` whose import reads ``root`` for sysfs."""
    path = Path(passes_mod.__file__)
    source = path.read_text()
    assert source.count(SYSFS_CACHE) == 1  # the one sysfs path the import reads
    module = types.ModuleType("_passes_fake_sysfs")
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source.replace(SYSFS_CACHE, root), str(path), "exec"), module.__dict__)
    return module


@pytest.mark.parametrize(
    ("entries", "cap"),
    [
        ([("1", "Data", "32K"), ("2", "Unified", "1M")], 3 * 2**18),  # ¾ of 1 MiB
        ([("2", "Data", "4096K")], 3 * 2**20),  # ¾ of 4 MiB
        ([("2", "Instruction", "1M")], 3 * 2**19),  # unreadable: ¾ of the 2 MiB default
    ],
)
def test_sweep_cap_is_a_share_of_the_l2_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path, entries, cap: int
) -> None:
    """The import-time cap through a fake sysfs tree: three quarters of the L2 size it holds, or
    of 2 MiB where no L2 size is found."""
    fresh = passes_reimported(monkeypatch, fake_cache_tree(tmp_path, entries))
    assert fresh.SWEEP_LANE_BYTES == cap
    here = passes_mod.l2_bytes_per_core() or passes_mod.DEFAULT_L2_BYTES
    assert 0 < passes_mod.SWEEP_LANE_BYTES < here  # this machine's cap: a share of its L2


def test_error_bad_chunk_size_in_the_lane_policy() -> None:
    model = wide_mlp()
    prep = prep_of(model, torch.randn(4, 4, dtype=D))
    with pytest.raises(ValueError, match="chunk_size must be a positive int or None; got 0"):
        lane_chunk(model, prep, 2, 0)
    with pytest.raises(ValueError, match="chunk_size must be a positive int or None; got 'a'"):
        line_lanes(model, prep, 2, "a")  # type: ignore[arg-type]


def small_vit() -> tuple[nn.Module, torch.Tensor]:
    model = build_model(ViTConfig(dim=8, depth=1, heads=2, num_classes=4), seed=0).to(D).eval()
    x = torch.randn(13, 1, 8, 8, generator=torch.Generator().manual_seed(3), dtype=D)
    return model, x


@pytest.mark.parametrize("samples_per_pass", [1, 3])
def test_split_batched_directions_match_loop_and_oracle(
    monkeypatch: pytest.MonkeyPatch, samples_per_pass: int
) -> None:
    """Forced splits of 5 direction lanes on a small zoo ViT (13 samples): 1 sample per pass
    (a 1-byte budget), and 3 samples per pass (a budget of exactly ``5·3·s`` bytes)."""
    model, x = small_vit()
    s = activation_bytes_per_sample(model, prep_of(model, x))
    assert s is not None
    lane_bytes = 1 if samples_per_pass == 1 else 5 * samples_per_pass * s
    monkeypatch.setattr(passes_mod, "LANE_BYTES", lane_bytes)
    assert lane_chunk(model, prep_of(model, x), 5, None) == samples_per_pass
    chunks: list[int | None] = []

    def spy(*args, **kwargs):
        chunks.append(lane_chunk(*args, **kwargs))
        return chunks[-1]

    monkeypatch.setattr(fisher_mod, "lane_chunk", spy)
    params = dict(model.named_parameters())
    dirs = directions(model, 5, seed=1)
    fam = Categorical()
    batched = directional_fisher(model, params, dirs, x, fam)
    assert chunks == [samples_per_pass]  # the batched call split its samples as planned
    single = torch.stack([directional_fisher(model, params, d, x, fam) for d in dirs])
    torch.testing.assert_close(batched, single, rtol=RTOL_GROUPING, atol=0.0)
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 2**62)
    unsplit = directional_fisher(model, params, dirs, x, fam)
    torch.testing.assert_close(batched, unsplit, rtol=RTOL_GROUPING, atol=0.0)
    ref = directional_fisher_reference(model, params, dirs, x, fam, chunk_size=5)
    torch.testing.assert_close(batched, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


def test_sweep_lanes_lowered_by_the_policy_keep_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = small_vit()
    params = dict(model.named_parameters())
    u = directions(model, 1, seed=2)[0]
    grid = [0.01, 0.03, 0.1, 0.3, 1.0]
    one = sweep(model, params, u, x, Categorical(), grid=grid, t_batch=1)
    wide = sweep(model, params, u, x, Categorical(), grid=grid, t_batch=4)
    assert wide.t_batched and not one.t_batched
    s = activation_bytes_per_sample(model, prep_of(model, x))
    monkeypatch.setattr(passes_mod, "LANE_BYTES", 3 * s)  # a pass holds 3 samples: 1 lane
    narrow = sweep(model, params, u, x, Categorical(), grid=grid, t_batch=4)
    assert not narrow.t_batched
    for other in (wide, narrow):
        for a, b in zip(one.F, other.F, strict=True):
            assert b == pytest.approx(a, rel=RTOL_GROUPING, abs=0.0)


def test_zero_tangents_downstream_leave_the_values_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`tangent_keys` gives every parameter registered after the direction's first one a zero
    tangent; Fisher values and sweeps equal those of a pass with tangents on the touched
    parameters only (zero tangents add exact zeros; only the kernels differ)."""
    model, x = small_vit()
    params = dict(model.named_parameters())
    names = list(params)
    gen = torch.Generator().manual_seed(5)
    a, b = names[len(names) // 2], names[len(names) // 2 + 3]
    u = {a: torch.randn(params[a].shape, generator=gen, dtype=D)}
    v = {b: torch.randn(params[b].shape, generator=gen, dtype=D)}
    assert tangent_keys(prep_of(model, x).params, [b, a]) == names[names.index(a) :]
    fam = Categorical()
    grid = [0.01, 0.1, 1.0]
    extended = directional_fisher(model, params, [u, v], x, fam)
    line = sweep(model, params, u, x, fam, grid=grid, t_batch=2).F
    monkeypatch.setattr(fisher_mod, "tangent_keys", lambda _p, touched: sorted(touched))
    touched_only = directional_fisher(model, params, [u, v], x, fam)
    line_touched = sweep(model, params, u, x, fam, grid=grid, t_batch=2).F
    torch.testing.assert_close(extended, touched_only, rtol=RTOL_GROUPING, atol=0.0)
    for p, q in zip(line, line_touched, strict=True):
        assert p == pytest.approx(q, rel=RTOL_GROUPING, abs=0.0)


class IntScaled(nn.Module):
    """``lin(x) · k`` with an integer parameter ``k`` registered after the Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.k = nn.Parameter(torch.tensor(3), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.k


def test_integer_parameters_downstream_get_no_tangent() -> None:
    model = IntScaled().to(D)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=D)
    params = dict(model.named_parameters())
    assert tangent_keys(prep_of(model, x).params, ["lin.weight"]) == ["lin.weight", "lin.bias"]
    u = {"lin.weight": torch.ones(2, 3, dtype=D)}
    # F_u = (1/N) Σ_i ‖k · u x_i‖² / σ² with u = 𝟙/√6
    want = (9.0 / 6.0) * float((x.sum(1) ** 2).mean()) * 2
    got = directional_fisher(model, params, u, x, Gaussian())
    assert float(got) == pytest.approx(want, rel=RTOL_ORACLE, abs=0.0)


def test_error_tangent_keys_names_an_unknown_parameter() -> None:
    with pytest.raises(KeyError, match=r"not a parameter: \['c'\]"):
        tangent_keys({"a": torch.zeros(1), "b": torch.zeros(1)}, ["b", "c"])
