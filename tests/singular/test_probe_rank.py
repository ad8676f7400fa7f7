"""`probe_rank`: factors whose side exceeds their contributing rows (kernel forced by N)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.factor_spectrum import factor_spectrum
from neuromanifold.singular.factors import MAX_EXACT_CLASSES, BlockFactors, kfac_factors
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.probe_rank import g_rows, probe_size_note, rank_limited

D = torch.float64


def _block(name: str, d_a: int, d_g: int, n: int, a_rows: int | None, g_rows_: int | None):
    eye_a, eye_g = torch.eye(d_a, dtype=D), torch.eye(d_g, dtype=D)
    return BlockFactors(
        name,
        "linear",
        eye_a,
        eye_g,
        n_samples=n,
        has_bias=False,
        weight_shape=(d_g, d_a),
        n_positions=1,
        fisher="exact",
        a_rank_bound=a_rows,
        g_rank_bound=g_rows_,
    )


def test_constructed_factors_are_listed_when_rows_are_fewer_than_the_side() -> None:
    n = 12
    blocks = {
        "wide_in": _block("wide_in", 40, 8, n, a_rows=n, g_rows_=3 * n),  # A: 12 rows < 40
        "wide_out": _block("wide_out", 8, 50, n, a_rows=n, g_rows_=2 * n),  # G: 24 rows < 50
        "enough": _block("enough", 8, 8, n, a_rows=n, g_rows_=n),  # 12 rows ≥ 8 on both sides
        "unknown": _block("unknown", 40, 40, n, a_rows=None, g_rows_=None),  # no counts: skipped
    }
    limited = rank_limited(blocks)
    assert [(e["layer"], e["factor"]) for e in limited] == [("wide_in", "A"), ("wide_out", "G")]
    for e in limited:
        bf = blocks[e["layer"]]
        side = bf.A if e["factor"] == "A" else bf.G
        rows = bf.a_rank_bound if e["factor"] == "A" else bf.g_rank_bound
        assert e["dim"] == side.shape[0] and e["rows"] == rows < e["dim"]
        assert e["n_min"] == math.ceil(e["dim"] * n / rows)  # rows grow in proportion to N
        assert e["rows"] * e["n_min"] / n >= e["dim"]  # at n_min the rows reach the side
    assert json.loads(json.dumps(limited)) == limited  # JSON-safe, for reading.meta


def test_measured_g_counts_replace_the_stored_bound_and_zero_rows_are_not_listed() -> None:
    n = 12
    blocks = {"b": _block("b", 4, 50, n, a_rows=n, g_rows_=10 * n)}
    assert rank_limited(blocks) == []  # the stored bound 120 ≥ 50
    (entry,) = rank_limited(blocks, {"b": 2 * n})
    assert (entry["factor"], entry["rows"], entry["dim"]) == ("G", 2 * n, 50)
    assert rank_limited(blocks, {"b": 0}) == []  # a G the output never reaches: not N's doing


def test_note_names_the_factors_and_the_largest_n_min() -> None:
    assert probe_size_note([]) == ""
    limited = [
        {"layer": "a", "factor": "G", "dim": 64, "rows": 48, "n_min": 32},
        {"layer": "b", "factor": "A", "dim": 129, "rows": 48, "n_min": 129},
        {"layer": "c", "factor": "G", "dim": 64, "rows": 60, "n_min": 26},
    ]
    note = probe_size_note(limited)
    assert "\n" not in note
    assert "factor G of 'a' has 48 contributing rows for 64 dimensions" in note
    assert "factor A of 'b' has 48 contributing rows for 129 dimensions" in note
    assert "1 more factor(s)" in note and "probe-size artefacts" in note
    n_min = max(e["n_min"] for e in limited)
    assert note.endswith(f"read with N well above {n_min} (where the rows reach the side)")


class _PooledClassifier(nn.Module):
    """Token ids (N, T) → embedding → per-position MLP layer → last position → classifier: the
    head reads one pooled position, as a sequence-classification model does."""

    def __init__(self, vocab: int = 20, d: int = 6, width: int = 16, classes: int = 3) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.fc1 = nn.Linear(d, width)
        self.fc2 = nn.Linear(width, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.tanh(self.fc1(self.emb(x)))[:, -1])


def _ids(n: int, t: int = 4, vocab: int = 20) -> Tensor:
    """Random token ids whose positions hold distinct tokens across samples where ``n ≤ vocab``
    (two samples ending in the same token would give the pooled head one row, not two)."""
    gen = torch.Generator().manual_seed(1)
    return torch.stack([torch.randperm(vocab, generator=gen)[:n] for _ in range(t)], dim=1)


def test_pooled_head_g_rows_are_samples_times_classes_minus_one_and_bound_the_rank() -> None:
    """fc1's G sees only the last position: N·(C − 1) rows (C = 3 classes, exact categorical),
    not the stored N·T·C; the rank of G attains that count (generic weights), so its kernel
    (16 − 10 = 6 directions at N = 5) is forced by N, and vanishes at the listed n_min."""
    torch.manual_seed(0)
    model, n, classes, width = _PooledClassifier().double().eval(), 5, 3, 16
    x = _ids(n)
    factors = kfac_factors(model, x, Categorical())
    counts = g_rows(model, x, Categorical(), factors)
    assert factors["fc1"].g_rank_bound == n * x.shape[1] * classes  # stored: every position
    assert counts["fc1"] == n * (classes - 1)
    assert counts["fc2"] == n * (classes - 1)  # the head, exact: one pooled row per sample
    assert factor_spectrum(factors["fc1"].G).rank == counts["fc1"]
    limited = rank_limited(factors, counts)
    g_entry = next(e for e in limited if (e["layer"], e["factor"]) == ("fc1", "G"))
    assert g_entry["dim"] == width and g_entry["rows"] == counts["fc1"]
    assert all(e["factor"] == "A" or e["layer"] == "fc1" for e in limited)  # fc2's G: 3 ≤ 10
    # with N = n_min the rows reach the side and the factor has no kernel
    n_big = g_entry["n_min"]
    x_big = _ids(n_big)
    big = kfac_factors(model, x_big, Categorical())
    big_counts = g_rows(model, x_big, Categorical(), big)
    assert big_counts["fc1"] >= width
    assert factor_spectrum(big["fc1"].G).rank == width
    assert all((e["layer"], e["factor"]) != ("fc1", "G") for e in rank_limited(big, big_counts))


def test_a_side_rows_are_samples_times_positions() -> None:
    """fc1's A (6 + 1 bias dims) has N·T rows; fc2's A (16 + 1) only N (after the pooling)."""
    torch.manual_seed(0)
    model, n = _PooledClassifier().double().eval(), 5
    x = _ids(n)
    factors = kfac_factors(model, x, Categorical())
    limited = {(e["layer"], e["factor"]): e for e in rank_limited(factors, {})}
    assert ("fc1", "A") not in limited  # 20 rows ≥ 7
    assert limited[("fc2", "A")]["rows"] == n
    assert factor_spectrum(factors["fc2"].A).rank == n


def test_gaussian_rows_count_every_output_coordinate() -> None:
    torch.manual_seed(0)
    model, n, outputs = _PooledClassifier(classes=2).double().eval(), 3, 2
    x = _ids(n)
    factors = kfac_factors(model, x, Gaussian())
    counts = g_rows(model, x, Gaussian(), factors)
    assert counts["fc1"] == n * outputs  # I/σ columns: independent, C of them
    assert factor_spectrum(factors["fc1"].G).rank == counts["fc1"]


class _TinyLM(nn.Module):
    """Token ids (N, T) → embedding → Linear → tanh → head over a vocabulary too large for the
    exact class expectation: sampled labels, the head's G in closed form."""

    def __init__(self, vocab: int, d: int = 4, width: int = 40) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.fc = nn.Linear(d, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.tanh(self.fc(self.emb(x))))


