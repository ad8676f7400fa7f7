"""How a forward-mode pass over the probe set is run: kernels, sample chunks and vmap lanes.

* `differentiable_kernels`: attention through kernels that have forward-mode derivatives;
  `check_forward_mode`: the read's early test that the model has them at all.
* **Lanes and chunks.** A pass that carries ``L`` lanes under ``vmap`` (``L`` directions, or ``L``
  t-values of a sweep) holds every activation ``L`` times. Most of a tangent's work is elementwise
  (adds, activation derivatives, the layer-norm formula) and bound by memory traffic, and past a
  few MiB per tensor a batched pass became slower per lane than ``L`` separate passes (zoo ViT,
  dim 32, 16 directions, one thread: 0.26 ms per sample-direction with 256 samples in one pass,
  0.17 ms in passes of 32). So samples are further split so that the largest tensor any call
  returns holds at most ``LANE_BYTES`` (8 MiB, within 10 % of the best fixed split on the ViTs of
  dim 32 and 64 and the MLPs of width 256 and 1024 of ``benchmarks/scaling.py``):
  ``chunk = LANE_BYTES // (L·s)``, with ``s`` the bytes per sample of the model's largest
  activation, measured once per model and input shape by primal forwards on 2 and 3 samples
  (`activation_bytes_per_sample`). This only ever lowers a caller's ``chunk_size``, so memory
  budgets still hold; the split changes the order of the float64 sums only (`lane_chunk` for
  directions, `line_lanes` for the t-values of a sweep).
* **Which parameters carry a tangent** (`tangent_keys`). Forward mode pays a Python-level
  detour (torch's zero-tangent fallback through ``torch._refs``, about 0.2 ms per operator here)
  whenever an operator meets one tensor with a tangent and one without, as every bias, norm
  weight or residual branch downstream of the direction does. So besides the direction's own
  parameters, every floating-point parameter registered after the first of them gets an
  explicit zero tangent; those before it stay plain (nothing upstream of the direction has a
  tangent).
  Registration order stands in for the order of use; where they differ only speed changes,
  never a value (zero tangents add exact zeros).
* **Lanes of a sweep.** The t-values of one sweep move the parameters to different points, so
  their lanes share no primal work and only save per-call overhead. On CPU that pays while a
  group's activations stay in cache and costs once they spill, so a group holds at most
  ``SWEEP_LANE_BYTES`` (three quarters of a core's L2 cache) per intra-op thread (`line_lanes`);
  on other devices ``LANE_BYTES``.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.func import functional_call, jvp
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.utils import parametrize
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from neuromanifold.singular._validate import (
    Prepared,
    is_captured_write_error,
    name_buffer_writes,
)
from neuromanifold.singular.factor_inputs import forward_checked

__all__ = [
    "DEFAULT_L2_BYTES",
    "L2_FRACTION",
    "LANE_BYTES",
    "SWEEP_LANE_BYTES",
    "activation_bytes_per_sample",
    "check_chunk_size",
    "check_forward_mode",
    "chunks",
    "differentiable_kernels",
    "l2_bytes_per_core",
    "lane_chunk",
    "line_lanes",
    "tangent_keys",
]

LANE_BYTES = 8 * 2**20
"""Target bytes of the largest tensor one operator returns in a (vmapped) JVP pass."""
L2_FRACTION = 0.75
"""Share of one core's L2 cache that a sweep's group of t-lanes may fill per intra-op thread."""
DEFAULT_L2_BYTES = 2 * 2**20
"""L2 size assumed where the cache size cannot be read (the machine the cap was measured on)."""


def l2_bytes_per_core(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size in bytes of the level-2 data (or unified) cache of CPU 0, read from Linux sysfs
    (``index*/level`` = 2, ``index*/type`` ≠ Instruction, ``index*/size`` like ``2048K``);
    ``None`` where it cannot be read (another OS, a container hiding sysfs).

    >>> l2_bytes_per_core("/nonexistent") is None
    True
    """
    base = Path(root)
    try:
        entries = sorted(base.glob("index*"))
    except OSError:
        return None
    for entry in entries:
        try:
            level = (entry / "level").read_text().strip()
            kind = (entry / "type").read_text().strip()
            size = (entry / "size").read_text().strip()
        except OSError:
            continue
        match = re.fullmatch(r"(\d+)\s*([KMG]?)B?", size, flags=re.IGNORECASE)
        if level != "2" or kind.lower() == "instruction" or match is None:
            continue
        scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2).upper()]
        return int(match.group(1)) * scale or None
    return None


