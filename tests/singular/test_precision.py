"""Steps of a float64 forward below float64 are named in the reading (s27 trial HF D3: Hugging
Face's eager ViT attention takes its softmax in float32, and the reading said only that the
parameters were up-cast)."""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from typer.testing import CliRunner

from neuromanifold.cli import app
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.precision import (
    PRECISION_SAMPLES,
    Float64Steps,
    lower_precision_note,
    lower_precision_steps,
    promote_forward,
    promoted_note,
)
from neuromanifold.singular.read import GRAPH_SAMPLES, read

# F along a direction whose tangent cancels through a float32 step, relative to F's scale: the
# rounding (~6e-8)² leaves ~1e-17 there, float64 ~1e-32 (measured 1e-34 promoted)
FLOAT32_RESIDUE_MIN = 1e-24


class _Mixer(nn.Module):
    """A token mixer whose attention weights come from a softmax taken in ``dtype``."""

    def __init__(self, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.score = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)
        self.dtype = dtype

    def forward(self, x: Tensor) -> Tensor:
        s = self.score(x) @ x.transpose(-1, -2)
        w = torch.softmax(s, -1, dtype=self.dtype).to(x.dtype)
        return self.out((w @ x).mean(1))


def _x() -> Tensor:
    return torch.randn(12, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_a_float32_softmax_is_named_and_a_float64_forward_is_not() -> None:
    low = _Mixer(torch.float32).double()
    assert lower_precision_steps(low, _x()) == {"torch.softmax": "float32"}
    assert lower_precision_steps(_Mixer(None).double(), _x()) == {}
    kept = read(low, _x(), Gaussian(), max_directions=0, progress=False, promote=False)
    assert kept.meta["lower_precision_steps"] == {"torch.softmax": "float32"}
    assert kept.meta["promoted_steps"] == {}
    assert "torch.softmax → float32" in kept.note and "ran them in float64" not in kept.note
    clean = read(_Mixer(None).double(), _x(), Gaussian(), max_directions=0, progress=False)
    assert clean.meta["lower_precision_steps"] == clean.meta["promoted_steps"] == {}
    assert "below float64" not in clean.note


def test_the_read_runs_lower_precision_steps_in_float64_by_default() -> None:
    """The default read promotes the float32 softmax (its steps named in the note and in
    ``meta["promoted_steps"]``, none left below float64); the caller's model is not touched."""
    low = _Mixer(torch.float32).double()
    reading = read(low, _x(), Gaussian(), max_directions=0, progress=False)
    assert reading.meta["promoted_steps"] == {"torch.softmax": "float32"}
    assert reading.meta["lower_precision_steps"] == {}
    assert "torch.softmax → float32); the read ran them in float64" in reading.note
    assert "forward" not in vars(low) and lower_precision_steps(low, _x()) != {}
    with pytest.raises(TypeError, match="promote must be True or False"):
        read(low, _x(), Gaussian(), max_directions=0, progress=False, promote="yes")


def test_the_note_names_ten_steps_and_counts_the_rest() -> None:
    steps = {f"f{i}": "float16" for i in range(12)}
    note = lower_precision_note(steps)
    assert "f8 → float16, f9 → float16 and 2 more" in note and "f10" not in note
    assert lower_precision_note({}) == ""
    assert "f9 → float16 and 2 more); the read ran them in float64" in promoted_note(steps)
    assert promoted_note({}) == ""


def test_float64_steps_turns_lower_floating_dtypes_into_float64_and_nothing_else() -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    default = torch.get_default_dtype()
    with Float64Steps():
        assert torch.softmax(x, -1, dtype=torch.float32).dtype == torch.float64
        assert x.to(torch.float32).dtype == x.to(dtype=torch.float16).dtype == torch.float64
        assert x.float().dtype == x.half().dtype == x.bfloat16().dtype == torch.float64
        assert torch.ones(2).dtype == torch.tensor(0.5).dtype == torch.float64
        assert x.to(torch.int64).dtype == torch.int64 and x.long().dtype == torch.int64
        assert (x > 0).to(torch.bool).dtype == torch.bool
        torch.testing.assert_close(x.float(), x, rtol=0.0, atol=0.0)  # no rounding at all
    assert torch.get_default_dtype() == default
    with pytest.raises(RuntimeError, match="inside"), Float64Steps():
        raise RuntimeError("inside")
    assert torch.get_default_dtype() == default  # restored on an exception too


def test_a_promoted_forward_is_the_float64_function_and_survives_a_deep_copy() -> None:
    """The float32-softmax mixer, promoted, computes exactly what the float64 mixer with the same
    weights computes (the same operations in the same dtype); a deep copy of the promoted module
    runs its own weights, promoted."""
    low, ideal = _Mixer(torch.float32).double(), _Mixer(None).double()
    ideal.load_state_dict(low.state_dict())
    with torch.no_grad():
        rounded = low(_x())
        promote_forward(low)
        assert float((rounded - ideal(_x())).abs().max()) > 0.0  # float32 rounding before
        torch.testing.assert_close(low(_x()), ideal(_x()), rtol=0.0, atol=0.0)
        twin = copy.deepcopy(low)
        twin.out.bias.add_(1.0)
        torch.testing.assert_close(low(_x()), ideal(_x()), rtol=0.0, atol=0.0)
        assert lower_precision_steps(twin, _x()) == {}
        torch.testing.assert_close(twin(_x()), ideal(_x()) + 1.0, rtol=0.0, atol=1e-15)


class _KeyBiasAttention(nn.Module):
    """One head of softmax attention with a key bias, its softmax in float32 (as Hugging Face's
    eager ViT attention): the key bias is an exact gauge of the float64 function."""

    num_heads = 1

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(4, 4), nn.Linear(4, 4)
        self.v_proj, self.o_proj = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        s = self.q_proj(x) @ self.k_proj(x).transpose(-1, -2) / 2.0
        w = torch.softmax(s, -1, dtype=torch.float32).to(x.dtype)
        return self.o_proj(w @ self.v_proj(x)).mean(1)


def test_a_gauge_through_a_float32_softmax_is_found_only_when_promoted() -> None:
    """The key bias's flat gauge is certified by evaluation at 1e-10; through a float32 softmax
    the orbit's outputs differ at float32 rounding, so the kept-precision read proposes nothing
    there, and the default read certifies it and reads it flat."""
    torch.manual_seed(0)
    model = nn.Sequential(_KeyBiasAttention()).double()
    promoted = read(model, _x(), Gaussian(), progress=False)
    (rec,) = [r for r in promoted.directions if r.detector == "key-bias"]
    assert rec.klass == "flat_gauge" and rec.info["orbit_dim"] == 4
    kept = read(model, _x(), Gaussian(), progress=False, promote=False)
    assert not [r for r in kept.directions if r.detector == "key-bias"]


MIXER_FACTORY = "nm_float32_mixer"


def test_cli_keep_precision_reads_the_mixed_precision_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read`` promotes by default and says so; ``--keep-precision`` keeps the float32 step and
    names it (the two JSON metas)."""
    (tmp_path / f"{MIXER_FACTORY}.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "class Mixer(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.score, self.out = nn.Linear(4, 4), nn.Linear(4, 2)\n"
        "    def forward(self, x):\n"
        "        w = torch.softmax(self.score(x) @ x.transpose(-1, -2), -1, dtype=torch.float32)\n"
        "        return self.out((w.to(x.dtype) @ x).mean(1))\n"
        "def net():\n"
        "    torch.manual_seed(0)\n"
        "    return Mixer().double()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MIXER_FACTORY, raising=False)
    torch.save(_x(), tmp_path / "x.pt")
    metas = {}
    for flag in ([], ["--keep-precision"]):
        out = tmp_path / f"r{len(flag)}.json"
        args = ["read", "--model", f"{MIXER_FACTORY}:net", "--data", str(tmp_path / "x.pt")]
        res = CliRunner().invoke(app, [*args, *flag, "--max-directions", "0", "--json", str(out)])
        assert res.exit_code == 0, res.output
        metas[bool(flag)] = json.loads(out.read_text())["meta"]
    assert metas[False]["promoted_steps"] == {"torch.softmax": "float32"}
    assert metas[False]["lower_precision_steps"] == {}
    assert metas[True]["promoted_steps"] == {}
    assert metas[True]["lower_precision_steps"] == {"torch.softmax": "float32"}


class _TwoForwards(nn.Module):
    """A class forward ``b(a(x))`` the instance does not use: its own bound ``forward`` (as
    accelerate's hooks or a user's patch set) takes a float32 softmax of ``a(x)``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.b(self.a(x))


def _patched(self: nn.Module, x: Tensor) -> Tensor:
    return torch.softmax(self.a(x), -1, dtype=torch.float32).double()[:, :2]


def test_a_module_with_a_forward_of_its_own_is_read_as_called() -> None:
    """Promotion replaced the instance's forward by the class's, so the read analysed another
    function (s28b audit RERUN #1: two live directions of the model as called read flat). Now
    such a module is not promoted: its float32 step is named, the function read is its own."""
    torch.manual_seed(0)
    model = _TwoForwards().double()
    model.forward = types.MethodType(_patched, model)
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False)
    assert reading.meta["promoted_steps"] == {}
    assert reading.meta["lower_precision_steps"] == {"torch.softmax": "float32"}
    twin = copy.deepcopy(model)
    assert not promote_forward(twin)
    torch.testing.assert_close(twin(x), _patched(model, x), rtol=0.0, atol=0.0)


