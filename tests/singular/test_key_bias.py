"""The attention key bias: a flat gauge of dimension n_kv·d_h (s27 trial HF D2).

Closed form: ``b_K → b_K + c`` adds ``q_tᵀ c / √d_h`` to every score of query row ``t``, the same
for every key, and the softmax over the keys ignores it; rotary position embeddings turn ``c`` by
the key's position and break it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call

from neuromanifold.singular.detectors import DetectionContext, KeyBiasDetector
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.fisher import directional_fisher
from neuromanifold.singular.read import read
from neuromanifold.singular.sweep import DEGENERATE_SCALE, FLOOR_MARGIN, sweep

N, SEQ, D = 24, 5, 8
RTOL_SAME = 1e-12  # outputs after a shift of the key bias by O(1): softmax rounding only
FLAT_F_MAX = 1e-24  # F along the line: forward-mode rounding only
BROKEN_MIN = 1e-3  # a shift that is no symmetry moves the outputs by O(1e-1) here


class _GQA(nn.Module):
    """Self-attention, 2 query heads sharing 1 KV head of width 4, biases, optional RoPE on the
    interleaved planes (2i, 2i+1)."""

    def __init__(self, rope: bool = False, rotary_ndims: int | None = None) -> None:
        super().__init__()
        self.heads, self.kv, self.head_dim, self.rope = 2, 1, 4, rope
        if rotary_ndims is not None:  # RoPE on the leading dimensions only (GPT-NeoX, Phi)
            self.rotary_ndims = rotary_ndims
        self.config = type("C", (), {"num_attention_heads": 2, "num_key_value_heads": 1})()
        self.q_proj = nn.Linear(D, 8)
        self.k_proj = nn.Linear(D, 4)
        self.v_proj = nn.Linear(D, 4)
        self.o_proj = nn.Linear(8, D)

    def _rotary(self, z: Tensor) -> Tensor:
        n = z.shape[-2]
        freq = 1.0 / (10.0 ** torch.arange(z.shape[-1] // 2, dtype=z.dtype))
        ang = torch.arange(n, dtype=z.dtype)[:, None] * freq
        a, b = z[..., 0::2], z[..., 1::2]
        return torch.stack(
            (a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()), -1
        ).flatten(-2)

    def forward(self, x: Tensor) -> Tensor:
        bsz, n, _ = x.shape
        q = self.q_proj(x).view(bsz, n, 2, 4).transpose(1, 2)
        k = self.k_proj(x).view(bsz, n, 1, 4).transpose(1, 2)
        v = self.v_proj(x).view(bsz, n, 1, 4).transpose(1, 2)
        if self.rope:
            r = getattr(self, "rotary_ndims", self.head_dim)
            q = torch.cat((self._rotary(q[..., :r]), q[..., r:]), -1)
            k = torch.cat((self._rotary(k[..., :r]), k[..., r:]), -1)
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        causal = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(4) + causal, dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(bsz, n, -1))


class _Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def _setup(model: nn.Module) -> tuple[nn.Module, Tensor, DetectionContext]:
    torch.manual_seed(0)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    x = torch.randn(N, SEQ, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return model, x, DetectionContext.from_model(model, x, Gaussian())


def _bias_key(model: nn.Module) -> tuple[str, slice]:
    return (
        ("k_proj.bias", slice(0, 4))
        if isinstance(model, _GQA)
        else ("attn.in_proj_bias", slice(D, 2 * D))
    )


def test_the_key_bias_is_one_flat_candidate_and_every_shift_keeps_the_model() -> None:
    for model, name in ((_GQA(), ""), (_Packed(), "attn")):
        model, x, ctx = _setup(model)
        (cand,) = KeyBiasDetector().propose(name, model.get_submodule(name), ctx)
        key, rows = _bias_key(model)
        assert cand.gauge == "flat" and cand.detector == "key-bias"
        assert cand.info["orbit_dim"] == rows.stop - rows.start
        # u is uniform on the key rows and zero on the query and value rows of a packed bias
        support = cand.u[key].ne(0)
        assert bool(support[rows].all()) and int(support.sum()) == rows.stop - rows.start
        # the law: any shift c of the key bias, here a random one of size 3, keeps every output
        params = {k: v.detach() for k, v in model.named_parameters()}
        c = torch.zeros_like(params[key])
        c[rows] = 3.0 * torch.randn(
            rows.stop - rows.start, generator=torch.Generator().manual_seed(2), dtype=torch.float64
        )
        base = functional_call(model, params, (x,))
        moved = functional_call(model, {**params, key: params[key] + c}, (x,))
        assert float((moved - base).abs().max()) <= RTOL_SAME * float(base.abs().max())
        assert float(directional_fisher(model, params, cand.u, x, Gaussian())) <= FLAT_F_MAX


def test_the_read_lists_it_as_a_flat_gauge() -> None:
    model, x, _ = _setup(_GQA())
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = [d for d in reading.directions if d.detector == "key-bias"]
    assert rec.klass == "flat_gauge" and rec.info["orbit_dim"] == 4


def test_rope_breaks_it_and_nothing_is_proposed() -> None:
    model, x, ctx = _setup(_GQA(rope=True))
    assert KeyBiasDetector().propose("", model, ctx) == []
    params = {k: v.detach() for k, v in model.named_parameters()}
    shifted = {**params, "k_proj.bias": params["k_proj.bias"] + 1.0}
    base = functional_call(model, params, (x,))
    change = functional_call(model, shifted, (x,)) - base
    assert float(change.abs().max()) > BROKEN_MIN * float(base.abs().max())


def test_under_partial_rope_the_dimensions_it_leaves_alone_are_the_gauge() -> None:
    """RoPE on the leading 2 of 4 dimensions (``rotary_ndims``, as GPT-NeoX and Phi): a shift of
    the key bias's other 2 dimensions keeps every output, one of the rotated 2 does not; the
    candidate holds exactly the 2 free ones (s27b audit RERUN #4: nothing was proposed)."""
    model, x, ctx = _setup(_GQA(rope=True, rotary_ndims=2))
    (cand,) = KeyBiasDetector().propose("", model, ctx)
    assert cand.info["orbit_dim"] == 2 and cand.info["rotary_dims"] == 2
    assert cand.u["k_proj.bias"].ne(0).tolist() == [False, False, True, True]
    params = {k: v.detach() for k, v in model.named_parameters()}
    base = functional_call(model, params, (x,))
    for dims, law in (([2, 3], "keeps"), ([0], "moves")):
        c = torch.zeros(4, dtype=torch.float64)
        c[dims] = 3.0
        moved = functional_call(model, {**params, "k_proj.bias": params["k_proj.bias"] + c}, (x,))
        change = float((moved - base).abs().max()) / float(base.abs().max())
        assert change <= RTOL_SAME if law == "keeps" else change > BROKEN_MIN
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = [d for d in reading.directions if d.detector == "key-bias"]
    assert rec.klass == "flat_gauge" and rec.info["orbit_dim"] == 2


def test_no_key_bias_no_candidate() -> None:
    model = _GQA()
    model.k_proj = nn.Linear(D, 4, bias=False)
    assert not KeyBiasDetector().applies_to(model)
    assert KeyBiasDetector().propose("", model, None) == []


def test_a_block_with_no_scale_of_its_own_takes_the_models() -> None:
    """Every direction in the key bias is flat, so its own floor collapsed with the rounding
    residues (s27 trial HF D4: an exactly flat line read `unresolved`). The sweep measures the
    key projection's scale F_m there (weight and bias) and F stays below ten times the floor it
    gives; a block with a scale of its own does not pay that pass."""
    model, x, ctx = _setup(_GQA())
    params = {k: v.detach() for k, v in model.named_parameters()}
    (cand,) = KeyBiasDetector().propose("", model, ctx)
    flat = sweep(model, params, cand.u, x, Gaussian())
    assert flat.random_fisher <= DEGENERATE_SCALE and flat.module_fisher is not None
    assert flat.scale == flat.module_fisher > 1e6 * flat.random_fisher
    assert max(flat.F) <= FLOOR_MARGIN * flat.floor
    assert flat.n_forward_passes == len(flat.ts) + 2
    w = torch.randn(8, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    live = sweep(model, params, {"q_proj.weight": w / w.norm()}, x, Gaussian())
    assert live.module_fisher is None and live.n_forward_passes == len(live.ts) + 1


class _TinyBranch(nn.Module):
    """A main Linear plus a live side branch scaled by 1e-13 (s27b audit RERUN #2): the branch's
    tangent is computed exactly (the main branch's is 0), so its F ~ 1e-28 is a value, not a
    rounding residue."""

    def __init__(self) -> None:
        super().__init__()
        self.big = nn.Linear(4, 2)
        self.side = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.big(x) + 1e-13 * self.side(x)


def test_a_live_branch_at_a_tiny_scale_is_not_called_flat() -> None:
    torch.manual_seed(0)
    model = _TinyBranch().double().eval()
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    params = {k: v.detach() for k, v in model.named_parameters()}
    w = torch.randn(2, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    u = {"side.weight": w / w.norm()}
    sw = sweep(model, params, u, x, Gaussian())
    # its module's scale is measured (the bias beside the weight) and is as small: kept
    assert sw.module_fisher is not None and sw.scale < 1e-20
    assert min(sw.F) > FLOOR_MARGIN * sw.floor
    assert read_direction(model, params, u, x, Gaussian()).klass.value == "live"
