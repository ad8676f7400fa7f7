"""`forward_checked`'s messages: the caller's data shape, and the dtype cause of float token ids."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuromanifold.singular.factor_inputs import forward_checked


def _linear_model() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 2)).double().eval()


def _token_model() -> nn.Module:
    return nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2)).double().eval()


def test_message_names_the_whole_data_shape_not_the_slice() -> None:
    """A forward on the first 16 of 32 samples names the (32, 7) data the caller passed."""
    x = torch.randn(32, 7, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"data of shape \(32, 7\) does not fit.*'0'.*5"):
        forward_checked(_linear_model(), x[:16], data_shape=tuple(x.shape))
    with pytest.raises(ValueError, match=r"data of shape \(16, 7\) does not fit") as whole:
        forward_checked(_linear_model(), x[:16])  # no data_shape: the tensor's own
    assert "batch of" not in str(whole.value)  # the tensor is all the data there is


def test_torch_sizes_of_a_batch_are_said_to_be_the_batches() -> None:
    """s33 trial USER D4: torch's "got input of size [16, 64]" for 96 samples; the message says
    that the read ran the model on a batch."""
    x = torch.randn(32, 7, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\(the read ran the model on a batch of 16 of the 32 "):
        forward_checked(_linear_model(), x[:16], data_shape=tuple(x.shape))


def test_out_of_range_ids_name_the_whole_data_shape() -> None:
    ids = torch.randint(0, 12, (32, 3), generator=torch.Generator().manual_seed(0))
    ids[0, 0] = 11  # out of range for a 10-row embedding, inside the slice
    with pytest.raises(ValueError, match=r"data of shape \(32, 3\) does not fit.*indices < 10"):
        forward_checked(_token_model(), ids[:16], data_shape=tuple(ids.shape))


def test_float_token_ids_name_the_dtype_first() -> None:
    ids = torch.randint(0, 10, (8, 3), generator=torch.Generator().manual_seed(0)).double()
    with pytest.raises(
        ValueError,
        match=r"data of shape \(8, 3\) does not fit the model: its dtype torch\.float64 is not "
        r"an integer type, and the first layer '0' \(Embedding\) takes integer token ids "
        r"\(torch\.long, indices < 10\)",
    ):
        forward_checked(_token_model(), ids)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_read_and_factor_pass_name_the_callers_dtype_not_its_float64_copy(dtype) -> None:
    """s22 trial LM #5: float32 token ids were named ``torch.float64``, the read's copy."""
    from neuromanifold.singular.factors import kfac_factors
    from neuromanifold.singular.family import Gaussian
    from neuromanifold.singular.read import read

    ids = torch.randint(0, 10, (8, 3), generator=torch.Generator().manual_seed(0)).to(dtype)
    said = rf"data of shape \(8, 3\) does not fit the model: its dtype {dtype} is not an integer"
    with pytest.raises(ValueError, match=said) as err:
        read(_token_model(), ids, Gaussian(), progress=False)
    # torch's own sentence named the copy's dtype after the caller's (s32 trial ATTN #4)
    assert "Double" not in str(err.value) and "pass them as torch.long" in str(err.value)
    with pytest.raises(ValueError, match=said):
        kfac_factors(_token_model(), ids, Gaussian())
    with pytest.raises(ValueError, match=said):  # forward_checked given the caller's dtype
        forward_checked(_token_model(), ids.double(), data_dtype=dtype)


def test_integer_ids_that_fit_pass_through() -> None:
    model = _token_model()
    ids = torch.randint(0, 10, (4, 3), generator=torch.Generator().manual_seed(0))
    assert torch.equal(forward_checked(model, ids, data_shape=(9, 3)), model(ids))


def test_factor_pass_names_the_whole_data_shape_when_a_later_batch_fails() -> None:
    """`kfac_factors` runs the data in batches; an out-of-range id in the second batch of 8 is
    reported against the (12, 3) data, not the (4, 3) batch it sits in."""
    from neuromanifold.singular.factors import kfac_factors
    from neuromanifold.singular.family import Gaussian

    model = _token_model()
    ids = torch.randint(0, 10, (12, 3), generator=torch.Generator().manual_seed(0))
    ids[10, 1] = 11
    with pytest.raises(ValueError, match=r"data of shape \(12, 3\) does not fit.*indices < 10"):
        kfac_factors(model, ids, Gaussian(), batch_size=8)