def test_read_direction_promotes_as_the_read_does() -> None:
    """The read called the key bias of a float32-softmax attention flat; ``read_direction`` on
    the same vector, without promotion, saw the float32 rounding (s28b audit RERUN #3: F ~1e-17
    of its scale, unresolved). Promoted by default, it agrees; the caller's model is not
    changed."""
    torch.manual_seed(0)
    model = nn.Sequential(_KeyBiasAttention()).double()
    vectors: dict[int, dict[str, Tensor]] = {}
    reading = read(model, _x(), Gaussian(), progress=False, on_vector=vectors.__setitem__)
    (i,) = [i for i, r in enumerate(reading.directions) if r.detector == "key-bias"]
    params = {k: v.detach() for k, v in model.named_parameters()}
    again = read_direction(model, params, vectors[i], _x(), Gaussian())
    assert again.klass.value == reading.directions[i].klass == "flat_gauge"
    assert "forward" not in vars(model) and "forward" not in vars(model[0])
    kept = read_direction(model, params, vectors[i], _x(), Gaussian(), promote=False)
    assert max(kept.sweep.F) > FLOAT32_RESIDUE_MIN * kept.sweep.scale
    assert max(again.sweep.F) < FLOAT32_RESIDUE_MIN * again.sweep.scale
    with pytest.raises(TypeError, match="promote must be True or False"):
        read_direction(model, params, vectors[i], _x(), Gaussian(), promote=1)


