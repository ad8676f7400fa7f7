"""K-FAC and KFC Kronecker factors per block, from one hooked pass over the probe set.

For a supported block (``nn.Linear``, ``nn.Conv1d``, ``nn.Conv2d`` with ``groups == 1`` and
zero padding; a grouped convolution is one block per group, keyed ``"name[g]"``, with the factors
of a plain convolution on the group's channels: `neuromanifold.singular.groups`) with
pre-activation ``s = W̄ ā`` (``W̄ = [W, b]``, ``ā = (a, 1)`` when the block has a bias, ``ā = a``
otherwise) this module accumulates, in float64::

    A = (1/N) Σ_i (1/|P|) Σ_p ā_{i,p} ā_{i,p}ᵀ    (input second moment, mean over positions)
    G = (1/N) Σ_i Σ_p E_y[g_{i,p} g_{i,p}ᵀ]        (g = ∂ log p(y|x_i)/∂s_{i,p}, sum over p)

``p`` runs over the weight-sharing positions of the block: the spatial output positions of a
convolution (im2col patches ordered ``(C_in, k_h, k_w)`` row-major plus a trailing 1, the KFC
factors Ω, Γ of the spec) and every middle axis of a Linear applied to ``(N, ..., d_in)`` inputs
(sequence positions: handled exactly like KFC, i.e. "KFAC-expand"). ``|P| = 1`` for a plain
``(N, d_in)`` Linear input. Both factors are sums over samples divided by the global ``N``
once; under an initialised ``torch.distributed`` process group the sums and ``N`` are
all-reduced first, so sharding the probe set over ranks gives the same factors exactly.

Expectation over labels (the true Fisher, never the empirical one):

* ``Gaussian(sigma)``: exact, ``E_y[g gᵀ] = J_sᵀ (I/σ²) J_s``, by back-propagating the columns
  of ``H_out^{1/2} = I/σ`` (one backward pass per output coordinate).
* ``Categorical()`` with at most ``max_exact_classes`` classes: exact,
  ``H_out = diag(p) − ppᵀ = Σ_c p_c (e_c − p)(e_c − p)ᵀ``; column ``c`` of the square root is
  ``√p_c (e_c − p)`` (one backward pass per class).
* More classes (or Gaussian outputs with more than ``max_exact_classes`` coordinates, or
  categorical logits with extra position axes ``(N, ..., C)``): Monte Carlo with ``mc_samples``
  labels drawn from the model, ``E_y[g gᵀ] ≈ (1/S) Σ_s g_s g_sᵀ``; each sample's labels are keyed
  by ``seed`` and the sample's content (`output_scores.keyed_score`), so the factors do not depend
  on the batch size, the sample order or the sharding over ranks. A Gaussian output of any
  shape ``(N, ...)`` is one sample's mean (trailing coordinates summed in the log-likelihood).
  The ``nn.Linear`` whose output *is* the model output (a classifier's or language model's head,
  called once, its output not changed in place afterwards) takes its ``G`` in closed form even
  then, ``Σ_rows H_out`` (`output_block_g`): its score is the
  output score itself, and one sampled label per row would leave most of a large vocabulary in
  the kernel of ``G``.

**Size cap.** A block whose ``A`` or ``G`` would have more than ``max_factor_dim`` rows (default
`MAX_FACTOR_DIM`) is not factored: its dense float64 factor and the eigenbasis the detectors
take of it are ``d × d`` each (a language model's head over a 50 257-token vocabulary: ``G`` of
20 GB). Such blocks are listed in ``Factors.skipped`` with the reason, and the read reports them
in ``not_covered``; closed-form detectors that need no factors still read them.

Vec / Kronecker convention: column-major ``vec`` of ``W̄ ∈ R^{d_out × d_in(+1)}`` (conv weights
flattened to ``(C_out, C_in·k_h·k_w)``), so ``vec(g āᵀ) = ā ⊗ g`` and the block Fisher is
approximated by ``A ⊗ G`` (``torch.kron(A, G)``). The approximation is exact for a single
Linear layer feeding a Gaussian output; :func:`block_fisher_reference` is the brute-force oracle.

References: Martens & Grosse, *Optimizing Neural Networks with Kronecker-factored Approximate
Curvature*, ICML 2015; Grosse & Martens, *A Kronecker-factored approximate Fisher matrix for
convolution layers*, ICML 2016.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from neuromanifold.singular.blocks import (
    BlockKind,
    block_kind,
    gradient_positions,
    is_supported_block,
    patches,
)
from neuromanifold.singular.factor_inputs import (
    check_finite_params,
    float64_copy,
    forward_checked,
    has_own_params,
    install_finite_checks,
    probe_inputs,
)
from neuromanifold.singular.groups import group_key, group_slices, group_views, is_grouped_conv
from neuromanifold.singular.output_scores import hessian_root, keyed_score, sample_keys

__all__ = [
    "KRONECKER_CONVENTION",
    "MAX_EXACT_CLASSES",
    "MAX_FACTOR_DIM",
    "BlockFactors",
    "Factors",
    "block_fisher_reference",
    "kfac_factors",
]

KRONECKER_CONVENTION = "column-major vec(W̄): vec(g āᵀ) = ā ⊗ g; F_block ≈ A ⊗ G"
MAX_EXACT_CLASSES = 64
"""Categorical outputs with at most this many classes use the exact class expectation."""
MAX_FACTOR_DIM = 16384
"""Largest factor side ``d`` that is formed (``d × d`` float64: 2.1 GB at the cap)."""
G_BUFFER_BYTES = 32 * 2**20
"""Output-gradient rows buffered over backward columns (all blocks together) before they are
folded into the ``G`` sums by one ``addmm_`` per block: a rank-``rows`` update of a ``d × d`` sum
is bound by its memory traffic when ``rows`` is one column's ``N·positions``, and by arithmetic
once the columns of a batch are stacked (factor pass of the ``64 → w → w → 10`` MLP on 64
samples, one thread: w = 2048 0.55 → 0.46 s, w = 3072 1.29 → 1.09 s). Rows are folded at the end
of every batch, and earlier when the buffer exceeds this size."""


@dataclass(frozen=True)
class BlockFactors:
    """The Kronecker factors of one block: ``F_block ≈ A ⊗ G`` (column-major vec of ``[W, b]``).

    ``A``: ``(d_in [+1], d_in [+1])`` float64 input (patch) second moment, mean over positions;
    ``G``: ``(d_out, d_out)`` float64 pre-activation score second moment, sum over positions;
    both averaged over ``n_samples`` probe samples. ``weight_shape`` is the module's weight shape;
    ``has_bias`` says whether ``A``'s last coordinate is the bias augmentation.
    ``a_rank_bound`` / ``g_rank_bound``: the number of rank-one terms summed into ``A`` / ``G``
    (samples × positions, times backward columns for ``G``), an upper bound on their ranks used
    by `factor_spectrum`; ``None`` when unknown.
    """

    name: str
    kind: BlockKind
    A: Tensor
    G: Tensor
    n_samples: int
    has_bias: bool
    weight_shape: tuple[int, ...]
    n_positions: int
    fisher: str
    convention: str = KRONECKER_CONVENTION
    a_rank_bound: int | None = None
    g_rank_bound: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON summary (shapes and spectra extremes; the matrices themselves are not written)."""
        eig_a = torch.linalg.eigvalsh(self.A)
        eig_g = torch.linalg.eigvalsh(self.G)
        return {
            "name": self.name,
            "kind": self.kind,
            "A_shape": list(self.A.shape),
            "G_shape": list(self.G.shape),
            "A_eig_min": float(eig_a[0]),
            "A_eig_max": float(eig_a[-1]),
            "G_eig_min": float(eig_g[0]),
            "G_eig_max": float(eig_g[-1]),
            "n_samples": self.n_samples,
            "has_bias": self.has_bias,
            "weight_shape": list(self.weight_shape),
            "n_positions": self.n_positions,
            "fisher": self.fisher,
            "convention": self.convention,
            "a_rank_bound": self.a_rank_bound,
            "g_rank_bound": self.g_rank_bound,
        }


