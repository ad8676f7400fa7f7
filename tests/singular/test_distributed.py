"""Data-parallel read: 2 gloo processes on one machine give the single-process Reading (issue 8)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from neuromanifold.cells.planted import planted_conv
from neuromanifold.singular.distributed import PER_RANK_META as PASS_COUNTS_PER_RANK
from neuromanifold.singular.distributed import (
    all_gather_union,
    is_main_process,
    launch_local,
    launched_by_torchrun,
    rank,
    read_sharded,
    shard_data,
    shard_slice,
    world_size,
)
from neuromanifold.singular.family import Gaussian

RTOL_SUMS = 1e-12  # all-reduced sums vs one process: only the summation order differs
# The candidate directions are eigenvectors of the all-reduced factors, which differ from the
# single-process factors in the last bits (measured ≈ 2e-15 on the eigenvectors of planted_mlp).
# Along a dead direction F(t) ≈ a²t², and a rounding-level live component ε of u adds ≈ 2εb/(ta)
# relative at the bottom of the grid (t ≈ 1e-4): ≈ 1e-11. Observed on planted_mlp: 5e-12.
RTOL_PERTURBED_DIRECTION = 1e-9
FACTORY = "neuromanifold.cells.planted:planted_conv"
PER_RANK_META = {"rank", "shard", "n_samples_local", "n_forward_passes", "n_backward_passes"}


def _close(a: float, b: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def test_two_gloo_processes_give_the_single_process_reading() -> None:
    net = planted_conv()
    single = read_sharded(net.model, net.data, net.family, progress=False).to_dict()
    per_rank = [r["reading"] for r in launch_local(2, FACTORY, read_kwargs={"progress": False})]
    assert single["directions"], "the planted net must yield directions to compare"
    n = net.data.shape[0]
    for r, reading in enumerate(per_rank):
        assert reading["meta"]["world_size"] == 2 and reading["meta"]["rank"] == r
        assert reading["meta"]["n_samples"] == n == single["meta"]["n_samples"]
        sl = shard_slice(n, r, 2)
        assert reading["meta"]["shard"] == [sl.start, sl.stop]
        assert [
            (d["layers"], d["detector"], d["k"], d["class"]) for d in reading["directions"]
        ] == [(d["layers"], d["detector"], d["k"], d["class"]) for d in single["directions"]]
        for d, s in zip(reading["directions"], single["directions"], strict=True):
            assert d["window"] == s["window"]
            assert d["sweep"]["t"] == s["sweep"]["t"]
            assert _close(d["sweep"]["floor"], s["sweep"]["floor"], RTOL_SUMS)
            for f_dist, f_one in zip(d["sweep"]["F"], s["sweep"]["F"], strict=True):
                assert _close(f_dist, f_one, RTOL_SUMS), (f_dist, f_one)
    # every rank holds the same decisions and the same all-reduced values; quantities each rank
    # computes locally from identical inputs (e.g. a gauge direction's offset |uᵀθ0|) may differ in
    # the last bit (observed: 0.8131602186959695 vs …697), since vectorised dot products need not
    # sum in the same order in two processes
    strip = [
        {**r, "meta": {k: v for k, v in r["meta"].items() if k not in PER_RANK_META}}
        for r in per_rank
    ]
    _assert_same(strip[0], strip[1], RTOL_SUMS)


def _assert_same(a: object, b: object, rtol: float, path: str = "") -> None:
    """Equal structure and non-float leaves; float leaves equal to ``rtol`` relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _assert_same(a[key], b[key], rtol, f"{path}.{key}")
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, rtol, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == b or _close(a, b, rtol), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.mark.parametrize(("n", "world"), [(10, 3), (7, 7), (256, 2), (5, 1)])
def test_shards_are_contiguous_balanced_and_cover_the_probe_set(n: int, world: int) -> None:
    slices = [shard_slice(n, r, world) for r in range(world)]
    assert [i for s in slices for i in range(s.start, s.stop)] == list(range(n))
    sizes = [s.stop - s.start for s in slices]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_shard_data_splits_pairs_and_without_group_returns_everything() -> None:
    x, y = torch.arange(10.0).reshape(5, 2), torch.arange(5)
    xs, ys = shard_data((x, y), rank=1, world=2)
    torch.testing.assert_close(xs, x[2:5], rtol=0, atol=0)
    torch.testing.assert_close(ys, y[2:5], rtol=0, atol=0)
    assert shard_data(x).data_ptr() == x.data_ptr() and shard_data(x).shape == x.shape
    assert (rank(), world_size(), is_main_process()) == (0, 1, True)


