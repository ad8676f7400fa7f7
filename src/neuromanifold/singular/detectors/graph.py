"""Which module feeds which: the data-flow edges the detectors need, from one hooked forward.

An edge ``p → c`` is recorded when module ``c`` receives as its first input a tensor produced by
module ``p`` either directly or through a chain of elementwise modules (activations, dropout,
identity; classes named in ``ELEMENTWISE_NAMES``; any module with a truthy ``elementwise``
attribute). Sources are Linear and convolution modules, normalisation layers (torch's LayerNorm,
RMSNorm, BatchNorm, GroupNorm and InstanceNorm, and RMSNorms defined elsewhere:
`is_named_rmsnorm`) and
embeddings; consumers are those, ``nn.MultiheadAttention`` (its query input) and layer-scale
modules (`layer_scale_param`). Elementwise functions called inside a ``forward`` (``F.relu``,
``torch.tanh``, …: `FUNCTIONAL_ELEMENTWISE`) continue the chain like the equal modules, and so does
a tensor raised to a real scalar power (``h ** 2``, ``torch.pow(h, 3)``, ``h.square()``, ``h * h``
of one and the same tensor: `POWERS`, labelled ``"Square"`` or ``"Pow(p)"``), so a squared ReLU
written inline, or in a module of any name that computes it with those functions, reads as the
steps ``("ReLU", "Square")``. So do pooling, a spatial mean and a flatten of ``(N, C, 1, 1)``
after a source whose units are channels (convolution, BatchNorm, GroupNorm: `CHANNELWISE`, every
channel kept apart, so unit ``c`` of the producer is still channel ``c`` of the consumer's input;
a flatten of a whole feature map makes channel ``c`` a block of features; after a channel-wise
residual sum: **Skip edges** below), and a reshape, view or flatten to the same shape (GPT-2's
``ln_f(h).view(output_shape)``, labelled ``"Identity"``). So
does a row selection after a source whose units are the last axis: basic indexing that keeps that
axis whole and last (``h[:, s, :]``, ``h[:, -1]``, ``h[..., 1:, :]``: `ROW_SELECTIONS`), as in
Hugging Face's ``lm_head(hidden_states[:, slice_indices, :])``, and a reshape that keeps that
axis (``h.view(-1, d)``: `reshape_label`), both labelled ``"SelectRows"``. Each kept row holds
every unit where it was, so the steps that act on the units pass through it (it is in
`PASS_THROUGH`), while indexing the last axis (``h[..., :k]``), a reshape that splits it, or
advanced indexing breaks the chain. A product with a constant factor (``h * 0.5``,
``h * self.mask``, ``h / self.tau``: a number, or a buffer or free parameter of the model that
carries no source's provenance, broadcast into ``h``'s shape; `SCALES`) continues it as
``"Scale"``, linear in each unit and outside `PASS_THROUGH`. Any other function (a product of two
different tensors (a gate), a transpose, another reshape, a residual addition, an in-place
operation on the tensor) breaks it, so no edge is drawn across it (the duality join and the
LayerNorm lift are then not attempted, which is conservative). The functions that stopped a
source's output this way are recorded in ``ModelGraph.stops``, with the steps passed before each
in ``ModelGraph.cuts`` (calls made inside a sink's own ``forward``, where the sink computes on its
input, are not stops), so that a read can say where a chain was cut. A module that is
elementwise but computes through anything else (``torch.where``, ``clamp``, a custom kernel)
continues the chain when it has a truthy ``elementwise`` attribute; its step is then labelled
with its class name.

**Skip edges** are recorded separately: ``skips[p]`` lists the sinks whose first input is a sum in
which the output of source ``p`` itself is one summand — ``c(z + f(z))`` with ``z = p(·)``, through
any number of such additions (a residual stream), the direct producer excepted. A torch-function
mode sees the additions (``+``, ``+=``, ``torch.add`` with ``alpha = 1``); anything else applied to
the sum (a scale, an activation, a normalisation) ends the provenance, except pooling that keeps
channels after a **channel-wise** sum: one whose every term is channel-wise with the sum's number
of dimensions and channels (the output of a convolution, BatchNorm or GroupNorm, through steps the
graph follows, such as a ReLU of one, or an earlier channel-wise sum). As after a convolution
(`CHANNELWISE`), pooling, a spatial mean, a flatten of ``(N, C, 1, 1)`` and a reshape to the same
shape keep every channel in place there, so the summands reach a ResNet's head ``fc(h.mean((2,
3)))`` as skip edges. A flatten of a whole summed feature map is not followed (a skip edge
records no steps, so channel ``c``'s block of features could not be told), nor a sum with any
other term (a Linear output, whose units lie on the last axis; a constant). Skip edges let the
linear detector follow a dead path through residual blocks (spec §6.6: skips cost nothing on the
shortest weighted path).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode, resolve_name

from neuromanifold.singular.detectors.graph_steps import (
    CHANNELWISE,
    CHANNELWISE_LABELS,
    FUNCTIONAL_ELEMENTWISE,
    POWERS,
    ROW_SELECTIONS,
    SCALE,
    SCALES,
    SELECT_ROWS,
    channel_label,
    channels_first_ndim,
    metadata_only_args,
    power_label,
    reshape_label,
    row_selection_label,
    scale_pairs,
)

__all__ = [
    "CHANNELWISE",
    "CHANNELWISE_LABELS",
    "ELEMENTWISE",
    "ELEMENTWISE_NAMES",
    "FUNCTIONAL_ELEMENTWISE",
    "PASS_THROUGH",
    "POWERS",
    "ROW_SELECTIONS",
    "ModelGraph",
    "graph_passes_through",
    "graph_scales_through",
    "is_named_rmsnorm",
    "layer_scale_param",
    "trace_graph",
]

ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.ReLU,
    nn.GELU,
    nn.Tanh,
    nn.SiLU,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.PReLU,
    nn.ELU,
    nn.Softplus,
    nn.Identity,
    nn.Dropout,
    nn.Mish,
    nn.Hardtanh,
    nn.ReLU6,
    nn.Hardswish,
    nn.Hardsigmoid,
)
_SOURCES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.Embedding,
)
_SINKS: tuple[type[nn.Module], ...] = (*_SOURCES, nn.MultiheadAttention)


ELEMENTWISE_NAMES: tuple[str, ...] = (
    "SquaredReLU",
    # Hugging Face transformers' activation modules (transformers.activations)
    "GELUActivation",
    "NewGELUActivation",
    "FastGELUActivation",
    "QuickGELUActivation",
    "AccurateGELUActivation",
    "ClippedGELUActivation",
    "SiLUActivation",
    "MishActivation",
    "LinearActivation",
    "ReLUSquaredActivation",
    "LaplaceActivation",
    "PytorchGELUTanh",
    "GELUTanh",
)
"""Class names of elementwise modules defined outside torch (the cells' squared ReLU, Hugging
Face's activation modules), matched by name so that no import is needed."""


def is_named_rmsnorm(mod: nn.Module) -> bool:
    """An RMSNorm defined outside torch (Hugging Face's ``LlamaRMSNorm``, ``Qwen2RMSNorm``, …):
    a class whose name ends in ``RMSNorm`` with a one-dimensional ``weight`` parameter. Matched by
    name so that no import is needed; what it computes is not assumed (detectors that rely on a
    symmetry certify it by evaluation)."""
    w = getattr(mod, "weight", None)
    return (
        type(mod).__name__.endswith("RMSNorm")
        and not isinstance(mod, nn.RMSNorm)
        and isinstance(w, nn.Parameter)
        and w.dim() == 1
    )


def layer_scale_param(mod: nn.Module) -> str | None:
    """The scale's name in a layer-scale module defined outside torch (timm's ``LayerScale`` and
    ``LayerScale2d``: ``gamma``; Hugging Face's ``Dinov2LayerScale``: ``lambda1``): a class whose
    name ends in ``LayerScale`` or ``LayerScale2d`` holding exactly one parameter, one-dimensional;
    None otherwise. Matched by name; what it computes is certified by the detector that uses it.

    >>> class LayerScale(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.gamma = nn.Parameter(torch.ones(4))
    >>> layer_scale_param(LayerScale()), layer_scale_param(nn.Linear(2, 2))
    ('gamma', None)
    """
    if not type(mod).__name__.endswith(("LayerScale", "LayerScale2d")):
        return None
    params = list(mod.named_parameters())
    if len(params) != 1 or params[0][1].dim() != 1:
        return None
    return params[0][0]


def _is_source(mod: nn.Module) -> bool:
    return isinstance(mod, _SOURCES) or is_named_rmsnorm(mod)


def _is_sink(mod: nn.Module) -> bool:
    return isinstance(mod, _SINKS) or is_named_rmsnorm(mod) or layer_scale_param(mod) is not None


def _is_elementwise(mod: nn.Module) -> bool:
    return (
        isinstance(mod, ELEMENTWISE)
        or type(mod).__name__ in ELEMENTWISE_NAMES
        or bool(getattr(mod, "elementwise", False))
    )


@dataclass(frozen=True)
class ModelGraph:
    """Data-flow edges between source modules.

    ``consumers[p]`` / ``producers[c]``: tuples of module names; ``via[(p, c)]``: the elementwise
    modules in between (their class names); ``output``: the source module whose output is the
    model output, directly or through `PASS_THROUGH` steps only (Identity, Dropout, a row
    selection such as the last position's logits; ``None`` otherwise, e.g. after an activation,
    a reshape or a mean);
    ``called``: names of modules called during the traced forward; ``skips[p]``: the sinks that
    receive ``p``'s output as one summand of a residual sum (module docstring); ``stops[p]``: the
    functions the graph does not follow (``torch.overrides.resolve_name`` names, such as
    ``"torch.Tensor.transpose"``, each once, in call order) that received a tensor still carrying
    ``p``'s provenance and returned a tensor, outside any sink's own ``forward``: where a chain from
    ``p`` was cut. ``outside[name]``: for a parameter of a sink (by its first name), the functions
    that received it while its module was not running and returned a tensor (``F.linear(h,
    self.enc.weight.t())`` in the model's own forward: a tied decoder), in call order;
    ``cuts[p]``: each stop of ``p`` with the steps its output had passed there (``("torch.Tensor.
    transpose", ("ReLU",))``: a ReLU of ``p`` transposed), in call order; ``used``:
    the parameters (first names) that reached any function of the traced forward.
    """

    consumers: dict[str, tuple[str, ...]]
    producers: dict[str, tuple[str, ...]]
    via: dict[tuple[str, str], tuple[str, ...]]
    output: str | None
    called: frozenset[str]
    skips: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stops: dict[str, tuple[str, ...]] = field(default_factory=dict)
    outside: dict[str, tuple[str, ...]] = field(default_factory=dict)
    used: frozenset[str] = frozenset()
    cuts: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = field(default_factory=dict)

    def single_consumer(self, name: str) -> str | None:
        """The only consumer of ``name``, or ``None`` (none or several)."""
        c = self.consumers.get(name, ())
        return c[0] if len(c) == 1 else None

    def single_producer(self, name: str) -> str | None:
        """The only producer of ``name``, or ``None``."""
        p = self.producers.get(name, ())
        return p[0] if len(p) == 1 else None


PASS_THROUGH = frozenset({"Identity", "Dropout", SELECT_ROWS})
"""``via`` labels that leave every unit of a tensor as it is (evaluation mode): Identity, Dropout,
and a row selection (`graph_steps.row_selection_label`), which keeps some rows over the batch
and positions and, in each, every unit unchanged at its index."""


def graph_passes_through(graph: ModelGraph, producer: str, consumer: str) -> bool:
    """Whether the edge ``producer → consumer`` carries the producer's output unchanged, up to a
    row selection (through `PASS_THROUGH` steps only): what detectors need whose identity acts
    on the units and would not survive an activation or a pooling in between (the LayerNorm
    kernel, the norm scale, the layer scale)."""
    return set(graph.via.get((producer, consumer), ("missing",))) <= PASS_THROUGH


def graph_scales_through(graph: ModelGraph, producer: str, consumer: str) -> bool:
    """Whether the edge ``producer → consumer`` carries the producer's output unchanged up to a
    row selection and constant elementwise factors (`PASS_THROUGH` and ``"Scale"`` steps only):
    enough for a per-unit rescaling of the producer against the consumer's columns (the norm
    scale), not for identities that need the values themselves (the LayerNorm kernel)."""
    return set(graph.via.get((producer, consumer), ("missing",))) <= PASS_THROUGH | {SCALE}


_ADDS = (torch.add, Tensor.add, Tensor.__add__, Tensor.__radd__, Tensor.__iadd__, Tensor.add_)


def _version_of(t: Tensor) -> int:
    """The tensor's version counter (bumped by every in-place write); -1 where there is none."""
    try:
        return int(t._version)
    except (RuntimeError, AttributeError):  # inference tensors keep no counter
        return -1


class _Provenance:
    """What the traced forward knows of each live tensor (by id): the source whose output it is,
    the steps since, and whether that source's units are channels (``origin``); or the sources
    whose raw outputs were summed into it (``summands``) and whether that sum is channel-wise
    (``channel_sum``, module docstring). Each entry is stamped with the tensor's
    version counter and void once the tensor is written in place by anything else (``h[:, 0] =
    0``, ``h.tanh_()``, a write through a view, ``out=h``). An entry is dropped when its tensor
    is freed (a ``weakref.finalize``), so that a later tensor given the same id inherits nothing
    and the trace keeps no activation alive: the traced forward's memory is that of the plain
    forward (holding every tagged tensor, a one-layer GPT-2 with 128-token sequences traced on
    16 samples kept 29 MB alive)."""

    def __init__(self) -> None:
        self.origin: dict[int, tuple[str, tuple[str, ...], bool]] = {}
        self.summands: dict[int, frozenset[str]] = {}
        self.channel_sum: dict[int, bool] = {}  # per sum: whether every summand is channel-wise
        self.stamp: dict[int, int] = {}
        self._watched: set[int] = set()  # ids whose entries are dropped when freed
        self.stops: dict[str, list[str]] = {}
        self.cuts: dict[str, list[tuple[str, tuple[str, ...]]]] = {}  # with the steps passed
        self.in_sink = 0  # depth of sink forwards running: their own calls are no stops

    def stop(self, func: object, args: tuple, kwargs: dict, out: object) -> None:
        """Record ``func`` as a stop for each source whose provenance a tensor argument of the
        call still carries, when ``func`` returned a tensor outside any sink's ``forward``; an
        argument the call reads only for its shape, dtype or device (``m.type_as(h)``,
        `metadata_only_args`) is no reader of the source (s30 trial SCALE F4: it made the linear
        detector see a second reader of ``h``)."""
        if self.in_sink or not isinstance(out, Tensor):
            return
        name = resolve_name(func) or getattr(func, "__qualname__", repr(func))
        read = metadata_only_args(func, args)  # ``m.type_as(h)`` reads no value of h
        for a in (*read, *(kwargs.values() if read is args else ())):
            origin = self.origin_of(a)
            if origin is None:
                continue
            if name not in self.stops.setdefault(origin[0], []):
                self.stops[origin[0]].append(name)
            if (name, origin[1]) not in self.cuts.setdefault(origin[0], []):
                self.cuts[origin[0]].append((name, origin[1]))

    def _current(self, t: object) -> bool:
        return isinstance(t, Tensor) and self.stamp.get(id(t)) == _version_of(t)

    def origin_of(self, t: object) -> tuple[str, tuple[str, ...], bool] | None:
        return self.origin.get(id(t)) if self._current(t) else None

    def summands_of(self, t: object) -> frozenset[str]:
        return self.summands.get(id(t), frozenset()) if self._current(t) else frozenset()

    def channel_layout(self, t: object) -> tuple[int, int] | None:
        """``(t.dim(), t.shape[1])`` when ``t`` is channel-wise: the output of a source whose units
        are channels (dimension 1) through steps the graph follows (a ReLU of a convolution, a
        pooled BatchNorm output), or a channel-wise sum (`sum_of`); None otherwise."""
        if not isinstance(t, Tensor) or t.dim() < 2:
            return None
        origin = self.origin_of(t)
        if origin is not None and origin[2]:
            return t.dim(), t.shape[1]
        if self._current(t) and self.channel_sum.get(id(t), False):
            return t.dim(), t.shape[1]
        return None

    def channel_summands(self, t: object) -> frozenset[str]:
        """The summands of ``t`` when it is a channel-wise sum (`sum_of`), else none."""
        return self.summands_of(t) if self.channel_sum.get(id(t), False) else frozenset()

    def _watch(self, t: Tensor) -> None:
        """Drop ``t``'s entries when it is freed (before its id can be given to another)."""
        key = id(t)
        if key not in self._watched:
            self._watched.add(key)
            weakref.finalize(t, self._forget, key)

    def _forget(self, key: int) -> None:
        for table in (self.origin, self.summands, self.channel_sum, self.stamp):
            table.pop(key, None)
        self._watched.discard(key)

    def tag(self, t: Tensor, src: str, via: tuple[str, ...], channels: bool) -> None:
        self.origin[id(t)] = (src, via, channels)
        self.summands.pop(id(t), None)
        self.channel_sum.pop(id(t), None)
        self.stamp[id(t)] = _version_of(t)
        self._watch(t)

    def sum_of(self, t: Tensor, srcs: frozenset[str], channels: bool = False) -> None:
        """Record ``t`` as a sum with the raw summands ``srcs``; ``channels``: whether it is
        channel-wise (every term channel-wise with ``t``'s number of dimensions and channels),
        so that pooling that keeps channels may follow it (`_Calls._step`)."""
        self.origin.pop(id(t), None)
        self.summands[id(t)] = srcs
        self.channel_sum[id(t)] = channels
        self.stamp[id(t)] = _version_of(t)
        self._watch(t)

    def raw_sources(self, t: object) -> frozenset[str]:
        """Sources whose raw output ``t`` is, or is a sum of."""
        direct = self.origin_of(t)
        own = frozenset([direct[0]]) if direct is not None and not direct[1] else frozenset()
        return own | self.summands_of(t)


class _ParamUses:
    """Which parameters the traced forward passes to functions, and which sink parameters it
    passes while none of the modules holding them is running (`ModelGraph.outside`; a tied
    parameter has several, ``lm_head.weight = wte.weight``). Parameters are known by identity
    and named by their first name, as in ``model.named_parameters()``."""

    def __init__(self, model: nn.Module) -> None:
        sinks = {name for name, mod in model.named_modules() if _is_sink(mod)}
        self.first: dict[int, str] = {}
        self.holders: dict[int, set[str]] = {}  # id → the sink modules holding it
        for name, p in model.named_parameters(remove_duplicate=False):
            self.first.setdefault(id(p), name)
            module = name.rpartition(".")[0]
            if module in sinks:
                self.holders.setdefault(id(p), set()).add(module)
        self.running: dict[str, int] = {}
        self.used: set[str] = set()
        self.outside: dict[str, list[str]] = {}

    def enter(self, name: str) -> None:
        self.running[name] = self.running.get(name, 0) + 1

    def leave(self, name: str) -> None:
        self.running[name] -= 1

    def seen(self, func: object, args: tuple, kwargs: dict, out: object) -> None:
        """Record the parameters among the call's arguments (and in lists of them)."""
        for a in (*args, *kwargs.values()):
            for t in a if isinstance(a, list | tuple) else (a,):
                name = self.first.get(id(t)) if isinstance(t, Tensor) else None
                if name is None:
                    continue
                self.used.add(name)
                holders = self.holders.get(id(t), ())
                if holders and isinstance(out, Tensor) and not any(map(self.running.get, holders)):
                    fname = resolve_name(func) or getattr(func, "__qualname__", repr(func))
                    if fname not in self.outside.setdefault(name, []):
                        self.outside[name].append(fname)


class _Calls(TorchFunctionMode):
    """Sees the calls a ``forward`` makes: carries provenance through the functions of
    `FUNCTIONAL_ELEMENTWISE`, `CHANNELWISE`, `POWERS` (scalar powers only: `power_label`) and
    `ROW_SELECTIONS` (row selections only: `row_selection_label`), records the summands of
    additions, and carries those of a channel-wise sum through channel-keeping pooling
    (`_pool_sum`)."""

    def __init__(
        self,
        prov: _Provenance,
        uses: _ParamUses | None = None,
        constants: Mapping[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.prov = prov
        self.uses = uses
        # storage → version counter before the forward: where a "Scale" factor may live
        self.constants = dict(constants or {})  # (`_constant_storages`)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = self._follow(func, args, kwargs)
        if self.uses is not None:
            self.uses.seen(func, args, kwargs, out)
        return out

    def _follow(self, func, args: tuple, kwargs: dict) -> object:
        label = FUNCTIONAL_ELEMENTWISE.get(func)
        if label is None and func in POWERS:
            label = power_label(func, args, kwargs)
        if label is not None or func in CHANNELWISE or func in ROW_SELECTIONS:
            return self._step(func, label, args, kwargs)
        if func in SCALES:
            for scaled, factor in scale_pairs(func, args, kwargs):
                src = self.prov.origin_of(scaled)
                if src is not None and self._constant(factor):
                    return self._scale(func, args, kwargs, scaled, src)
        if func not in _ADDS or len(args) != 2 or kwargs.get("alpha", 1) != 1:
            out = func(*args, **kwargs)
            self.prov.stop(func, args, kwargs, out)
            return out
        srcs = self.prov.raw_sources(args[0]) | self.prov.raw_sources(args[1])
        layouts = [self.prov.channel_layout(a) for a in args]  # read before ``+=`` writes
        out = func(*args, **kwargs)
        if isinstance(out, Tensor):
            if srcs:
                channels = out.dim() >= 2 and all(
                    lay == (out.dim(), out.shape[1]) for lay in layouts
                )
                self.prov.sum_of(out, srcs, channels)
            else:  # ``z += f(z)`` with no source in it: z is no longer anything it was
                self.prov.origin.pop(id(out), None)
        return out

    def _step(self, func, label: str | None, args: tuple, kwargs: dict) -> object:
        src = self.prov.origin_of(args[0]) if args else None
        sums = self.prov.channel_summands(args[0]) if args and func in CHANNELWISE else None
        out = func(*args, **kwargs)
        if src is None and sums and isinstance(out, Tensor):
            self._pool_sum(func, args, kwargs, out, sums)
        if src is None or not isinstance(out, Tensor):
            return out
        if func in ROW_SELECTIONS:
            label = row_selection_label(args, out, src[2])
        elif label is None:  # a reshape that keeps every unit, or channelwise
            label = reshape_label(func, args, out, src[2]) or channel_label(
                func, args, kwargs, out, src[2]
            )
        elif out.shape != args[0].shape:
            label = None
        if label is not None:
            self.prov.tag(out, src[0], (*src[1], label), src[2])
        else:
            self.prov.stop(func, args, kwargs, out)
        return out

    def _constant(self, factor: object) -> bool:
        """Whether ``factor`` may scale a chain (`SCALES`): a real number, or a real tensor stored
        in one of the model's buffers or free parameters (`_constant_storages`, views included)
        that carries no source's provenance and that the forward has not written so far (its
        version counter is the one it had before: a running statistic filled from the units in
        the same forward, ``torch.maximum(m, h.amax(0), out=m)``, scales with them; s30 trial
        SCALE F3). A factor computed from the input or from a source (a gate
        ``x * sigmoid(fc(x))``) is not one: the chain stops there, as before."""
        if isinstance(factor, bool | int | float):
            return True
        if not isinstance(factor, Tensor) or factor.is_complex():
            return False
        if self.prov.origin_of(factor) is not None or self.prov.summands_of(factor):
            return False
        version = self.constants.get(_storage(factor))
        return version is not None and _version_of(factor) == version

    def _scale(
        self,
        func,
        args: tuple,
        kwargs: dict,
        scaled: Tensor,
        src: tuple[str, tuple[str, ...], bool],
    ) -> object:
        """``scaled · factor`` (or ``scaled / factor``) continues ``scaled``'s chain as ``"Scale"``
        when the result has ``scaled``'s shape (the factor broadcasts into it); else a stop."""
        out = func(*args, **kwargs)
        if isinstance(out, Tensor) and out.shape == scaled.shape and out.dtype == scaled.dtype:
            self.prov.tag(out, src[0], (*src[1], SCALE), src[2])
        else:
            self.prov.stop(func, args, kwargs, out)
        return out

    def _pool_sum(
        self, func: object, args: tuple, kwargs: dict, out: Tensor, sums: frozenset[str]
    ) -> None:
        """Carry the summands of a channel-wise sum ``args[0]`` to ``out = func(*args)`` (``func``
        in `CHANNELWISE`) when the call keeps every channel in place: a reshape to the same
        shape, pooling, a spatial mean, a flatten of ``(N, C, 1, 1)``. Not a flatten of a whole
        feature map (``"FlattenChannels"``): a skip edge carries no steps, so the consumer could
        not tell channel ``c``'s block of features."""
        label = reshape_label(func, args, out, True) or channel_label(func, args, kwargs, out, True)
        if label is not None and label != "FlattenChannels":
            self.prov.sum_of(out, sums, True)


def _storage(t: Tensor) -> int:
    """The address of ``t``'s storage (0 where it has none), shared by its views."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def _constant_storages(model: nn.Module) -> dict[int, int]:
    """The storages of the model's buffers and of its parameters that no source or sink module
    holds (a hand-written ``self.alpha``), each with its tensor's version counter now: the
    factors a `"Scale"` step may multiply by, while unwritten. A sink's parameter used as a
    factor is a use outside its module (`ModelGraph.outside`), not a scale."""
    held = {
        id(p)
        for _, mod in model.named_modules()
        if _is_source(mod) or _is_sink(mod)
        for p in mod.parameters(recurse=False)
    }
    tensors = [*model.buffers(), *(p for p in model.parameters() if id(p) not in held)]
    return {_storage(t): _version_of(t) for t in tensors if _storage(t) != 0}


def _channels_first(mod: nn.Module, out: Tensor) -> bool:
    """Whether ``out``, the output of source ``mod``, is batched with the units on dimension 1."""
    ndim = channels_first_ndim(mod)
    return ndim is not None and (out.dim() == ndim if ndim else out.dim() >= 3)


def trace_graph(model: nn.Module, x: Tensor) -> ModelGraph:
    """Run ``model(x)`` once with hooks and return the `ModelGraph` (see the module docstring)."""
    prov = _Provenance()
    uses = _ParamUses(model)
    uses.enter("")  # the root's own forward runs throughout (it has no hooks here)
    edges: dict[tuple[str, str], tuple[str, ...]] = {}
    skip_edges: dict[str, list[str]] = {}
    called: set[str] = set()
    handles = []
    entry: dict[str, list] = {}  # per elementwise module: its input's origin at each call

    def pre(name: str, mod: nn.Module):
        def fn(_m: nn.Module, inputs: tuple) -> None:
            called.add(name)
            uses.enter(name)
            if _is_sink(mod):
                prov.in_sink += 1
            if not inputs or not isinstance(inputs[0], Tensor):
                return
            src = prov.origin_of(inputs[0])
            if _is_elementwise(mod):  # read before an in-place call changes its input
                entry.setdefault(name, []).append(src)
            if src is not None and _is_sink(mod):
                edges[(src[0], name)] = src[1]
            if _is_sink(mod):
                for p in sorted(prov.summands_of(inputs[0])):
                    if p != name and name not in skip_edges.setdefault(p, []):
                        skip_edges[p].append(name)

        return fn

    def post(name: str, mod: nn.Module):
        def fn(_m: nn.Module, inputs: tuple, out: object) -> None:
            uses.leave(name)
            if _is_sink(mod):
                prov.in_sink -= 1
            if not isinstance(out, Tensor):
                return
            if _is_source(mod):
                prov.tag(out, name, (), _channels_first(mod, out))
            elif _is_elementwise(mod) and inputs and isinstance(inputs[0], Tensor):
                src = entry[name].pop()
                if src is not None:
                    prov.tag(out, src[0], (*src[1], type(mod).__name__), src[2])

        return fn

    for name, mod in model.named_modules():
        if not name:
            continue
        handles.append(mod.register_forward_pre_hook(pre(name, mod)))
        handles.append(mod.register_forward_hook(post(name, mod)))
    try:
        with torch.no_grad(), _Calls(prov, uses, _constant_storages(model)):
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    output = None
    final = prov.origin_of(out)
    if final is not None and set(final[1]) <= PASS_THROUGH:  # the source's units, not φ of them
        output = final[0]
    consumers: dict[str, list[str]] = {}
    producers: dict[str, list[str]] = {}
    for p, c in edges:
        consumers.setdefault(p, []).append(c)
        producers.setdefault(c, []).append(p)
    return ModelGraph(
        consumers={k: tuple(v) for k, v in consumers.items()},
        producers={k: tuple(v) for k, v in producers.items()},
        via=dict(edges),
        output=output,
        called=frozenset(called),
        skips={k: tuple(v) for k, v in skip_edges.items()},
        stops={k: tuple(v) for k, v in prov.stops.items()},
        outside={k: tuple(v) for k, v in uses.outside.items()},
        used=frozenset(uses.used),
        cuts={k: tuple(v) for k, v in prov.cuts.items()},
    )
