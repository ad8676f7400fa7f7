"""`read` with labels: their checks before the read (s21 trial AS #7, #8).

#7: a NaN or Inf in floating labels made the labelled-loss check NaN (``info["loss_along_u"]``
with ``slope: nan``, unflagged, and a literal NaN in the JSON); such labels are refused up front,
naming the first bad sample, by its index in the whole probe set under data parallelism.

#8: labels of the wrong shape or dtype were refused with the shapes of the early checks' sub-batch
of `GRAPH_SAMPLES` samples ("… of shape (16,) …; got shape (16,)" for 50 samples); the family's
words now quote the user's N (under data parallelism, the whole probe set's)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from neuromanifold.singular import distributed as dp
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import GRAPH_SAMPLES, read

N = 50  # more than GRAPH_SAMPLES: the early checks see a sub-batch
NOISE = 0.1  # label noise around the model's outputs


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _xy(n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    with torch.no_grad():
        y = _mlp()(x) + NOISE * torch.randn(n, 2, dtype=torch.float64, generator=gen)
    return x, y


@pytest.mark.parametrize(("bad", "value"), [(3, float("nan")), (40, float("inf"))])
def test_non_finite_labels_are_refused_naming_the_first_bad_sample(bad: int, value: float) -> None:
    assert N > 40 > GRAPH_SAMPLES  # sample 40 lies beyond the early checks' sub-batch
    x, y = _xy()
    y[bad, 1] = value
    y[bad + 5, 0] = float("nan")  # a later bad sample is not the one named
    with pytest.raises(
        ValueError, match=rf"^data labels y hold NaN or Inf values \(first in sample {bad}\)$"
    ) as info:
        read(_mlp(), (x, y), Gaussian(), max_directions=0, progress=False)
    assert dp.is_agreed(info.value)


def test_non_finite_inputs_are_named_before_non_finite_labels() -> None:
    x, y = _xy()
    x[7, 0] = float("nan")
    y[2, 0] = float("nan")
    with pytest.raises(
        ValueError, match=r"^data inputs hold NaN or Inf values \(first in sample 7"
    ):
        read(_mlp(), (x, y), Gaussian(), max_directions=0, progress=False)


def nan_label_in_the_second_shard() -> SimpleNamespace:
    """Factory for `launch_local`: 7 labelled samples (shards [0, 3) and [3, 7)) with a NaN in
    the labels of sample 6, which only rank 1 holds."""
    x, y = _xy(7)
    y[6, 1] = float("nan")
    return SimpleNamespace(model=_mlp(), data=(x, y), family=Gaussian())


def test_a_non_finite_label_in_one_shard_is_named_by_its_global_index() -> None:
    with pytest.raises(
        ValueError, match=r"^data labels y hold NaN or Inf values \(first in sample 6\)"
    ):
        dp.launch_local(
            2, "test_read_labels:nan_label_in_the_second_shard", read_kwargs={"progress": False}
        )


def _classifier(n_classes: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, n_classes)).double()


def _refusal(model: nn.Module, data: tuple, family: object) -> str:
    with pytest.raises(ValueError) as info:
        read(model, data, family, max_directions=0, progress=False)
    assert dp.is_agreed(info.value)
    return str(info.value)


@pytest.mark.parametrize("n", [N, 10])  # above and below GRAPH_SAMPLES
def test_gaussian_label_shape_errors_quote_the_users_n(n: int) -> None:
    x, y = _xy(n)
    assert _refusal(_mlp(), (x, y[:, 0]), Gaussian()) == (
        f"Gaussian targets y must have the output's shape ({n}, 2); got ({n},)"
    )


def test_categorical_label_errors_quote_the_users_n_and_keep_the_class_count() -> None:
    """16 classes, as many as the sub-batch has samples: only the leading sizes change."""
    x, _ = _xy()
    model = _classifier(GRAPH_SAMPLES)
    labels = torch.arange(N) % GRAPH_SAMPLES
    assert _refusal(model, (x, labels.double()), Categorical()) == (
        f"Categorical labels y must be integer class indices of shape ({N},) (the logits' shape "
        f"without the class axis); got shape ({N},), dtype torch.float64"
    )
    assert _refusal(model, (x, labels[:, None]), Categorical()).endswith(
        f"of shape ({N},) (the logits' shape without the class axis); got shape ({N}, 1), "
        "dtype torch.int64"
    )
    out_of_range = _refusal(model, (x, labels + GRAPH_SAMPLES), Categorical())
    assert out_of_range.startswith(
        f"Categorical labels y must lie in [0, {GRAPH_SAMPLES}) (C = {GRAPH_SAMPLES} classes); "
        f"got values from {GRAPH_SAMPLES} to {2 * GRAPH_SAMPLES - 1}"
    )


def labels_of_the_wrong_shape() -> SimpleNamespace:
    """Factory for `launch_local`: 7 samples (shards of 3 and 4) with labels (N,) for outputs
    (N, 2)."""
    x, y = _xy(7)
    return SimpleNamespace(model=_mlp(), data=(x, y[:, 0]), family=Gaussian())


def test_label_shape_errors_of_a_data_parallel_read_quote_the_whole_sets_n() -> None:
    with pytest.raises(
        ValueError, match=r"^Gaussian targets y must have the output's shape \(7, 2\); got \(7,\)"
    ):
        dp.launch_local(
            2, "test_read_labels:labels_of_the_wrong_shape", read_kwargs={"progress": False}
        )


@pytest.mark.parametrize("bad_value", [-1, 3])
def test_an_out_of_range_label_past_the_early_sub_batch_is_refused_before_the_read(
    bad_value: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only sample 40 (beyond the `GRAPH_SAMPLES` the early checks see) is out of [0, 3): it was
    met only by the labelled-loss check after the sweeps; now the read refuses it before the
    factor pass (which is made to fail loudly if reached)."""
    from neuromanifold.singular import read as read_module

    x, _ = _xy()
    labels = torch.arange(N) % 3
    labels[40] = bad_value

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the factor pass ran before the labels were checked")

    monkeypatch.setattr(read_module, "kfac_factors", reached)
    message = _refusal(_classifier(3), (x, labels), Categorical())
    low, high = min(bad_value, 0), max(bad_value, 2)
    assert message.startswith(
        f"Categorical labels y must lie in [0, 3) (C = 3 classes); got values from {low} to {high}"
    )
    # the ignore-index advice only for a negative label (s22 trial LM #3)
    assert ("--ignore-index -100" in message) == (bad_value < 0)