def test_shard_errors() -> None:
    with pytest.raises(ValueError, match=r"the probe set is empty: the read needs at least one"):
        shard_slice(0, 0, 1)
    with pytest.raises(ValueError, match=r"3 samples but there are 4 ranks"):
        shard_slice(3, 0, 4)
    with pytest.raises(ValueError, match=r"0 ≤ rank < world; got rank=2, world=2"):
        shard_slice(10, 2, 2)
    with pytest.raises(TypeError, match=r"n must be an int; got float"):
        shard_slice(10.0, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"an \(X, y\) tuple; got a sequence of length 3"):
        shard_data([1, 2, 3])
    with pytest.raises(TypeError, match=r"data must be a Tensor \(N, \.\.\.\) or a pair"):
        shard_data([1, 2])
    # s16 trial Y #6: the whole data's sizes, not rank 1's shard's "(2,) … N = 5"
    x, y = torch.zeros(10, 3), torch.zeros(7, dtype=torch.long)
    labels = r"y have shape \(7,\); expected a leading dimension N = 10"
    with pytest.raises(ValueError, match=labels):
        shard_data((x, y), rank=1, world=2)


def test_union_without_group_and_torchrun_detection() -> None:
    torch.testing.assert_close(
        all_gather_union(torch.tensor([3, 1, 3, 2])), torch.tensor([1, 2, 3])
    )
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    assert launched_by_torchrun(env)
    assert not launched_by_torchrun({k: v for k, v in env.items() if k != "MASTER_PORT"})


def test_launch_local_errors() -> None:
    with pytest.raises(ValueError, match=r"world must be a positive int; got 0"):
        launch_local(0, FACTORY)
    with pytest.raises(
        ValueError, match=r"factory must be 'package.module:function'; got 'nocolon'"
    ):
        launch_local(1, "nocolon")


def wrong_width_net() -> SimpleNamespace:
    """Factory for `launch_local`: a model taking 5 features and 12 probe samples of 4."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    return SimpleNamespace(
        model=model.double(), data=torch.randn(12, 4, dtype=torch.float64), family=Gaussian()
    )


def test_launch_local_says_when_the_warm_up_read_fails() -> None:
    """The forward error of the warm-up read quotes the warm-up's 2 samples per rank: the message
    says it came from the warm-up (before, the user saw "data of shape (2, 4)" for a probe set
    of 12 and no word of a warm-up; s19 trial AK)."""
    with pytest.raises(ValueError) as err:
        launch_local(1, "test_distributed:wrong_width_net", read_kwargs={"progress": False})
    message = str(err.value)
    assert message.startswith(
        "the warm-up read on the first 2 of 12 samples (before the timed read) failed: "
    ), message
    assert "data of shape (2, 4) does not fit the model" in message


def test_torchrun_cli_reads_on_two_ranks_and_only_rank_zero_writes(tmp_path) -> None:
    """``torchrun --nproc_per_node 2 -m neuromanifold read`` (gloo) equals the in-process read."""
    import json
    import shutil
    import subprocess

    from neuromanifold.cells.planted import planted_mlp
    from neuromanifold.singular.read import read

    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    out = tmp_path / "reading.json"
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "neuromanifold", "read"]
    cmd += ["--model", "zoo:planted-mlp", "--json", str(out)]
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote") == 1  # rank 0 only
    dist_reading = json.loads(out.read_text())
    net = planted_mlp()
    single = read(net.model, net.data, net.family, progress=False).to_dict()
    meta = dist_reading["meta"]
    assert meta["world_size"] == 2 and meta["rank"] == 0
    assert meta["n_samples"] == net.data.shape[0]
    sl = shard_slice(net.data.shape[0], 0, 2)
    assert meta["shard"] == [sl.start, sl.stop] and meta["n_samples_local"] == sl.stop - sl.start
    assert set(meta["per_rank"]) == {"n_forward_passes", "n_certify_passes", "n_backward_passes"}
    pairs = zip(dist_reading["directions"], single["directions"], strict=True)
    for d, s in pairs:
        assert (d["layers"], d["k"], d["class"], d["window"]) == (
            s["layers"],
            s["k"],
            s["class"],
            s["window"],
        )
        for a, b in zip(d["sweep"]["F"], s["sweep"]["F"], strict=True):
            assert _close(a, b, RTOL_PERTURBED_DIRECTION), (a, b)


class _ResidualReLU(torch.nn.Module):
    """``fc2(relu(fc1 x)) + Σ relu(fc1 x)``: the ReLU output also enters a sum outside ``fc2``, so
    the per-unit rescaling of ``fc1``/``fc2`` is no symmetry wherever a unit is active."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        return self.fc2(h) + h.sum(-1, keepdim=True)