def test_sampled_labels_give_one_row_per_position_and_the_head_keeps_its_closed_form() -> None:
    vocab = MAX_EXACT_CLASSES + 8
    torch.manual_seed(0)
    model, n, t = _TinyLM(vocab).double().eval(), 3, 5
    x = _ids(n, t, vocab)
    factors = kfac_factors(model, x, Categorical())
    assert factors.fisher == "mc(1)"
    counts = g_rows(model, x, Categorical(), factors)
    assert counts["fc"] == n * t  # one sampled label vector per sample, every position
    assert counts["head"] == factors["head"].g_rank_bound  # closed form, not sampled
    assert factor_spectrum(factors["fc"].G).rank == counts["fc"]
    listed = [(e["layer"], e["factor"]) for e in rank_limited(factors, counts)]
    assert ("fc", "G") in listed and ("head", "G") not in listed


def test_batch_must_be_positive() -> None:
    model = _PooledClassifier().double().eval()
    x = _ids(3)
    factors = kfac_factors(model, x, Categorical())
    with pytest.raises(ValueError, match=r"batch must be a positive int; got 0"):
        g_rows(model, x, Categorical(), factors, batch=0)


def test_frozen_parameters_and_an_in_place_activation_are_counted_and_left_as_they_are() -> None:
    """Gaussian, 2 outputs, N = 4: the hidden layer's G gets 4·1·2 = 8 rows (one position), read
    through an in-place ReLU; the caller's frozen parameters stay frozen and unchanged."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 20), nn.ReLU(inplace=True), nn.Linear(20, 2)).double()
    model.eval().requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 3, dtype=D)
    factors = kfac_factors(model, x, Gaussian())
    counts = g_rows(model, x, Gaussian(), factors)
    assert counts["0"] == 4 * 2
    assert factor_spectrum(factors["0"].G).rank == counts["0"]
    assert not any(p.requires_grad for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


class _FlatPooledClassifier(_PooledClassifier):
    """`_PooledClassifier` whose fc1 sees the positions flattened into the sample axis,
    ``(N·T, d)``, as OPT's MLP does."""

    def forward(self, x: Tensor) -> Tensor:
        e = self.emb(x)
        h = torch.tanh(self.fc1(e.reshape(-1, e.shape[-1]))).reshape(*e.shape[:2], -1)
        return self.fc2(h[:, -1])