def out_of_range_label_in_the_second_shard() -> SimpleNamespace:
    """Factory for `launch_local`: 40 labelled samples (shards [0, 20) and [20, 40)), three
    classes, with class 5 at sample 37, which only rank 1 holds, past its early sub-batch."""
    x, _ = _xy(40)
    labels = torch.arange(40) % 3
    labels[37] = 5
    return SimpleNamespace(model=_classifier(3), data=(x, labels), family=Categorical())


def test_an_out_of_range_label_in_one_shard_is_refused_on_every_rank() -> None:
    with pytest.raises(
        ValueError,
        match=r"^Categorical labels y must lie in \[0, 3\) \(C = 3 classes\); got "
        r"values from 0 to 5",
    ):
        dp.launch_local(
            2,
            "test_read_labels:out_of_range_label_in_the_second_shard",
            read_kwargs={"progress": False},
        )


def ignored_labels_on_one_shard(everywhere: bool = False) -> SimpleNamespace:
    """Factory for `launch_local`: 40 samples, three classes, ignore index −100 on the first
    shard's labels (``everywhere``: on every label)."""
    x, _ = _xy(40)
    labels = torch.arange(40) % 3
    labels[: 40 if everywhere else 20] = -100
    fam = Categorical(ignore_index=-100)
    return SimpleNamespace(model=_classifier(3), data=(x, labels), family=fam)


def test_all_ignored_labels_are_refused_only_when_no_rank_has_a_label() -> None:
    """The count of labelled positions is all-reduced before any rank can raise: a shard with
    none is fine while the other has labels, and labels that are all −100 are refused on every
    rank (s25 audit IGNORE #2), with no rank left waiting in the collective."""
    ranks = dp.launch_local(
        2, "test_read_labels:ignored_labels_on_one_shard", read_kwargs={"progress": False}
    )
    check = ranks[0]["reading"]["meta"]["critical_check"]
    assert check["n_test"] == 20 and check["z"] is not None, check  # rank 1's labels are read
    with pytest.raises(ValueError, match=r"^every label is the ignore index -100"):
        dp.launch_local(
            2,
            "test_read_labels:ignored_labels_on_one_shard",
            factory_kwargs={"everywhere": True},
            read_kwargs={"progress": False},
        )


def test_integer_labels_with_the_gaussian_family_point_to_the_categorical_one() -> None:
    """s22 trial LM #4: class indices read with the default Gaussian family were refused with
    the shapes only; the message now names the Categorical family (and still the user's N)."""
    x, _ = _xy()
    labels = torch.arange(N) % 2
    message = _refusal(_mlp(), (x, labels), Gaussian())
    assert message == (
        f"Gaussian targets y must have the output's shape ({N}, 2); got ({N},) (integer labels "
        f"of the output's shape without its last axis look like class indices over 2 logits: "
        f"read them with the Categorical family, --family categorical)"
    )
