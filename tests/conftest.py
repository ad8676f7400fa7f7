"""Suite-wide test settings."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from neuromanifold.singular.reading import DirectionRecord


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    """Run every test on one intra-op thread (set before each test, so a test that changes the
    thread count, as the demo does, cannot leave it changed for the tests after it).

    The suite runs with ``pytest -n 2`` on two cores; letting every worker spawn one BLAS/OpenMP
    thread per core oversubscribes the machine and makes small float64 kernels several times slower.
    """
    torch.set_num_threads(1)


class HFSwiGLU(nn.Module):
    """SwiGLU ``down(SiLU(gate(x)) ⊙ up(x))`` with Hugging Face child names, no biases."""

    def __init__(self, d: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


@pytest.fixture
def dead_swiglu() -> Callable[..., HFSwiGLU]:
    """Builder ``(d, hidden, d_out, seed=…, dead=2)``: a float64 `HFSwiGLU` initialised after
    ``torch.manual_seed(seed)``, with hidden unit ``dead`` dead (gate and up rows, down column
    zero). The global generator then continues from the initialisation, as the tests expect."""

    def build(d: int, hidden: int, d_out: int, *, seed: int, dead: int = 2) -> HFSwiGLU:
        torch.manual_seed(seed)
        model = HFSwiGLU(d, hidden, d_out).double()
        with torch.no_grad():
            model.gate_proj.weight[dead] = 0.0
            model.up_proj.weight[dead] = 0.0
            model.down_proj.weight[:, dead] = 0.0
        return model

    return build


def _record(layers, detector, klass, k=None, r2=None, baseline=None) -> DirectionRecord:
    return DirectionRecord(
        layer=layers[0],
        layers=tuple(layers),
        detector=detector,
        k=k,
        k_hat=k,
        slope=None,
        r2=r2,
        magnitude=None,
        klass=klass,
        window=None,
        offset=0.0,
        gauge_overlap=None,
        ratio=None,
        baseline=baseline,
    )


@pytest.fixture
def record_of() -> Callable[..., DirectionRecord]:
    """Builder ``(layers, detector, klass, k=None, r2=None, baseline=None)`` of a hand-made
    `DirectionRecord` (``k̂ = k``, no sweep, no window) for report and demo-row tests."""
    return _record


@pytest.fixture
def candidate_kwargs() -> dict:
    """`read_candidate`'s options for one plain read: default grid, no snap, no gauges, no
    per-layer rates, no memory plan (a fresh dict per test)."""
    return {
        "grid": None,
        "snap": False,
        "gauges": [],
        "project_gauges": False,
        "per_layer": False,
        "chunk": None,
        "t_batch": 8,
        "plan": None,
    }


@pytest.fixture(scope="module")
def bench(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """The benchmark script at the test module's ``BENCH`` path, imported as a module named after
    the file; registered in ``sys.modules`` while that module's tests run (a script's dataclasses
    look their module up there)."""
    path = Path(request.module.BENCH)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(path.stem, None)