def residual_relu_net() -> SimpleNamespace:
    """Factory for `launch_local` (this module is importable in the spawned ranks): positive
    ``fc1`` weights without bias, and a probe set whose first half is negative (every unit
    inactive: rank 0's shard sees no broken rescale) and second half positive (rank 1's does)."""
    torch.manual_seed(0)
    model = _ResidualReLU().double()
    with torch.no_grad():
        model.fc1.weight.uniform_(0.5, 1.5)
        model.fc1.bias.zero_()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(32, 3, generator=gen, dtype=torch.float64) + 0.1
    return SimpleNamespace(model=model, data=torch.cat([-x[:16], x[16:]]), family=Gaussian())


def test_ranks_certify_gauges_on_the_whole_probe_set() -> None:
    """Rank 0 alone would certify the ReLU rescale (its shard never activates a unit); the
    certification is all-reduced, so both ranks reject it, like the single process, and read the
    same directions (before, rank 0 proposed an extra candidate and the collectives diverged)."""
    net = residual_relu_net()
    kw = {"progress": False}
    single = read_sharded(net.model, net.data, net.family, **kw).to_dict()
    assert "relu-rescale" not in {d["detector"] for d in single["directions"]}
    factory = "test_distributed:residual_relu_net"
    per_rank = [r["reading"] for r in launch_local(2, factory, read_kwargs=kw)]
    for reading in per_rank:
        assert [(d["detector"], d["class"]) for d in reading["directions"]] == [
            (d["detector"], d["class"]) for d in single["directions"]
        ]


class _PlainLinear(torch.nn.Linear):
    """``x Wᵀ + b`` through its own ``forward``: read as ``nn.Linear`` where every call agrees."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias


class _Routed(torch.nn.Module):
    """An expert (a Linear subclass) applied only to the samples with ``x₀ > 0``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.expert = _PlainLinear(4, 4)
        self.fc2 = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        mask = x[:, 0] > 0
        if mask.any():
            h = h.clone()
            h[mask] = self.expert(h[mask])
        return self.fc2(h)


def routed_expert_net() -> SimpleNamespace:
    """Factory for `launch_local`: rank 0's shard is routed to the expert, rank 1's never."""
    torch.manual_seed(0)
    x = torch.randn(32, 3, dtype=torch.float64)
    x[:16, 0], x[16:, 0] = x[:16, 0].abs(), -x[16:, 0].abs()
    return SimpleNamespace(model=_Routed().double(), data=x, family=Gaussian())