SWEEP_LANE_BYTES = int(L2_FRACTION * (l2_bytes_per_core() or DEFAULT_L2_BYTES))
"""On CPU, per intra-op thread: the most bytes ``lanes · samples · s`` one group of t-values of a
sweep may hold: ``L2_FRACTION`` of one core's L2 cache, read once at import (`l2_bytes_per_core`;
``DEFAULT_L2_BYTES`` where unreadable). Measured on a machine with 2 MiB of L2 per core (cap
1.5 MiB): a 32-point sweep with the default 8 t-values per group against one t at a time, one
thread, without → with the cap (2026-11-30): zoo ViT dim 32 at N = 16 / 64 / 128: 1.48 → 1.42,
0.89 → 1.03, 0.76 → 1.01; dim 64 at N = 32 / 64: 0.82 → 0.99, 0.84 → 1.00; MLP
64 → 256 → 256 → 10 at N = 64 / 128 / 256: 1.51 → 1.49, 0.96 → 1.34, 0.90 → 1.13. Two threads:
ViT dim 32 at N = 128 0.81 → 1.09, dim 64 at N = 64 0.92 → 1.03, at N = 16 1.43 → 1.52. Groups
holding more than about 2 MiB per thread (the L2 size) were mostly slower than single t-values;
the cap keeps the groups that gained and splits those that lost (`benchmarks/scaling.py --only
batching` prints the sweep ratio). Scaling the cap with the L2 size on other machines is this
project's assumption, not a measurement."""
_PROBE_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError)
_ACTIVATION_CACHE: weakref.WeakKeyDictionary[nn.Module, dict[tuple, int | None]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.contextmanager
def differentiable_kernels() -> Iterator[None]:
    """Route attention through kernels that have forward-mode derivatives.

    Fused attention (flash / memory-efficient SDPA, and the inference fast path of
    ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer`` in eval mode) has no forward-mode
    AD in torch. Inside this context SDPA uses its math backend and the MHA fast path is off
    (the previous setting is restored on exit); both compute the same function, exactly in float64.
    """
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def check_forward_mode(
    model: nn.Module, x: Tensor, *, data_shape: tuple[int, ...] | None = None
) -> None:
    """Raise a ``ValueError`` unless ``torch.func.jvp`` of ``model`` on ``x`` runs.

    One forward-mode pass (inside `differentiable_kernels`, along a tangent of ones on every
    floating-point parameter) before the read's factor and detection passes, so a model that
    cannot be differentiated in forward mode — a custom ``torch.autograd.Function`` without
    ``setup_context`` and ``jvp``, an operator without a forward-mode formula — fails at once,
    with the cause named, instead of in its first sweep.

    When the pass fails, a plain forward (no derivatives, `forward_checked`) is run on ``x``; if
    that fails too, the cause is not forward mode, and the error is `forward_checked`'s, which
    names the data's shape. ``x`` is the data's first samples; a model that ran on more of them
    but not on these reads the data's first axis as something other than the sample axis, and
    the message says so. ``data_shape``: the whole probe set's shape, as in `forward_checked`.
    If ``jvp`` failed on an in-place write into a captured tensor, the error names the buffers
    the forward writes, or says the write is into a captured tensor
    (`neuromanifold.singular._validate.name_buffer_writes`). ``model`` is the read's working
    copy, so its buffers may be written.
    """
    params = {k: v.detach() for k, v in model.named_parameters() if v.is_floating_point()}
    tangents = {k: torch.ones_like(v) for k, v in params.items()}

    def f(p: dict[str, Tensor]) -> object:
        return functional_call(model, p, (x,))

    try:
        with differentiable_kernels():
            jvp(f, (params,), (tangents,))
    except (RuntimeError, NotImplementedError) as err:
        try:
            with torch.no_grad():
                forward_checked(model, x, data_shape=data_shape)
        except ValueError as plain:
            raise ValueError(
                f"the model's forward fails without derivatives too on the data's first "
                f"{x.shape[0]} samples (shape {tuple(x.shape)}); a model that runs on more "
                f"samples but not on these reads the data's first axis as something other than "
                f"the sample axis, which it must be: {plain}"
            ) from plain
        if is_captured_write_error(err):  # name the buffers the forward writes, if any
            raise name_buffer_writes(
                model, lambda bufs: functional_call(model, {**params, **bufs}, (x,)), err
            ) from err
        raise ValueError(
            f"the read needs forward-mode derivatives of the model (torch.func.jvp), which "
            f"failed: {err}{_parametrization_hint(model, err)}"
        ) from err


def _parametrization_hint(model: nn.Module, err: BaseException) -> str:
    """A clause naming the parametrized modules when forward mode failed inside torch's
    weight norm (``torch.nn.utils.parametrizations.weight_norm`` and the older hook both call
    ``_weight_norm_interface``, which has no forward-mode formula; s28 trial EXOTIC #6: the
    error named the operator, not the module), else ``""``.

    >>> lin = nn.utils.parametrizations.weight_norm(nn.Linear(2, 2))
    >>> _parametrization_hint(nn.Sequential(lin), RuntimeError("_weight_norm_interface"))[:40]
    ' (in the weight norm of 0: torch.nn.util'
    """
    if "weight_norm" not in str(err):
        return ""
    names = [
        n or "<root>"
        for n, m in model.named_modules()
        if parametrize.is_parametrized(m) or hasattr(m, "weight_g")
    ]
    if not names:
        return ""
    return (
        f" (in the weight norm of {', '.join(names[:5])}"
        f"{', …' if len(names) > 5 else ''}: torch.nn.utils.parametrizations.weight_norm has no "
        "forward-mode formula; a parametrization written out, w = g · v / ‖v‖ with "
        "torch.nn.utils.parametrize.register_parametrization, reads, or remove the weight norm "
        "with torch.nn.utils.parametrize.remove_parametrizations before the read)"
    )


class _OutputBytes(TorchFunctionMode):
    """Records, per torch function call in order, the bytes of the tensors it returns.

    Views are skipped. A torch-function mode sees the calls the model makes from Python (modules,
    ``torch.*``/``F.*`` functions, tensor methods), not the kernels inside a composite call.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.sizes.append(
            sum(
                t.numel() * t.element_size()
                for t in tree_leaves(out)
                if isinstance(t, Tensor) and t._base is None
            )
        )
        return out


def activation_bytes_per_sample(model: nn.Module, prep: Prepared) -> int | None:
    """Bytes per sample of the largest tensor an operator returns in the model's forward.

    Two primal forwards (no autograd) on 2 and 3 copies of the first sample record the bytes each
    torch call returns; ``s = max_call (bytes₃ − bytes₂)`` (weight-sized temporaries cancel; 1
    sample is avoided because some kernels take other paths for a batch of one). If the two runs
    make different call sequences, ``s = max_call bytes₃ / 3``, an upper bound. Intermediates
    inside one composite call (e.g. the attention matrix inside
    ``F.scaled_dot_product_attention``) are not seen, so ``s`` can be too small for long-sequence
    attention; that makes chunks larger than intended (slower), never a different value. Cached
    per model (weakly) and input shape, dtype and device: the value depends on shapes only.

    Returns:
        ``s`` in bytes (≥ 1), or ``None`` for a single sample (nothing to split) or when the probe
        forward fails (the pass then runs unsplit and reports its own error).
    """
    if prep.n < 2:
        return None
    key = (tuple(prep.x.shape[1:]), prep.x.dtype, prep.x.device)
    cache = _ACTIVATION_CACHE.setdefault(model, {})
    if key in cache:
        return cache[key]
    runs: list[list[int]] = []
    try:
        for k in (2, 3):
            rec = _OutputBytes()
            xk = prep.x[:1].expand(k, *prep.x.shape[1:]).contiguous()
            with torch.no_grad(), differentiable_kernels(), rec:
                functional_call(model, (prep.params, prep.buffers), (xk,))
            runs.append(rec.sizes)
    except _PROBE_ERRORS:
        cache[key] = None
        return None
    two, three = runs
    if len(two) == len(three):
        per = max((b - a for a, b in zip(two, three, strict=True)), default=0)
    else:
        per = max(three, default=0) // 3
    cache[key] = max(int(per), 1)
    return cache[key]


def lane_chunk(model: nn.Module, prep: Prepared, lanes: int, chunk_size: int | None) -> int | None:
    """Samples per pass for ``lanes`` vmap lanes: ``min(chunk_size, LANE_BYTES // (lanes·s))``.

    ``s`` is `activation_bytes_per_sample`; at least 1 sample; ``None`` (= all samples) when the
    whole probe set fits or ``s`` is unknown and no ``chunk_size`` was given.
    """
    check_chunk_size(chunk_size)
    s = activation_bytes_per_sample(model, prep)
    if s is None:
        return chunk_size
    fit = max(1, LANE_BYTES // (max(lanes, 1) * s))
    if chunk_size is None:
        return None if fit >= prep.n else fit
    return min(chunk_size, fit)


def line_lanes(
    model: nn.Module, prep: Prepared, t_batch: int, chunk_size: int | None
) -> tuple[int, int | None]:
    """``(lanes, chunk)`` for a sweep: t-values per ``vmap`` group and samples per pass.

    Lanes only save per-call overhead, and a pass moves the same samples·lanes whether they are
    more samples or more lanes, so samples come first: ``t_batch`` lanes are kept while a full
    chunk of samples (``chunk_size``, default all N) still fits the lane budget with them, fewer
    lanes otherwise, down to 1 lane with the samples split by `lane_chunk`. The budget is
    ``LANE_BYTES``, and on CPU at most ``SWEEP_LANE_BYTES`` per intra-op thread (module
    docstring).
    """
    check_chunk_size(chunk_size)
    s = activation_bytes_per_sample(model, prep)
    lanes = t_batch
    if s is not None and t_batch > 1:
        cap = prep.n if chunk_size is None else min(chunk_size, prep.n)
        lanes = max(1, min(t_batch, _line_budget(prep) // (cap * s)))
    return lanes, lane_chunk(model, prep, lanes, chunk_size)


def _line_budget(prep: Prepared) -> int:
    """Bytes one group of t-lanes may hold: ``LANE_BYTES``, capped on CPU (`SWEEP_LANE_BYTES`)."""
    if prep.x.device.type != "cpu":
        return LANE_BYTES
    return min(LANE_BYTES, SWEEP_LANE_BYTES * torch.get_num_threads())


def tangent_keys(params: Mapping[str, Tensor], touched: Iterable[str]) -> list[str]:
    """Parameters that carry a tangent in a pass along directions over ``touched`` (module
    docstring): the touched names and every floating-point parameter registered after the first
    of them, in the order of ``params`` (which follows ``model.named_parameters()``).

    One JVP pass of the zoo ViT (dim 32, 64 samples, one thread) along a single-block
    direction, touched names only → with this rule: patch embedding 23.9 → 17.0 ms, a block-0
    attention bias 17.9 → 14.0 ms, a block-1 norm weight 14.3 → 12.0 ms, the head 5.8 → 5.5 ms
    (every parameter with a tangent instead: 16.5, 15.2, 15.4, 16.4 ms).

    >>> p = {k: torch.zeros(2) for k in "abcd"} | {"e": torch.zeros(2, dtype=torch.long)}
    >>> tangent_keys(p, ["c", "b"])
    ['b', 'c', 'd']
    """
    order = list(params)
    wanted = set(touched)
    missing = wanted.difference(order)
    if missing:
        raise KeyError(f"not a parameter: {sorted(missing)}")
    if not wanted:
        return []
    first = min(order.index(k) for k in wanted)
    return [k for k in order[first:] if k in wanted or params[k].is_floating_point()]


def check_chunk_size(chunk_size: object) -> None:
    if chunk_size is None:
        return
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int or None; got {chunk_size!r}")


def chunks(n: int, chunk_size: int | None) -> list[slice]:
    check_chunk_size(chunk_size)
    if chunk_size is None:
        return [slice(0, n)]
    return [slice(i, min(i + chunk_size, n)) for i in range(0, n, chunk_size)]