class _LateFloat32(_KeyBiasAttention):
    """Its softmax is taken in float32 only for a batch holding a sample whose first entry is
    above 2 (here sample 10 alone): a step the first 8 samples do not take."""

    def forward(self, x: Tensor) -> Tensor:
        s = self.q_proj(x) @ self.k_proj(x).transpose(-1, -2) / 2.0
        low = bool((x[:, 0, 0] > 2.0).any())
        w = torch.softmax(s, -1, dtype=torch.float32 if low else None).to(x.dtype)
        return self.o_proj(w @ self.v_proj(x)).mean(1)


def test_read_direction_looks_for_lower_steps_on_the_samples_the_read_does() -> None:
    """``read_direction`` looked at 8 samples, the read at 16: a float32 step only sample 10
    takes was promoted by the read and not by ``read_direction`` (s28c audit RERUN: flat against
    live). Both look at ``PRECISION_SAMPLES`` now."""
    assert PRECISION_SAMPLES == GRAPH_SAMPLES
    x = _x()
    x[:, 0, 0] = x[:, 0, 0].clamp(max=1.0)
    x[10, 0, 0] = 2.5
    torch.manual_seed(0)
    model = nn.Sequential(_LateFloat32()).double()
    assert lower_precision_steps(model, x[:8]) == {}
    assert lower_precision_steps(model, x[:PRECISION_SAMPLES]) != {}
    vectors: dict[int, dict[str, Tensor]] = {}
    reading = read(model, x, Gaussian(), progress=False, on_vector=vectors.__setitem__)
    (i,) = [i for i, r in enumerate(reading.directions) if r.detector == "key-bias"]
    params = {k: v.detach() for k, v in model.named_parameters()}
    again = read_direction(model, params, vectors[i], x, Gaussian())
    assert again.klass.value == reading.directions[i].klass == "flat_gauge"


# relative agreement of one sweep computed twice in the same precision (same passes, same sums)
SAME_SWEEP_RTOL = 1e-12


def test_a_kept_precision_read_sweeps_the_mixed_precision_program() -> None:
    """``read(promote=False)`` kept the float32 softmax for its detection but its sweeps ran
    promoted: `read_direction` promotes by default, and the read called it so (s29). Every
    record's ``F`` is now that of the unpromoted forward along the direction it swept, and the
    promoted forward's differs from it there at float32 rounding."""
    torch.manual_seed(0)
    model = nn.Sequential(_KeyBiasAttention()).double()
    vectors: dict[int, dict[str, Tensor]] = {}
    kept = read(
        model, _x(), Gaussian(), progress=False, promote=False, on_vector=vectors.__setitem__
    )
    params = {k: v.detach() for k, v in model.named_parameters()}
    worst_kept, worst_promoted = 0.0, 0.0
    for i, rec in enumerate(kept.directions):
        shift = rec.sweep["base_shift"]
        base = {k: p + shift * vectors[i][k] if k in vectors[i] else p for k, p in params.items()}
        f_read = torch.tensor(rec.sweep["F"], dtype=torch.float64)
        for promote in (False, True):
            again = read_direction(model, base, vectors[i], _x(), Gaussian(), promote=promote)
            f_again = torch.tensor(again.sweep.F, dtype=torch.float64)
            gap = float((f_again - f_read).abs().max() / f_read.abs().max())
            if promote:
                worst_promoted = max(worst_promoted, gap)
            else:
                worst_kept = max(worst_kept, gap)
    assert len(kept.directions) >= 3
    assert worst_kept <= SAME_SWEEP_RTOL
    assert worst_promoted > 1e3 * SAME_SWEEP_RTOL