def test_ranks_agree_on_the_linear_subclass_rewrite() -> None:
    """Rank 1 never calls the expert; the rewrite is decided over the ranks, so both read it as
    ``nn.Linear`` like the single process (before, only rank 0 did, and the factor collectives
    of the two ranks did not match)."""
    net = routed_expert_net()
    kw = {"progress": False}
    single = read_sharded(net.model, net.data, net.family, **kw).to_dict()
    assert single["meta"]["linear_subclass_as_linear"] == ["expert"]
    per_rank = launch_local(2, "test_distributed:routed_expert_net", read_kwargs=kw)
    for out in per_rank:
        reading = out["reading"]
        assert reading["meta"]["linear_subclass_as_linear"] == ["expert"]
        assert reading["not_covered"] == single["not_covered"] == []
        assert [(d["detector"], d["class"]) for d in reading["directions"]] == [
            (d["detector"], d["class"]) for d in single["directions"]
        ]


def test_launch_retries_when_its_port_was_taken(monkeypatch) -> None:
    """A port taken between choosing and binding it fails the launch with "address already in
    use": it is retried on a new port; another error is raised at once."""
    import torch.multiprocessing as mp

    calls = []

    def fake_start(fn, *, args, **kwargs):
        calls.append(args[1])  # the port
        if len(calls) == 1:
            raise RuntimeError("The server socket has failed to listen: Address already in use")
        if len(calls) == 3:
            raise RuntimeError("something else")
        import json
        from pathlib import Path

        Path(args[5], "rank0.json").write_text(json.dumps({"reading": {}, "seconds": 0.0}))

    monkeypatch.setattr(mp, "start_processes", fake_start)
    assert launch_local(1, FACTORY) == [{"reading": {}, "seconds": 0.0}]
    assert len(calls) == 2
    with pytest.raises(RuntimeError, match="something else"):
        launch_local(1, FACTORY)


def test_ranks_agree_on_the_memory_plan() -> None:
    """7 samples on 2 ranks (shards of 3 and 4): each rank measures its own shard, the costs are
    all-reduced with MAX, so both hold the same plan, made for the larger shard (before, each
    rank planned alone: different plans, and a budget between the two estimates was refused on
    one rank while the other went on into the next collective)."""
    kw = {"progress": False, "max_memory": "2GB", "max_directions": 1}
    per_rank = launch_local(
        2, "neuromanifold.cells.planted:planted_mlp", factory_kwargs={"n": 7}, read_kwargs=kw
    )
    plans = [out["reading"]["meta"]["memory_plan"] for out in per_rank]
    assert plans[0] == plans[1] and plans[0]["n_samples"] == 4
    assert plans[0]["budget"] == 2 * 10**9
    for out in per_rank:
        assert out["reading"]["meta"]["per_rank"] == list(PASS_COUNTS_PER_RANK)


def nan_in_the_second_shard() -> SimpleNamespace:
    """Factory for `launch_local`: `planted_mlp` on 7 samples (shards [0, 3) and [3, 7)) with a
    NaN in sample 6, which only rank 1 holds."""
    from neuromanifold.cells.planted import planted_mlp

    net = planted_mlp(n=7)
    x = net.data.clone()
    x[6, 0] = float("nan")
    return SimpleNamespace(model=net.model, data=x, family=net.family)


def test_a_bad_shard_stops_every_rank_with_the_global_sample_index() -> None:
    """Rank 1 alone sees the NaN; the ranks agree on their input checks before the first
    collective, so both raise, naming sample 6 of the whole probe set (before, rank 1 named its
    local index 3 and rank 0 went on into the factor all-reduce and died in gloo). The rank's
    ValueError reaches the caller as a ValueError (s16 trial Y #6)."""
    with pytest.raises(
        ValueError, match=r"^data inputs hold NaN or Inf values \(first in sample 6\)"
    ):
        launch_local(2, "test_distributed:nan_in_the_second_shard", read_kwargs={"progress": False})