def test_rows_flattened_over_samples_and_positions_are_counted_per_sample() -> None:
    torch.manual_seed(0)
    model, n, classes = _FlatPooledClassifier().double().eval(), 5, 3
    x = _ids(n)
    factors = kfac_factors(model, x, Categorical())
    counts = g_rows(model, x, Categorical(), factors)
    assert counts["fc1"] == n * (classes - 1)  # one pooled position per sample, as unflattened
    assert factor_spectrum(factors["fc1"].G).rank == counts["fc1"]


class _MaskedMean(nn.Module):
    """Mean of tanh(fc1(embedding)) over the non-zero token ids, then a classifier: the
    positions that carry a gradient are the sample's real tokens (pad id 0 carries none)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: Tensor) -> Tensor:
        real = (x != 0).to(self.fc1.weight.dtype).unsqueeze(-1)
        h = torch.tanh(self.fc1(self.emb(x))) * real
        return self.fc2(h.sum(1) / real.sum(1))


def _masked_model_and_ids() -> tuple[nn.Module, Tensor]:
    """4 samples with one real token, then 4 with three (so the two shards of 2 ranks differ)."""
    torch.manual_seed(0)
    ids = torch.zeros(8, 4, dtype=torch.long)
    ids[:4, 0] = torch.arange(1, 5)
    ids[4:, :3] = torch.arange(5, 17).reshape(4, 3)
    return _MaskedMean().double().eval(), ids


def _g_rows_worker(rank: int, world: int, store: str, out_dir: str) -> None:
    import torch.distributed as dist

    from neuromanifold.singular.distributed import _leave_without_finalizing, shard_data

    torch.set_num_threads(1)
    # a file rendezvous: a port chosen, released and bound later can be taken in between
    # (s31 trial FLAKY #2; `launch_local` retries that race, this test would not)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        model, ids = _masked_model_and_ids()
        shard = shard_data(ids, rank=rank, world=world)
        factors = kfac_factors(model, shard, Categorical())
        counts = g_rows(model, shard, Categorical(), factors)
        (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(counts))
    finally:
        dist.destroy_process_group()
    _leave_without_finalizing()  # gloo's worker threads can abort the interpreter's finalization


@pytest.mark.slow
def test_ranks_with_different_shards_count_the_rows_of_the_whole_probe_set(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    model, ids = _masked_model_and_ids()
    single = g_rows(model, ids, Categorical(), kfac_factors(model, ids, Categorical()))
    assert single["fc1"] == 8 * 3 * 2  # N · three real tokens · (C − 1)
    store = str(tmp_path / "store")
    mp.start_processes(
        _g_rows_worker, args=(2, store, str(tmp_path)), nprocs=2, join=True, start_method="spawn"
    )
    per_rank = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert per_rank[0] == per_rank[1] == single  # rank 0 alone sees one real token per sample


def test_the_rank_maximum_is_the_shared_all_reduce_max(monkeypatch: pytest.MonkeyPatch) -> None:
    """`g_rows` maximises its per-sample counts over the ranks through
    `neuromanifold.singular.distributed.all_reduce_max` (one collective contract), once, with
    one value per counted block; without a process group the counts are unchanged."""
    import neuromanifold.singular.probe_rank as probe_rank

    calls: list[list[int]] = []
    shared = probe_rank.all_reduce_max

    def spy(values: list[int], device: torch.device | None = None) -> list[int]:
        calls.append(list(values))
        return shared(values, device)

    monkeypatch.setattr(probe_rank, "all_reduce_max", spy)
    model, ids = _masked_model_and_ids()
    counts = g_rows(model, ids, Categorical(), kfac_factors(model, ids, Categorical()))
    assert len(calls) == 1 and len(calls[0]) == 2  # fc1 and fc2
    assert counts["fc1"] == 8 * 3 * 2  # N · three real tokens · (C − 1), as without the spy


def test_samples_beyond_the_first_chunk_are_counted_so_a_full_rank_g_is_not_listed() -> None:
    """The audit's example: a masked mean of width 88, N = 40, T = 4, the first 16 samples with
    one real token and the other 24 with four (a probe set sorted by length). G of fc1 has full
    rank 88; the count must bound it (rank ≤ rows), so the factor is not listed."""
    torch.manual_seed(0)
    model = _MaskedMean()
    width = 88
    model.emb, model.fc1, model.fc2 = nn.Embedding(50, 6), nn.Linear(6, width), nn.Linear(width, 3)
    model = model.double().eval()
    ids = torch.randint(1, 50, (40, 4), generator=torch.Generator().manual_seed(1))
    ids[:16, 1:] = 0
    factors = kfac_factors(model, ids, Categorical())
    counts = g_rows(model, ids, Categorical(), factors)
    rank = factor_spectrum(factors["fc1"].G).rank
    assert rank == width  # full rank: no kernel for N to shrink
    assert counts["fc1"] >= rank
    assert ("fc1", "G") not in [(e["layer"], e["factor"]) for e in rank_limited(factors, counts)]