class _SelfHessian(nn.Module):
    """A Laplacian feature ``Σ_j ∂²u/∂x_j²`` by ``vmap(hessian)`` in ``forward``. Under
    ``torch.no_grad()`` (as the read's plain forwards run) SiLU's backward is the fused
    ``silu_backward``, which has no forward-mode formula, so the forward fails."""

    def __init__(self, first: nn.Module, width: int) -> None:
        super().__init__()
        self.first, self.act, self.out = first, nn.SiLU(), nn.Linear(width, 1)

    def u(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.first(x)).reshape(-1)).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lap = torch.func.vmap(torch.func.hessian(self.u))(x)
        return lap.reshape(x.shape[0], x[0].numel(), -1).diagonal(dim1=-2, dim2=-1).sum(-1)


@pytest.mark.parametrize(
    ("first", "width", "shape", "fits"),
    [
        (nn.Linear(3, 4), 4, (6, 3), "its last axis, 3, is the in_features of 'first'"),
        (nn.Conv1d(2, 3, 3), 9, (6, 2, 5), "its axis 1, 2, is the in_channels of 'first'"),
    ],
)
def test_data_that_fits_is_not_blamed_for_a_failure_inside_the_forward(
    first: nn.Module, width: int, shape: tuple[int, ...], fits: str
) -> None:
    """s14 trial M #6: "data of shape (6, 3) does not fit the model; first layer 'l1' (Linear)
    expects last dim 3" for (6, 3) data; the cause was an operator without forward mode."""
    model = _SelfHessian(first, width).double()
    x = torch.randn(*shape, dtype=torch.float64)
    with torch.no_grad(), pytest.raises(ValueError) as info:
        forward_checked(model, x)
    msg = str(info.value)
    assert f"fails on data of shape {shape} ({fits}, the first layer)" in msg
    assert "does not fit" not in msg and "forward AD" in msg


def test_valid_token_ids_are_not_blamed_for_a_failure_inside_the_forward() -> None:
    """s14 audit P #5: an Embedding model that fails inside (here a Linear of the wrong width)
    was reported as "data of shape (8, 3) does not fit the model; ... expects indices < 10"."""
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(5, 2)).double()
    ids = torch.randint(0, 10, (8, 3), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError) as info:
        forward_checked(model, ids)
    msg = str(info.value)
    assert "its ids lie in [0, 10) of '0', the first layer" in msg
    assert "does not fit" not in msg and "mat1 and mat2" in msg


class _LearnedPositions(nn.Module):
    """Token and learned position embeddings (4 positions), mean-pooled into a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(10, 3)
        self.pos = nn.Embedding(4, 3)
        self.head = nn.Linear(3, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1])  # (N, T) ids
        return self.head((self.tok(ids) + self.pos(positions)).mean(-2))


def test_a_sequence_longer_than_the_learned_positions_is_named() -> None:
    """s27 trial HF D7: ids of length 6 against 4 learned positions were reported as "its ids
    lie in [0, 10) of 'tok'" with torch's index error; the length is the cause."""
    model = _LearnedPositions().double()
    ids = torch.randint(0, 10, (8, 6), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError) as info:
        forward_checked(model, ids)
    msg = str(info.value)
    assert "their length 6 exceeds the 4 rows of 'pos'" in msg
    assert "sequences of at most 4 tokens" in msg
    forward_checked(model, ids[:, :4])  # the same ids cut to 4 positions fit


def test_one_sequence_without_its_sample_axis_is_named() -> None:
    """s27 trial HF D7: one unbatched sequence failed inside the forward ("too many indices for
    tensor of dimension 2" on GPT-2, a tuple index here) with no word about the sample axis."""
    model = _LearnedPositions().double()
    ids = torch.randint(0, 10, (4,), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError) as info:
        forward_checked(model, ids)
    assert "one sequence is passed with its sample axis, shape (1, 4)" in str(info.value)


def test_an_image_whose_last_axis_matches_a_patch_embedding_is_not_told_it_fits() -> None:
    """s32 trial TRAIN #10: 4×4 images for an 8×8 ViT (2×2 patches, in_features 4) were told
    "its last axis, 4, is the in_features of 'patch_embed.proj'"; the image size was the cause."""
    from neuromanifold.zoo.models import ViTConfig, build_model

    model = build_model(ViTConfig()).double()
    x = torch.randn(8, 1, 4, 4, dtype=torch.float64)
    with torch.no_grad(), pytest.raises(ValueError) as info:
        forward_checked(model, x)
    assert "is the in_features of" not in str(info.value)
    assert "data of shape (8, 1, 4, 4)" in str(info.value)
