"""Which calls inside a ``forward`` continue a chain of the data-flow graph, and with which label
(used by `neuromanifold.singular.detectors.graph`).

* `FUNCTIONAL_ELEMENTWISE`: elementwise functions (``F.relu``, ``torch.tanh``, …), labelled
  with the class name of the equal module.
* `POWERS`: a tensor raised to a scalar power (``h ** 2``, ``torch.pow``, ``h.square()``,
  ``h * h``), labelled ``"Square"`` or ``"Pow(p)"`` (`power_label`), with their degree of
  homogeneity (`power_degree`).
* `CHANNELWISE`: pooling, spatial means and flattens that keep every channel of a
  channels-first source apart (`channel_label`, `channels_first_ndim`); `graph` applies the
  same test after a residual sum of channel-wise terms.
* `reshape_label`: a reshape, view or flatten to the input's shape (GPT-2's
  ``ln_f(h).view(output_shape)``) is the identity, labelled ``"Identity"``; one that keeps the
  last (feature) axis of a source whose units lie there (``h.view(-1, d)``) regroups whole
  rows, labelled ``"SelectRows"``.
* `ROW_SELECTIONS`: basic indexing that keeps the last (feature) axis whole and last
  (``h[:, s, :]``, ``h[:, -1]``, ``h[..., 1:, :]``), labelled ``"SelectRows"``
  (`row_selection_label`).
* `SCALES`: an elementwise product with, or a quotient by, a factor that is not computed from
  any source (``h * 0.5``, ``h * self.mask``, ``h / self.temperature``), labelled ``"Scale"``
  (`scale_pairs` names the candidate operands; the graph decides which factors count).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "CHANNELWISE",
    "CHANNELWISE_LABELS",
    "FUNCTIONAL_ELEMENTWISE",
    "METADATA_READS",
    "POWERS",
    "ROW_SELECTIONS",
    "SCALE",
    "SCALES",
    "SELECT_ROWS",
    "channel_label",
    "channels_first_ndim",
    "layout_step",
    "metadata_only_args",
    "power_degree",
    "power_label",
    "reshape_label",
    "row_selection_label",
    "scale_pairs",
]


_F = nn.functional
FUNCTIONAL_ELEMENTWISE: dict[object, str] = {
    **dict.fromkeys(
        (_F.relu, _F.relu_, torch.relu, torch.relu_, Tensor.relu, Tensor.relu_), "ReLU"
    ),
    **dict.fromkeys((_F.leaky_relu, _F.leaky_relu_), "LeakyReLU"),
    _F.prelu: "PReLU",  # its slopes, the second argument, are the module's own parameter
    _F.gelu: "GELU",
    _F.silu: "SiLU",
    **dict.fromkeys((torch.sigmoid, _F.sigmoid, Tensor.sigmoid), "Sigmoid"),
    **dict.fromkeys((torch.tanh, _F.tanh, Tensor.tanh), "Tanh"),
    _F.elu: "ELU",
    _F.softplus: "Softplus",
    _F.mish: "Mish",
    _F.hardtanh: "Hardtanh",
    _F.relu6: "ReLU6",
    _F.hardswish: "Hardswish",
    _F.hardsigmoid: "Hardsigmoid",
    _F.dropout: "Dropout",
}
"""Elementwise functions (called inside a ``forward`` rather than as modules) that continue a
chain, labelled with the class name of the equal module (``via`` then reads the same either
way)."""

_SQUARE = frozenset((torch.square, Tensor.square, Tensor.square_))
_MUL = frozenset((torch.mul, Tensor.mul, Tensor.__mul__, Tensor.mul_, Tensor.__imul__))
POWERS = frozenset(
    (torch.pow, Tensor.pow, Tensor.__pow__, Tensor.pow_, Tensor.__ipow__, *_SQUARE, *_MUL)
)
"""Functions that raise their first (tensor) argument to a power elementwise when called the way
`power_label` accepts: ``square``, ``pow`` (``**``) with a real scalar exponent, and ``mul``
(``*``) of a tensor with itself (one and the same tensor object on both sides)."""


def power_label(func: object, args: tuple, kwargs: dict) -> str | None:
    """The label of ``func(*args, **kwargs)`` (``func`` in `POWERS`) when it raises its tensor
    argument to a real scalar power: ``"Square"`` for the exponent 2 (``h ** 2``, ``h.pow(2.0)``,
    ``torch.square(h)``, ``h * h``), ``"Pow(p)"`` for any other finite exponent ``p``; None for any
    other call (a product of two different tensors, a tensor or boolean exponent, a scalar base).

    >>> h = torch.ones(2)
    >>> power_label(Tensor.__pow__, (h, 2), {}), power_label(torch.pow, (h,), {"exponent": 3})
    ('Square', 'Pow(3)')
    >>> power_label(Tensor.mul, (h, h), {}), power_label(Tensor.mul, (h, h.clone()), {})
    ('Square', None)
    """
    if not args or not isinstance(args[0], Tensor):
        return None
    if func in _SQUARE:
        return "Square"
    if func in _MUL:
        other = args[1] if len(args) > 1 else kwargs.get("other")
        return "Square" if other is args[0] else None
    p = args[1] if len(args) > 1 else kwargs.get("exponent")
    if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p):
        return None
    return "Square" if p == 2 else f"Pow({p:g})"


SCALE = "Scale"
"""The label of an elementwise product with a constant factor (`scale_pairs`)."""
_MUL_ANY = frozenset((*_MUL, Tensor.__rmul__))
_DIV = frozenset((torch.div, torch.true_divide, Tensor.div, Tensor.true_divide, Tensor.__truediv__))
_IN_PLACE = frozenset((Tensor.mul_, Tensor.__imul__, Tensor.div_, Tensor.__itruediv__))
SCALES = frozenset((*_MUL_ANY, *_DIV, *_IN_PLACE))
"""Functions that multiply a tensor elementwise by another operand or divide it by one: for a
factor ``m`` that does not depend on the units' parameters, ``(c·z)·m = c·(z·m)`` for every
``c``, so the step is linear in ``z`` unit by unit and positively homogeneous of degree 1."""


METADATA_READS = frozenset(
    (
        Tensor.type_as,
        Tensor.expand_as,
        Tensor.view_as,
        Tensor.reshape_as,
        Tensor.to,
        Tensor.new_zeros,
        Tensor.new_ones,
        Tensor.new_full,
        Tensor.new_empty,
        torch.zeros_like,
        torch.ones_like,
        torch.empty_like,
        torch.full_like,
        torch.rand_like,
        torch.randn_like,
    )
)
"""Functions that read only the shape, dtype or device of some tensor arguments: the second
argument of ``m.type_as(h)``, ``m.expand_as(h)``, ``m.view_as(h)``, ``m.reshape_as(h)``,
``m.to(h)``, and every argument of ``h.new_zeros(…)`` and the ``*_like`` constructors. Such a call
does not read ``h``'s values, so it is no stop of ``h``'s source (`metadata_only_args`)."""
_FIRST_IS_DATA = frozenset(
    (Tensor.type_as, Tensor.expand_as, Tensor.view_as, Tensor.reshape_as, Tensor.to)
)


def metadata_only_args(func: object, args: tuple) -> tuple:
    """The arguments of ``func(*args)`` whose values the call reads: all of them, except for
    `METADATA_READS`, where only the first argument of ``type_as``/``expand_as``/``view_as``/
    ``reshape_as``/``to`` is read, and none of a constructor's.

    >>> m, h = torch.ones(2), torch.zeros(2)
    >>> len(metadata_only_args(Tensor.type_as, (m, h))), len(metadata_only_args(torch.mul, (m, h)))
    (1, 2)
    >>> metadata_only_args(torch.zeros_like, (h,))
    ()
    """
    if func not in METADATA_READS:
        return args
    return args[:1] if func in _FIRST_IS_DATA else ()


def layout_step(steps: list[str] | tuple[str, ...]) -> str | None:
    """The last step of ``steps`` that is not a constant factor (`SCALE`): what sets how the
    consumer's columns hold the producer's units (``"FlattenChannels"``: a block per channel),
    since a factor after it keeps every feature where it is; None when there is none.

    >>> layout_step(("ReLU", "FlattenChannels", "Scale")), layout_step(("Scale",))
    ('FlattenChannels', None)
    """
    return next((s for s in reversed(steps) if s != SCALE), None)


def scale_pairs(func: object, args: tuple, kwargs: dict) -> tuple[tuple[object, object], ...]:
    """The ``(scaled, factor)`` operand pairs of ``func(*args, **kwargs)`` (``func`` in
    `SCALES`) that make it ``scaled · factor`` or ``scaled / factor`` elementwise: both orders for
    a product, the numerator only for a quotient, the tensor written in place only for an
    in-place call; none for any other call (a ``rounding_mode``, a third argument).

    >>> h, m = torch.ones(2), torch.full((2,), 2.0)
    >>> [tuple(type(x).__name__ for x in p) for p in scale_pairs(Tensor.__mul__, (h, 0.5), {})]
    [('Tensor', 'float'), ('float', 'Tensor')]
    >>> len(scale_pairs(Tensor.__truediv__, (h, m), {})), len(scale_pairs(Tensor.mul_, (h, m), {}))
    (1, 1)
    >>> scale_pairs(torch.div, (h, m), {"rounding_mode": "floor"})
    ()
    """
    other = args[1:] if "other" not in kwargs else (kwargs["other"],)
    if not args or len(other) != 1 or set(kwargs) - {"other"}:
        return ()
    a, b = args[0], other[0]
    if func in _MUL_ANY and func not in _IN_PLACE:
        return ((a, b), (b, a))
    return ((a, b),)


def power_degree(label: str) -> int | None:
    """The degree ``p`` of a `power_label` step when it is a positive integer (``"Square"``: 2,
    ``"Pow(3)"``: 3), so that ``(c z)^p = c^p z^p`` for every ``c > 0``; None for any other
    label and for zero, negative or fractional exponents.

    >>> [power_degree(label) for label in ("Square", "Pow(3)", "Pow(0.5)", "Pow(-1)", "ReLU")]
    [2, 3, None, None, None]
    """
    if label == "Square":
        return 2
    if not (label.startswith("Pow(") and label.endswith(")")):
        return None
    p = float(label[4:-1])
    return int(p) if p.is_integer() and p >= 1 else None


CHANNELWISE: dict[object, str] = {
    **dict.fromkeys((_F.max_pool1d, _F.max_pool2d), "MaxPool"),
    **dict.fromkeys((_F.avg_pool1d, _F.avg_pool2d), "AvgPool"),
    **dict.fromkeys((_F.adaptive_max_pool1d, _F.adaptive_max_pool2d), "AdaptiveMaxPool"),
    **dict.fromkeys((_F.adaptive_avg_pool1d, _F.adaptive_avg_pool2d), "AdaptiveAvgPool"),
    **dict.fromkeys((torch.mean, Tensor.mean), "Mean"),
    **dict.fromkeys(
        (torch.flatten, Tensor.flatten, torch.reshape, Tensor.reshape, Tensor.view), "Flatten"
    ),
}
"""Functions that keep every channel (dimension 1 of a batched ``(N, C, …)`` tensor) apart and
only pool or drop the positions after it, positively homogeneous of degree 1 per channel:
pooling (the modules call these functions too), a mean over dimensions ≥ 2 only, and a flatten
that drops singleton trailing dimensions only (``(N, C, 1, 1) → (N, C)``; a ``reshape`` or
``view`` to ``(N, −1)`` counts as that flatten). They continue a chain
with their label when the output keeps ``(N, C)`` in front; a flatten of a whole feature map,
``(N, C, *S) → (N, C·P)`` with ``P = ΠS > 1``, continues it as ``"FlattenChannels"`` (channel
``c`` becomes the ``P`` features ``c·P … (c+1)·P − 1``); any other use breaks it."""
CHANNELWISE_LABELS = frozenset({*CHANNELWISE.values(), "FlattenChannels"})
SELECT_ROWS = "SelectRows"
"""The label of a row selection (`row_selection_label`, `reshape_label`)."""
_RESHAPES = frozenset((torch.flatten, Tensor.flatten, torch.reshape, Tensor.reshape, Tensor.view))


def reshape_label(func: object, args: tuple, out: object, channels_first: bool) -> str | None:
    """The label of a reshape, view or flatten ``func(*args) = out`` that keeps every unit where
    it was, else None (a changed dtype, ``view(dtype)``, reinterprets the bits: None).

    * ``"Identity"``: ``out`` has the input's shape (GPT-2's ``ln_f(h).view(output_shape)``);
      the same elements in the same order, whatever the source's layout.
    * ``"SelectRows"``: a source whose units are the last axis (``channels_first`` false), and
      ``out`` keeps the size ``d`` of that axis (``h.view(-1, d)``). In row-major order element
      ``(r, j)`` of the input's rows of ``d`` is element ``(r, j)`` of the output's, so every row
      is kept whole and only regrouped over the batch and positions (`row_selection_label`).

    >>> h = torch.zeros(2, 3, 4, dtype=torch.float64)
    >>> [reshape_label(Tensor.view, (h, s), h.view(s), False) for s in ((2, 3, 4), (-1, 4))]
    ['Identity', 'SelectRows']
    >>> [reshape_label(Tensor.view, (h, s), h.view(s), False) for s in ((2, 12), (6, 2, 2))]
    [None, None]
    >>> reshape_label(Tensor.view, (h, (-1, 4)), h.view(-1, 4), True) is None
    True
    >>> reshape_label(Tensor.view, (h, torch.int64), h.view(torch.int64), False) is None
    True
    """
    if func not in _RESHAPES or not args or not isinstance(args[0], Tensor):
        return None
    inp = args[0]
    if not isinstance(out, Tensor) or out.dtype != inp.dtype:
        return None
    if out.shape == inp.shape:
        return "Identity"
    if channels_first or inp.dim() == 0 or out.dim() == 0 or out.shape[-1] != inp.shape[-1]:
        return None
    return SELECT_ROWS


def _dims(arg: object, ndim: int) -> tuple[int, ...] | None:
    """``dim`` of a reduction as non-negative ints (``None``: all dimensions)."""
    if arg is None:
        return None
    dims = (arg,) if isinstance(arg, int) else tuple(arg)
    return tuple(d % ndim for d in dims)


def channels_first_ndim(mod: nn.Module) -> int | None:
    """For a source whose units are the channels, dimension 1 of its batched output: that
    output's number of dimensions (0: any number ≥ 3); None for a source whose units are the
    last dimension (Linear, LayerNorm, RMSNorm, Embedding)."""
    if isinstance(mod, nn.Conv1d | nn.Conv2d):
        return mod.weight.dim()  # (N, C, L) or (N, C, H, W)
    if isinstance(mod, nn.BatchNorm2d | nn.BatchNorm3d):
        return 4 if isinstance(mod, nn.BatchNorm2d) else 5
    if isinstance(mod, nn.InstanceNorm2d | nn.InstanceNorm3d):
        return 4 if isinstance(mod, nn.InstanceNorm2d) else 5
    if isinstance(mod, nn.modules.batchnorm._BatchNorm | nn.GroupNorm | nn.InstanceNorm1d):
        return 0
    return None


def channel_label(
    func: object, args: tuple, kwargs: dict, out: object, channels_first: bool
) -> str | None:
    """The label of the call ``func(*args, **kwargs) = out`` of `CHANNELWISE` if it kept every
    channel apart (see there), else None. ``channels_first``: whether the source whose output the
    input carries had its units on dimension 1 of a batched output (`channels_first_ndim`), or
    the input is a residual sum of such outputs (`graph`); if not, no pooling keeps them."""
    inp, label = args[0], CHANNELWISE[func]
    if not channels_first:
        return None
    if not isinstance(out, Tensor) or inp.dim() < 3 or out.dim() < 2:
        return None
    if label == "Flatten" and out.dim() == 2 and out.shape[0] == inp.shape[0]:
        if all(n == 1 for n in inp.shape[2:]):
            return label
        return "FlattenChannels" if out.shape[1] == inp[0].numel() else None
    if out.shape[:2] != inp.shape[:2]:
        return None
    if label == "Mean":
        dims = _dims(args[1] if len(args) > 1 else kwargs.get("dim"), inp.dim())
        return label if dims is not None and len(dims) > 0 and min(dims) >= 2 else None
    return label if out.dim() == inp.dim() and label != "Flatten" else None


ROW_SELECTIONS = frozenset((Tensor.__getitem__,))
"""Indexing calls that continue a chain when they only select rows (`row_selection_label`)."""


def _basic_index(index: object) -> tuple | None:
    """``index`` as a tuple when every entry is basic (an int, a slice, ``...`` or None), with
    at most one ``...``; None for anything else (a tensor, a list, a bool: advanced indexing)."""
    entries = index if isinstance(index, tuple) else (index,)
    for e in entries:
        if e is None or e is Ellipsis or isinstance(e, slice):
            continue
        if not isinstance(e, int) or isinstance(e, bool):
            return None
    return entries if sum(e is Ellipsis for e in entries) <= 1 else None


def row_selection_label(args: tuple, out: object, channels_first: bool) -> str | None:
    """``"SelectRows"`` when ``args[0][args[1]] = out`` (a call of `ROW_SELECTIONS`) is basic
    indexing that keeps the last axis whole and last, else None.

    The units of a source that is not channels-first (Linear, LayerNorm, RMSNorm, Embedding:
    ``channels_first`` false) lie on the last axis of its output. Ints, slices, ``...`` and None
    on the axes before it select, drop or add rows over the batch and positions; each kept row
    holds every unit ``j`` unchanged at index ``j``, so a map acting on the units alone (a
    per-unit scale, a kernel direction of a consumer's inputs) commutes with the selection.
    Indexing the last axis (anything but a slice covering it in order, ``h[..., :k]``,
    ``h[..., ::-1]``, ``h[..., 0]``), adding an axis after it (``h[..., None]``), advanced
    indexing and the channels-first layout (units on dimension 1) give None.

    >>> h = torch.zeros(2, 3, 4)
    >>> [row_selection_label((h, i), h[i], False) for i in ((slice(None), -1), (..., slice(0, 4)))]
    ['SelectRows', 'SelectRows']
    >>> [row_selection_label((h, i), h[i], False) for i in ((..., slice(2)), (..., None), [0])]
    [None, None, None]
    """
    if channels_first or len(args) < 2 or not isinstance(args[0], Tensor):
        return None
    inp, entries = args[0], _basic_index(args[1])
    if entries is None or inp.dim() == 0 or not isinstance(out, Tensor) or out.dim() == 0:
        return None
    consumed = sum(e is not None and e is not Ellipsis for e in entries)
    if Ellipsis not in entries:
        entries = (*entries, Ellipsis)  # the axes not named are kept whole, after the others
    rest = (slice(None),) * (inp.dim() - consumed)
    i = entries.index(Ellipsis)
    last = (*entries[:i], *rest, *entries[i + 1 :])[-1]
    d = inp.shape[-1]
    if not isinstance(last, slice) or range(*last.indices(d)) != range(d):
        return None
    return SELECT_ROWS if out.shape[-1] == d else None