@dataclass(frozen=True)
class Factors(Mapping[str, BlockFactors]):
    """Read-only mapping ``module name -> BlockFactors`` plus the pass bookkeeping.

    ``n_forward_passes`` counts forward passes over probe batches, ``n_backward_passes`` the
    backward passes (one per Hessian column or label sample per batch). ``skipped`` maps the
    supported blocks left unfactored by the size cap (module docstring), or because they hold no
    parameters at all (zero-size, e.g. ``nn.Linear(4, 0)``), to the reason.
    """

    blocks: Mapping[str, BlockFactors]
    n_samples: int
    n_forward_passes: int
    n_backward_passes: int
    fisher: str
    unsupported: tuple[str, ...] = field(default=())
    skipped: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> BlockFactors:
        return self.blocks[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an ``int`` if it is an integer ``≥ 1`` (NumPy integers included, ``bool``
    not); else ``ValueError`` naming ``name`` (``batch_size = 0`` ended in ``range()``'s own
    message, a float in a ``TypeError`` from ``range``; s16 trial X #6).

    >>> check_positive_int("batch_size", 32)
    32
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r}")
    return int(value)


def _in_place_error(err: RuntimeError) -> Exception:
    """torch's refusal to differentiate through a tensor written in place after autograd kept it
    (``h.mul_(m)`` on a ReLU's output) as a ``ValueError`` that names the cause and the fix
    (s30 trial SCALE F6: the read ended in torch's raw ``RuntimeError``); any other error as
    it is."""
    if "modified by an inplace operation" not in str(err):
        return err
    first = str(err).strip().splitlines()[0]
    return ValueError(
        "the read needs reverse-mode derivatives of the model (the K-FAC factors), and torch "
        "cannot compute them: the forward writes in place into a tensor that autograd keeps for "
        "the backward (h.mul_(m) or h *= m on an activation's output, a ReLU applied in place "
        "to a tensor that is read again); write that step out of place (h = h * m). "
        f"torch: {first}"
    )


@torch.inference_mode(False)
@torch.enable_grad()
def kfac_factors(
    model: nn.Module,
    data: Any,
    family: Any,
    *,
    params: Mapping[str, Tensor] | None = None,
    batch_size: int = 256,
    max_exact_classes: int = MAX_EXACT_CLASSES,
    mc_samples: int = 1,
    seed: int = 0,
    max_factor_dim: int = MAX_FACTOR_DIM,
) -> Factors:
    """K-FAC / KFC factors of every supported block, in float64 (see the module docstring).

    ``data`` is a tensor of probe inputs ``(N, ...)`` or an ``(X, y)`` tuple (labels unused: true
    Fisher). ``params`` (optional) replaces the model's parameters for the pass. The caller's
    model is never modified (the pass runs on a float64 eval-mode copy). Blocks with a factor
    side above ``max_factor_dim`` are skipped (``Factors.skipped``, module docstring), and so are
    blocks holding no parameters (zero width, e.g. ``nn.Linear(4, 0)``: no directions).

    The pass runs under ``torch.inference_mode(False)`` and ``torch.enable_grad()``, so the
    factors are the same whatever grad mode the caller is in (``G`` is a backward pass: under
    the caller's ``inference_mode`` it would silently be 0, under ``no_grad`` it would fail);
    probe inputs created under inference mode are cloned before they reach the backward.

    Raises ValueError when a parameter or an activation is non-finite (naming the parameter or the
    module), when the data does not fit the model (naming the shapes), or when ``max_factor_dim``
    or ``batch_size`` is not a positive int.
    """
    max_factor_dim = check_positive_int("max_factor_dim", max_factor_dim)
    batch_size = check_positive_int("batch_size", batch_size)
    x_all = probe_inputs(data)
    m = float64_copy(model, params)
    check_finite_params(m)
    blocks = {n: mod for n, mod in m.named_modules() if is_supported_block(mod)}
    grouped = {n: mod for n, mod in m.named_modules() if is_grouped_conv(mod)}
    views = {n: group_views(mod) for n, mod in grouped.items()}
    skipped = {
        n: r for n, mod in blocks.items() if (r := _empty(mod) or _too_large(mod, max_factor_dim))
    }
    skipped |= {
        n: r
        for n, vs in views.items()
        if (r := _empty(grouped[n]) or _too_large(vs[0], max_factor_dim))
    }
    blocks = {n: mod for n, mod in blocks.items() if n not in skipped}
    grouped = {n: mod for n, mod in grouped.items() if n not in skipped}
    for n in grouped:  # one block per group: a plain convolution on views of the group's rows
        blocks.update({group_key(n, g): v for g, v in enumerate(views[n])})
    leaf_unsupported = tuple(
        n
        for n, mod in m.named_modules()
        if n
        and not list(mod.children())
        and not (is_supported_block(mod) or is_grouped_conv(mod))
        and has_own_params(mod)
    )
    n_total = x_all.shape[0]
    sums_a: dict[str, Tensor | None] = {n: None for n in blocks}
    sums_g: dict[str, Tensor | None] = {n: None for n in blocks}
    n_pos: dict[str, int] = {}
    rows_a: dict[str, int] = {n: 0 for n in blocks}
    rows_g: dict[str, int] = {n: 0 for n in blocks}
    inputs_seen: dict[str, list[Tensor]] = {n: [] for n in blocks}
    grads_seen: dict[str, list[Tensor]] = {n: [] for n in blocks}

    def pre_hook(name: str):
        def fn(mod: nn.Module, inputs: tuple[Tensor, ...]) -> None:
            inputs_seen[name].append(inputs[0].detach())

        return fn

    def fwd_hook(name: str):
        # a tensor hook on the output (robust to in-place activations downstream)
        def fn(mod: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            if output.requires_grad:
                output.register_hook(lambda g: grads_seen[name].append(g.detach()))
                outs_seen.append((output, output._version))
                out_of[name] = (output, output._version)

        return fn

    def group_pre_hook(name: str):
        def fn(mod: nn.Module, inputs: tuple[Tensor, ...]) -> None:
            for g in range(mod.groups):
                inputs_seen[group_key(name, g)].append(
                    inputs[0].detach()[:, group_slices(mod, g)[0]]
                )

        return fn

    def group_fwd_hook(name: str):
        def record(mod: nn.Module, grad: Tensor) -> None:
            for g in range(mod.groups):
                grads_seen[group_key(name, g)].append(grad.detach()[:, group_slices(mod, g)[1]])

        def fn(mod: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            if output.requires_grad:
                output.register_hook(lambda grad: record(mod, grad))
                outs_seen.append((output, output._version))

        return fn

    finite_handles = install_finite_checks(m)
    handles = []
    for n, mod in m.named_modules():
        if n in blocks and is_supported_block(mod):
            handles.append(mod.register_forward_pre_hook(pre_hook(n)))
            handles.append(mod.register_forward_hook(fwd_hook(n)))
        elif n in grouped:
            handles.append(mod.register_forward_pre_hook(group_pre_hook(n)))
            handles.append(mod.register_forward_hook(group_fwd_hook(n)))
    weights = [mod.weight for n, mod in m.named_modules() if n in blocks or n in grouped]
    outs_seen: list[tuple[Tensor, int]] = []
    out_of: dict[str, tuple[Tensor, int]] = {}  # block -> its output and version, this batch
    pending: dict[str, list[Tensor]] = {n: [] for n in blocks}  # G rows not yet folded in
    pending_bytes = 0
    n_fwd = n_bwd = 0
    fisher_used = "exact"
    try:
        for start in range(0, n_total, batch_size):
            xb = x_all[start : start + batch_size]
            xb = xb.to(torch.float64) if xb.is_floating_point() else xb
            if xb.is_inference():  # an inference tensor cannot be saved for the backward
                xb = xb.clone()
            for n in blocks:
                inputs_seen[n].clear()
            outs_seen.clear()
            out_of.clear()
            with torch.enable_grad():
                out = forward_checked(m, xb, data_shape=tuple(x_all.shape), data_dtype=x_all.dtype)
            n_fwd += 1
            if not torch.isfinite(out).all():
                raise ValueError("model output holds NaN or Inf values")
            for n, seen in inputs_seen.items():
                if not seen:
                    continue
                pa = torch.cat([patches(blocks[n], a) for a in seen], dim=1)
                if blocks[n].bias is not None:
                    pa = torch.cat([pa, pa.new_ones(*pa.shape[:-1], 1)], dim=-1)
                n_pos[n] = pa.shape[1]
                rows_a[n] += pa.shape[0] * pa.shape[1]
                contrib = torch.einsum("bpi,bpj->ij", pa, pa) / pa.shape[1]
                sums_a[n] = contrib if sums_a[n] is None else sums_a[n] + contrib
            mode, s = hessian_root(family, out.detach(), exact_limit=max_exact_classes)
            if mode == "exact":
                cols = [s[:, :, c].reshape(out.shape) for c in range(s.shape[2])]
                scale = 1.0
            else:
                fisher_used = f"mc({mc_samples})"
                kb = sample_keys(xb, seed)  # per batch: no copy of the whole probe set
                cols = [keyed_score(family, out.detach(), kb, d) for d in range(mc_samples)]
                scale = 1.0 / mc_samples
            # the block whose output is the model's output: its G in closed form, no sampling;
            # only a Linear (units on the last axis) called once, its output not changed in place
            head = None
            if mode != "exact":
                head = next(
                    (
                        n
                        for n, (t, v) in out_of.items()
                        if t is out
                        and t._version == v
                        and type(blocks[n]) is nn.Linear
                        and len(inputs_seen[n]) == 1
                    ),
                    None,
                )
            if head is not None:
                g_head, rows = output_block_g(family, out.detach())
                sums_g[head] = g_head if sums_g[head] is None else sums_g[head] + g_head
                rows_g[head] += rows
            if not weights or not out.requires_grad:
                continue
            # differentiate for the block outputs themselves (their hooks record g; no weight
            # gradient is formed), unless an in-place op changed one after its block ran
            intact = bool(outs_seen) and all(t._version == v for t, v in outs_seen)
            targets = [t for t, _ in outs_seen] if intact else weights
            for j, col in enumerate(cols):
                for n in blocks:
                    grads_seen[n].clear()
                try:
                    torch.autograd.grad(
                        (out * col).sum(),
                        targets,
                        retain_graph=j < len(cols) - 1,
                        allow_unused=True,
                    )
                except RuntimeError as err:
                    raise _in_place_error(err) from err
                n_bwd += 1
                for n, seen in grads_seen.items():
                    if not seen or n == head:
                        continue
                    gg = torch.cat([gradient_positions(blocks[n], g) for g in seen], dim=1)
                    flat = gg.reshape(-1, gg.shape[-1])
                    rows_g[n] += flat.shape[0]
                    pending[n].append(flat)
                    pending_bytes += flat.numel() * flat.element_size()
                if pending_bytes > G_BUFFER_BYTES:
                    _fold_g(pending, sums_g, scale)
                    pending_bytes = 0
            _fold_g(pending, sums_g, scale)
            pending_bytes = 0
    finally:
        for h in handles + finite_handles:
            h.remove()
    n_total, called = _all_reduce_sums(blocks, sums_a, sums_g, n_pos, n_total, rows_a, rows_g)
    result = {}
    for n, mod in blocks.items():
        if not called[n]:
            continue  # block never called on the probe data
        d_out = mod.weight.shape[0]
        g_sum = sums_g[n]
        if g_sum is None:
            g_sum = torch.zeros(d_out, d_out, dtype=torch.float64, device=mod.weight.device)
        _check_finite_factor(n, "A", sums_a[n])
        _check_finite_factor(n, "G", g_sum)
        result[n] = BlockFactors(
            name=n,
            kind=block_kind(mod),
            A=(sums_a[n] / n_total).contiguous(),
            G=(g_sum / n_total).contiguous(),
            n_samples=n_total,
            has_bias=mod.bias is not None,
            weight_shape=tuple(mod.weight.shape),
            n_positions=n_pos[n],
            fisher=fisher_used,
            a_rank_bound=rows_a[n],
            g_rank_bound=rows_g[n],
        )
    return Factors(
        blocks=result,
        n_samples=n_total,
        n_forward_passes=n_fwd,
        n_backward_passes=n_bwd,
        fisher=fisher_used,
        unsupported=leaf_unsupported,
        skipped=skipped,
    )


def _check_finite_factor(block: str, side: str, m: Tensor) -> None:
    """``ValueError`` when a factor's sum overflowed float64 (finite parameters and data whose
    activations or output gradients exceed about 1e154 square to ``inf``): ``eigh`` of it then
    failed with a LAPACK error and a traceback (s15 trial S #10)."""
    if not bool(torch.isfinite(m).all()):
        raise ValueError(
            f"factor {side} of block {block!r} is not finite: its second moments overflow float64 "
            "(the block's activations or output gradients exceed about 1e154); rescale the model "
            "or its data"
        )


def output_block_g(family: Any, out: Tensor) -> tuple[Tensor, int]:
    """``Σ_rows H_out`` of one batch for the block whose output *is* the model output
    ``out`` (``(B, ..., d)``, rows = samples × positions), and a bound on its rank.

    There ``g = ∂ log p/∂s`` is the output score itself, so ``E_y[g gᵀ] = H_out`` at every row:
    categorical ``diag(p) − ppᵀ`` (summed: ``diag(Σ p) − PᵀP``), Gaussian ``I/σ²``. This
    replaces the sampled-label estimate, whose rank (one label per row) would leave most of a
    large vocabulary in ``G``'s kernel.

    >>> import torch
    >>> from neuromanifold.singular.family import Categorical
    >>> g, rows = output_block_g(Categorical(), torch.zeros(1, 2, dtype=torch.float64))
    >>> g.tolist(), rows
    ([[0.25, -0.25], [-0.25, 0.25]], 2)
    """
    flat = out.reshape(-1, out.shape[-1])
    d = flat.shape[1]
    if "gauss" in type(family).__name__.lower():
        sigma = float(getattr(family, "sigma", 1.0))
        eye = torch.eye(d, dtype=flat.dtype, device=flat.device)
        return eye * (flat.shape[0] / sigma**2), flat.shape[0] * d
    p = torch.softmax(flat, dim=-1)
    return torch.diag(p.sum(0)) - p.T @ p, flat.shape[0] * d


def _empty(mod: nn.Module) -> str | None:
    """Why block ``mod``'s factors are not formed because it holds no parameters (a zero-width
    layer, e.g. an optional branch configured as ``nn.Linear(4, 0)``), or ``None``. A block whose
    weight alone is empty but whose bias is not (``nn.Linear(0, 3)``) is factored: ``A`` is the
    bias coordinate's ``[[1]]``."""
    if mod.weight.numel() + (0 if mod.bias is None else mod.bias.numel()) > 0:
        return None
    return (
        f"zero-size block (weight of shape {tuple(mod.weight.shape)}"
        f"{'' if mod.bias is None else ', empty bias'}): it holds no parameters, so it has no "
        f"directions to read"
    )


def _too_large(mod: nn.Module, max_dim: int) -> str | None:
    """Why block ``mod``'s factors are not formed (its larger side exceeds ``max_dim``), or
    ``None``: e.g. ``"no K-FAC directions: its factor G would be 50257 × 50257 (20.2 GB float64)
    above max_factor_dim 16384 (...)"``."""
    d_in = math.prod(mod.weight.shape[1:]) + (1 if mod.bias is not None else 0)
    d_out = mod.weight.shape[0]
    side, d = ("A", d_in) if d_in >= d_out else ("G", d_out)
    if d <= max_dim:
        return None
    gb = d * d * 8 / 1e9
    return (
        f"no K-FAC directions: its factor {side} would be {d} × {d} ({gb:.1f} GB float64) above "
        f"max_factor_dim {max_dim} (raise it: read(..., max_factor_dim=...)); closed-form "
        f"detectors still read it"
    )


def _fold_g(
    pending: dict[str, list[Tensor]], sums_g: dict[str, Tensor | None], scale: float
) -> None:
    """``sums_g[n] += scale · RᵀR`` with ``R`` the buffered rows of block ``n`` stacked (one
    GEMM per block, shape ``(d_out, d_out)``); empties the buffers."""
    for n, rows in pending.items():
        if not rows:
            continue
        r = rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)
        rows.clear()
        if sums_g[n] is None:
            sums_g[n] = (r.T @ r) * scale
        else:  # in place: no d_out × d_out temporary
            sums_g[n].addmm_(r.T, r, alpha=scale)


def _all_reduce_sums(
    blocks: Mapping[str, nn.Module],
    sums_a: dict[str, Tensor | None],
    sums_g: dict[str, Tensor | None],
    n_pos: dict[str, int],
    n_local: int,
    rows_a: dict[str, int] | None = None,
    rows_g: dict[str, int] | None = None,
) -> tuple[int, dict[str, bool]]:
    """Sum the per-rank factor sums and sample counts over the default process group.

    Without an initialised ``torch.distributed`` process group this only reports which blocks were
    called. With one (e.g. under ``torchrun``, gloo or nccl), every rank must call `kfac_factors`
    on the same model with its own shard of the probe set; sums are exact, so the factors equal
    those of a single process on the concatenated data. The rank-one term counts ``rows_a`` /
    ``rows_g`` (when given) are summed in place. Returns the global N and the called flags.
    """
    import torch.distributed as dist

    called = {n: sums_a[n] is not None for n in blocks}
    if not (dist.is_available() and dist.is_initialized()):
        return n_local, called
    dev = next((m.weight.device for m in blocks.values()), torch.device("cpu"))
    count = torch.tensor([float(n_local)], dtype=torch.float64, device=dev)
    dist.all_reduce(count)
    for n, mod in blocks.items():
        flag = torch.tensor([1.0 if called[n] else 0.0], dtype=torch.float64, device=dev)
        dist.all_reduce(flag)
        called[n] = bool(flag.item() > 0)
        if not called[n]:
            continue
        d_in = math.prod(mod.weight.shape[1:]) + (1 if mod.bias is not None else 0)
        d_out = mod.weight.shape[0]
        dev = mod.weight.device
        a = sums_a[n]
        g = sums_g[n]
        a = a if a is not None else torch.zeros(d_in, d_in, dtype=torch.float64, device=dev)
        g = g if g is not None else torch.zeros(d_out, d_out, dtype=torch.float64, device=dev)
        a, g = a.contiguous().clone(), g.contiguous().clone()
        dist.all_reduce(a)
        dist.all_reduce(g)
        sums_a[n], sums_g[n] = a, g
        pos = torch.tensor([float(n_pos.get(n, 0))], dtype=torch.float64, device=dev)
        dist.all_reduce(pos, op=dist.ReduceOp.MAX)
        n_pos[n] = int(pos.item())
        if rows_a is not None and rows_g is not None:
            counts = [float(rows_a[n]), float(rows_g[n])]
            rows = torch.tensor(counts, dtype=torch.float64, device=dev)
            dist.all_reduce(rows)
            rows_a[n], rows_g[n] = int(rows[0].item()), int(rows[1].item())
    return int(count.item()), called


def block_fisher_reference(
    model: nn.Module,
    data: Any,
    family: Any,
    block: str,
    *,
    params: Mapping[str, Tensor] | None = None,
) -> Tensor:
    """Exact true-Fisher block of module ``block`` in the column-major vec of ``W̄ = [W, b]``.

    ``F = (1/N) Σ_i J_iᵀ H_out(x_i) J_i`` with ``J_i = ∂ f(x_i)/∂ vec(W̄)`` from dense ``jacrev``
    (brute-force oracle for :func:`kfac_factors`; categorical sequence logits ``(N, ..., C)``
    take the block-diagonal ``H_out`` of their positions).
    Shape ``(D, D)``, ``D = d_out · (d_in [+1])``.
    """
    x = probe_inputs(data).to(torch.float64)
    m = float64_copy(model, params)
    mod = m.get_submodule(block)
    base = {k: v.detach() for k, v in m.named_parameters()}
    prefix = f"{block}." if block else ""
    w_key, b_key = f"{prefix}weight", f"{prefix}bias"
    d_out = mod.weight.shape[0]
    w_flat = base[w_key].reshape(d_out, -1)
    wbar = torch.cat([w_flat, base[b_key].unsqueeze(1)], 1) if mod.bias is not None else w_flat

    def call(wb: Tensor, xi: Tensor) -> Tensor:
        p = dict(base)
        p[w_key] = wb[:, : w_flat.shape[1]].reshape(mod.weight.shape)
        if mod.bias is not None:
            p[b_key] = wb[:, -1]
        return torch.func.functional_call(m, p, (xi.unsqueeze(0),))

    def f(wb: Tensor, xi: Tensor) -> Tensor:
        return call(wb, xi).reshape(-1)

    total = None
    for i in range(x.shape[0]):
        jac = torch.func.jacrev(f)(wbar, x[i])  # (C, d_out, d_in+1)
        jac = jac.transpose(1, 2).reshape(jac.shape[0], -1)  # column-major vec
        out = call(wbar, x[i])
        if out.ndim > 2 and "gauss" not in type(family).__name__.lower():
            # categorical sequence logits: H_out is block diagonal over positions
            probs = torch.softmax(out.reshape(-1, out.shape[-1]), dim=-1)
            h = torch.block_diag(*[torch.diag(q) - torch.outer(q, q) for q in probs])
        else:
            _, s = hessian_root(family, out.reshape(1, -1), exact_limit=10**9)
            h = s[0] @ s[0].T
        term = jac.T @ h @ jac
        total = term if total is None else total + term
    return total / x.shape[0]