def _torchrun_read(data: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node 2 -m neuromanifold read --model zoo:planted-mlp --data …``."""
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "neuromanifold", "read"]
    cmd += ["--model", "zoo:planted-mlp", "--data", str(data)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


def test_torchrun_cli_prints_an_input_error_once_with_the_global_index(tmp_path) -> None:
    """Bad probe data under torchrun: one error line (rank 0's), naming the sample's index in the
    whole probe set, and no rank dies in a collective; a probe set smaller than the world is
    reported once too."""
    from neuromanifold.cells.planted import planted_mlp

    x = planted_mlp().data[:7].clone()
    x[6, 0] = float("nan")
    torch.save(x, tmp_path / "x7nan.pt")
    torch.save(x[:1].nan_to_num(), tmp_path / "x1.pt")
    bad = _torchrun_read(tmp_path / "x7nan.pt", tmp_path)
    assert bad.returncode != 0
    assert bad.stderr.count("error: data inputs hold NaN or Inf values") == 1, bad.stderr[-3000:]
    assert "(first in sample 6)" in bad.stderr
    assert "Connection closed by peer" not in bad.stderr
    small = _torchrun_read(tmp_path / "x1.pt", tmp_path)
    assert small.returncode != 0
    assert small.stderr.count("error: the probe set has 1 samples but there are 2 ranks") == 1


def nearly_dead_mc_net() -> SimpleNamespace:
    """80 classes (> MAX_EXACT_CLASSES: sampled G labels) and a GELU unit scaled by 1e-3, so the
    read's duality direction comes from the sampled G's eigenvectors (trial I, finding 1)."""
    from torch import nn

    from neuromanifold.singular.family import Categorical

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 10), nn.GELU(), nn.Linear(10, 80))
    with torch.no_grad():
        m[2].weight[0].mul_(1e-3)
        m[2].bias[0] = 0.0
        m[4].weight[:, 0].mul_(1e-3)
    x = torch.randn(96, 6, generator=gen, dtype=torch.float64)
    return SimpleNamespace(model=m.double().eval(), data=x, family=Categorical())


def test_two_ranks_agree_with_one_process_when_factor_labels_are_sampled() -> None:
    """User trial I #1: with more than 64 classes the hidden layers' G comes from sampled labels
    (``factor_fisher = "mc(1)"``). One label stream seeded per process, in shard order, gave rank
    1's first sample the labels one process gave sample 0: the direction found along the nearly
    dead unit, and the two-rank sweeps, differed by about 10 %. Labels keyed by sample content
    make the sharded factors the same sums."""
    net = nearly_dead_mc_net()
    single = read_sharded(net.model, net.data, net.family, progress=False).to_dict()
    assert single["meta"]["factor_fisher"] == "mc(1)" and single["directions"]
    kw = {"progress": False}
    ranks = launch_local(2, "test_distributed:nearly_dead_mc_net", read_kwargs=kw)
    for reading in (r["reading"] for r in ranks):
        assert [
            (d["layers"], d["detector"], d["k"], d["class"]) for d in reading["directions"]
        ] == [(d["layers"], d["detector"], d["k"], d["class"]) for d in single["directions"]]
        for d, s in zip(reading["directions"], single["directions"], strict=True):
            for f_dist, f_one in zip(d["sweep"]["F"], s["sweep"]["F"], strict=True):
                assert _close(f_dist, f_one, RTOL_PERTURBED_DIRECTION), (f_dist, f_one)


def test_a_ranks_value_error_reaches_the_caller_in_one_line() -> None:
    """s16 trial Y #6: three processes on two samples raised torch's ProcessRaisedException
    wrapping the child's traceback; the CLI gives one line, and so does launch_local now."""
    with pytest.raises(ValueError, match=r"^the probe set has 2 samples but there are 3 ranks"):
        launch_local(
            3,
            "neuromanifold.cells.planted:planted_mlp",
            factory_kwargs={"n": 2},
            read_kwargs={"progress": False},
        )
