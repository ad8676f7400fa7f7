"""The per-direction API (`directional_fisher`, `read_direction`) on models that are not textbook:
forwards that write into their parameters, random forwards, embedding padding rows, non-tensor
outputs and tied parameters (s13 trial J)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from neuromanifold import read
from neuromanifold.singular import (
    Categorical,
    Gaussian,
    directional_fisher,
    directional_fisher_reference,
    read_direction,
    sweep,
)

D = torch.float64


class ClampsItsWeight(nn.Module):
    """A forward that clamps its own weight in place, under no_grad (as embedding max_norm does)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(3.0 * torch.randn(3, 4, dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.w.clamp_(-1.0, 1.0)
        return x @ self.w.T


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_float64_parameters_of_the_caller_are_never_written() -> None:
    torch.manual_seed(0)
    m = ClampsItsWeight().eval()
    x = torch.randn(16, 4, dtype=D)
    own = m.w.detach().clone()
    given = {"w": 3.0 * torch.randn(3, 4, dtype=D)}
    given0 = given["w"].clone()
    u = {"w": torch.randn(3, 4, dtype=D)}
    directional_fisher(m, given, u, x, Gaussian())  # the caller's values substituted
    directional_fisher(m, {}, u, x, Gaussian())  # the model's own values
    read_direction(m, dict(m.named_parameters()), u, x, Gaussian())
    assert torch.equal(given["w"], given0)
    assert torch.equal(m.w.detach(), own)


@pytest.mark.parametrize(("cls", "width"), [(nn.Embedding, 20), (nn.EmbeddingBag, 4)])
def test_embedding_with_max_norm_is_refused(cls: type[nn.Module], width: int) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(cls(10, 4, max_norm=1.0), nn.Flatten(), nn.Linear(width, 3)).double().eval()
    with torch.no_grad():
        m[0].weight.mul_(3.0)  # rows above max_norm: the forward would rescale them
    ids = torch.randint(0, 10, (8, 5))
    before = m[0].weight.detach().clone()
    u = {"0.weight": torch.randn(10, 4, dtype=D)}
    for fn in (directional_fisher, read_direction):
        with pytest.raises(
            ValueError,
            match=r"submodule '0' \(Embedding(Bag)?\) has max_norm=1.0.*"
            r"renormalises .* in place .*set max_norm=None",
        ):
            fn(m, dict(m.named_parameters()), u, ids, Gaussian())
    with pytest.raises(ValueError, match=r"submodule '0' \(Embedding(Bag)?\) has max_norm=1.0"):
        read(m, ids, Gaussian(), progress=False)  # the whole-model read refuses it up front too
    assert torch.equal(m[0].weight.detach(), before)


@pytest.mark.parametrize("fn", ["spectral_norm", "weight_norm"])
@pytest.mark.parametrize("state", ["after_training", "after_no_grad_forward"])
def test_a_legacy_norm_hook_is_refused_with_its_remove_call(fn: str, state: str) -> None:
    """s29 trial SHARED #2: the legacy hook's ``weight`` is recomputed before every forward from
    parameters the detectors never name; the read failed with a deep-copy error (right after a
    training step, ``weight`` a graph tensor), a bare ``KeyError`` or a direction error. Every
    entry point refuses it up front, naming the ``remove_…`` call, after which the baked-in
    model computes the same function and reads."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    m[2] = getattr(nn.utils, fn)(m[2])
    x = torch.randn(16, 4, dtype=D)
    if state == "after_training":
        F.mse_loss(m(x), torch.zeros(16, 3, dtype=D)).backward()
    else:
        with torch.no_grad():
            m(x)
    m.eval()
    pattern = rf"submodule '2' \(Linear\) carries the hook of torch.nn.utils.{fn}.*remove_{fn}"
    with pytest.raises(ValueError, match=pattern):
        read(m, x, Gaussian(), progress=False)
    u = {"0.weight": torch.randn(5, 4, dtype=D)}
    for entry in (directional_fisher, read_direction):
        with pytest.raises(ValueError, match=pattern):
            entry(m, dict(m.named_parameters()), u, x, Gaussian())
    with torch.no_grad():
        before = m(x)
    getattr(nn.utils, f"remove_{fn}")(m[2])
    with torch.no_grad():
        assert torch.equal(m(x), before)
    assert read(m, x, Gaussian(), progress=False, max_directions=0).meta["n_params"] == 43


class MCDropout(nn.Module):
    """Monte-Carlo dropout hard-wired on in forward: random whatever the module's mode."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 16), nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.dropout(torch.relu(self.a(x)), 0.3, training=True))


def test_random_forward_is_refused_not_read_one_t_at_a_time() -> None:
    torch.manual_seed(0)
    m = MCDropout().double().eval()
    x = torch.randn(32, 4, dtype=D)
    p = dict(m.named_parameters())
    u = {"a.weight": torch.randn(16, 4, dtype=D)}
    grid = [0.1, 0.2, 0.3, 0.4]
    random = r"forward is random.*dropout called with training=True.*deterministic"
    for t_batch in (1, 4):  # t_batch=1 never meets vmap: refused by the repeat check alone
        with pytest.raises(ValueError, match=random):
            read_direction(m, p, u, x, Gaussian(), grid=grid, t_batch=t_batch)
        with pytest.raises(ValueError, match=random):
            sweep(m, p, u, x, Gaussian(), grid=grid, t_batch=t_batch)
    with pytest.raises(ValueError, match=random):  # one direction: no vmap either
        directional_fisher(m, p, u, x, Gaussian())
    with pytest.raises(ValueError, match=random):  # several directions: vmap over the tangents
        directional_fisher(m, p, [u, {"b.weight": torch.randn(2, 16, dtype=D)}], x, Gaussian())
    with pytest.raises(ValueError, match=random):
        directional_fisher_reference(m, p, u, x, Gaussian())


class SeededFeatures(nn.Module):
    """Fixed random features drawn in every forward from a generator re-seeded there: the forward
    repeats exactly (a deterministic function of θ), though vmap refuses its random operation."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 16), nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(123)
        r = torch.randn(16, 16, generator=g, dtype=x.dtype)
        return self.b(torch.tanh(self.a(x)) @ r)


# Central differences with step H_FD of a smooth float64 forward: the truncation error
# (H_FD**2 / 6) |f'''| and the rounding eps_mach |f| / H_FD are both ~1e-11 relative on J u.
RTOL_FD_SMOOTH = 1e-8
H_FD = 1e-5


def _fd_fisher(m: nn.Module, p: dict, u: dict, x: torch.Tensor, t: float = 0.0) -> float:
    """Gaussian (σ = 1) ``(1/N) Σ_i ‖J_i û‖²`` at ``p + t·û`` by central differences, û = u/‖u‖."""
    norm = float(torch.sqrt(sum((v**2).sum() for v in u.values())))
    unit = {k: v / norm for k, v in u.items()}

    def out(s: float) -> torch.Tensor:
        at = {k: v + (t + s) * unit[k] if k in unit else v for k, v in p.items()}
        return functional_call(m, at, (x,))

    return float((((out(H_FD) - out(-H_FD)) / (2 * H_FD)) ** 2).sum(1).mean())


def test_forward_from_a_reseeded_generator_is_read_without_vmap() -> None:
    torch.manual_seed(0)
    m = SeededFeatures().double().eval()
    x = torch.randn(32, 4, dtype=D)
    p = {k: v.detach() for k, v in m.named_parameters()}
    u = {"a.weight": torch.randn(16, 4, dtype=D)}
    v = {"b.weight": torch.randn(2, 16, dtype=D), "a.bias": torch.randn(16, dtype=D)}
    fd_u, fd_v = _fd_fisher(m, p, u, x), _fd_fisher(m, p, v, x)
    one = float(directional_fisher(m, p, u, x, Gaussian()))
    assert one == pytest.approx(fd_u, rel=RTOL_FD_SMOOTH)
    both = directional_fisher(m, p, [u, v], x, Gaussian())  # vmap refuses: one at a time
    assert both.tolist() == pytest.approx([fd_u, fd_v], rel=RTOL_FD_SMOOTH)
    ref = directional_fisher_reference(m, p, [u, v], x, Gaussian())  # one sample at a time
    assert ref.tolist() == pytest.approx([fd_u, fd_v], rel=RTOL_FD_SMOOTH)
    grid = [0.1, 0.2, 0.3, 0.4]
    fd_line = [_fd_fisher(m, p, u, x, t) for t in grid]
    for t_batch in (1, 4):
        sw = sweep(m, p, u, x, Gaussian(), grid=grid, t_batch=t_batch)
        assert list(sw.F) == pytest.approx(fd_line, rel=RTOL_FD_SMOOTH)
        rd = read_direction(m, p, u, x, Gaussian(), grid=grid, t_batch=t_batch)
        assert list(rd.sweep.F) == pytest.approx(fd_line, rel=RTOL_FD_SMOOTH)


def test_rrelu_in_training_mode_is_refused() -> None:
    m = nn.Sequential(nn.Linear(4, 16), nn.RReLU(), nn.Linear(16, 2)).double().train()
    x = torch.randn(16, 4, dtype=D)
    u = {"0.weight": torch.randn(16, 4, dtype=D)}
    for fn in (directional_fisher, read_direction):
        with pytest.raises(ValueError, match=r"submodule '1' \(RReLU\) is in training mode.*eval"):
            fn(m, dict(m.named_parameters()), u, x, Gaussian())
    # in evaluation mode RReLU is the fixed leaky slope (lower + upper) / 2: read as usual
    assert float(directional_fisher(m.eval(), dict(m.named_parameters()), u, x, Gaussian())) > 0


# JVP vs per-sample gradients in float64 (as in test_fisher.py, issue 4 "Done when")
RTOL_ORACLE = 1e-10
# Central differences with h = 1e-6 of an output linear in the embedding weight: no truncation
# error, rounding ε_mach·|out|/h ≈ 1e-10 relative on J u (measured 3.7e-11 in the trial report)
RTOL_FD = 1e-8


def test_reference_differentiates_the_padding_row_the_forward_reads() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Embedding(10, 4, padding_idx=0), nn.Flatten(), nn.Linear(20, 3))
    m = m.double().eval()
    with torch.no_grad():
        m[0].weight[0] = torch.randn(4)  # a non-zero (e.g. pretrained) pad row
    ids = torch.randint(0, 10, (32, 5))
    ids[:, -1] = 0
    p = {k: v.detach() for k, v in m.named_parameters()}
    u = {"0.weight": torch.zeros(10, 4, dtype=D)}
    u["0.weight"][0, 0] = 1.0
    h = 1e-6

    def out(s: float) -> torch.Tensor:
        return functional_call(m, {**p, "0.weight": p["0.weight"] + s * u["0.weight"]}, (ids,))

    fd = float((((out(h) - out(-h)) / (2 * h)) ** 2).sum(1).mean())
    jvp = float(directional_fisher(m, p, u, ids, Gaussian()))
    ref = float(directional_fisher_reference(m, p, u, ids, Gaussian()))
    assert fd > 0
    assert ref == pytest.approx(jvp, rel=RTOL_ORACLE)
    assert jvp == pytest.approx(fd, rel=RTOL_FD)
    assert m[0].padding_idx == 0  # the caller's module keeps its padding_idx


class PadMasked(nn.Module):
    """A masked mean over tokens whose mask reads the embedding's own ``padding_idx``."""

    def __init__(self, conditional: bool) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 3)
        self.conditional = conditional

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        e = self.emb(ids)
        if self.conditional and self.emb.padding_idx is None:
            return self.out(e.mean(1))
        mask = (ids != self.emb.padding_idx).unsqueeze(-1).to(e.dtype)
        return self.out((e * mask).sum(1) / mask.sum(1).clamp(min=1))


@pytest.mark.parametrize("conditional", [True, False])
def test_reference_keeps_the_padding_idx_a_forward_reads(conditional: bool) -> None:
    torch.manual_seed(0)
    m = PadMasked(conditional).double().eval()
    ids = torch.randint(1, 10, (32, 6))
    ids[:, -2:] = 0
    p = {k: v.detach() for k, v in m.named_parameters()}
    u = {"emb.weight": torch.randn(10, 4, dtype=D)}
    h = 1e-6  # the output is linear in the embedding weight: RTOL_FD as above

    def out(s: float) -> torch.Tensor:
        return functional_call(
            m, {**p, "emb.weight": p["emb.weight"] + s * u["emb.weight"]}, (ids,)
        )

    fd = float((((out(h) - out(-h)) / (2 * h)) ** 2).sum(1).mean()) / float(
        (u["emb.weight"] ** 2).sum()
    )
    jvp = float(directional_fisher(m, p, u, ids, Gaussian()))
    ref = float(directional_fisher_reference(m, p, u, ids, Gaussian()))
    assert ref == pytest.approx(jvp, rel=RTOL_ORACLE)
    assert jvp == pytest.approx(fd, rel=RTOL_FD)


@dataclass
class Out:
    logits: torch.Tensor


class Wrapped(nn.Module):
    """A linear layer whose output comes wrapped in a container."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.l, self.kind = nn.Linear(4, 3), kind

    def forward(self, x: torch.Tensor) -> object:
        z = self.l(x)
        return {"dict": {"logits": z}, "tuple": (z,), "list": [z], "Out": Out(z)}[self.kind]


@pytest.mark.parametrize("kind", ["dict", "tuple", "list", "Out"])
def test_non_tensor_output_is_refused_with_the_reads_message(kind: str) -> None:
    m = Wrapped(kind).double().eval()
    x = torch.randn(8, 4, dtype=D)
    p = dict(m.named_parameters())
    u = {"l.weight": torch.ones(3, 4, dtype=D)}
    msg = rf"model output must be a Tensor \(N, \.\.\.\); got {kind}: wrap the model.*TensorOutput"
    for fn in (directional_fisher, read_direction, directional_fisher_reference):
        with pytest.raises(TypeError, match=msg):
            fn(m, p, u, x, Categorical())
    with pytest.raises(TypeError, match=msg):  # several directions: vmap over the tangents
        directional_fisher(m, p, [u, {"l.bias": torch.ones(3, dtype=D)}], x, Categorical())


class HoldsFloat32(nn.Module):
    """A linear layer followed by a plain float32 tensor attribute (neither parameter nor buffer,
    so the float64 up-cast misses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.l, self.scale = nn.Linear(4, 3), torch.ones(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x) @ self.scale


def test_forward_failing_in_float64_gets_the_reads_message() -> None:
    m = HoldsFloat32().eval()
    x = torch.randn(8, 4)
    p = dict(m.named_parameters())
    u = {"l.weight": torch.ones(3, 4)}
    msg = r"^the model's forward fails in float64, the precision every read evaluates in"
    for fn in (directional_fisher, directional_fisher_reference, read_direction, sweep):
        with pytest.raises(ValueError, match=msg):
            fn(m, p, u, x, Categorical())
    with pytest.raises(ValueError, match=msg):
        read(m, x, Categorical(), progress=False)


class TiedLM(nn.Module):
    """Embedding and output head sharing one weight (``head.weight`` is ``emb.weight``)."""

    def __init__(self, vocab: int = 12, d: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids).mean(1))


def test_alias_of_a_tied_parameter_is_refused_naming_the_tie() -> None:
    torch.manual_seed(0)
    m = TiedLM().double().eval()
    ids = torch.randint(0, 12, (16, 5))
    p = dict(m.named_parameters())
    w = torch.randn(12, 8, dtype=D)
    tie = r"'head\.weight' is tied to 'emb\.weight' \(the same Parameter\): use 'emb\.weight'"
    for fn in (directional_fisher, read_direction, sweep):
        with pytest.raises(ValueError, match=rf"direction u names a tied parameter .*{tie}"):
            fn(m, p, {"head.weight": w}, ids, Categorical())
    with pytest.raises(ValueError, match=rf"params names a tied parameter .*{tie}"):
        directional_fisher(m, {"head.weight": w}, {"emb.weight": w}, ids, Categorical())
    # a state_dict() holds the first name beside the alias: the alias is to be dropped
    drop = (
        r"params names a tied parameter by an alias: 'head\.weight' is tied to 'emb\.weight' "
        r"\(the same Parameter\), which params already holds: drop 'head\.weight' — pass "
        r"dict\(model\.named_parameters\(\)\), not state_dict\(\)$"
    )
    with pytest.raises(ValueError, match=drop):
        directional_fisher(m, dict(m.state_dict()), {"emb.weight": w}, ids, Categorical())
    with pytest.raises(
        ValueError, match=r"direction u names .*, which direction u already holds: "
    ):
        directional_fisher(m, p, {"emb.weight": w, "head.weight": w}, ids, Categorical())
    # the first name reads the shared weight; an unknown name is still reported as unknown
    assert float(directional_fisher(m, p, {"emb.weight": w}, ids, Categorical())) > 0
    with pytest.raises(ValueError, match=r"keys that are not parameter names: \['nope'\]"):
        directional_fisher(m, p, {"nope": w}, ids, Categorical())
