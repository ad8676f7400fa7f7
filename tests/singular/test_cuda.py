"""``--device cuda`` end to end: a read on the GPU gives the CPU's Reading (issue 8).

Every test here needs a CUDA device and is skipped without one (CI has none); they are the
GPU check run on a lent machine (`benchmarks/cuda_check.sh`). The read runs in float64 on either
device, so the two readings differ only where the kernels sum in another order: they must agree
by `neuromanifold.singular.agreement.reading_differences` (identical decisions; directional
Fishers equal up to its rounding tolerance).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from neuromanifold.cells.planted import (
    PlantedNet,
    planted_conv,
    planted_deep_linear,
    planted_embedding,
    planted_mlp,
    planted_transformer,
)
from neuromanifold.singular.agreement import reading_differences
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.memory import format_bytes
from neuromanifold.singular.read import read

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CASES: dict[str, Callable[[], PlantedNet]] = {
    "mlp-gelu": lambda: planted_mlp(),
    "mlp-relu-categorical": lambda: planted_mlp(activation="relu", categorical=True),
    "deep-linear": lambda: planted_deep_linear(n=64),
    "conv": lambda: planted_conv(),
    "transformer": lambda: planted_transformer(),
    "embedding": lambda: planted_embedding(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cuda_read_gives_the_cpu_reading(case: str) -> None:
    net = CASES[case]()
    before = {k: v.clone() for k, v in net.model.state_dict().items()}
    cpu = read(net.model, net.data, net.family, progress=False, device="cpu").to_dict()
    gpu = read(net.model, net.data, net.family, progress=False, device="cuda").to_dict()
    assert gpu["meta"]["device"] == "cuda:0" and cpu["meta"]["device"] == "cpu"
    assert cpu["directions"], "the planted net must yield directions to compare"
    assert reading_differences(gpu, cpu) == []
    assert gpu["not_covered"] == cpu["not_covered"]
    for k, v in net.model.state_dict().items():  # the caller's model stays on the CPU, unchanged
        assert v.device.type == "cpu" and torch.equal(v, before[k])


def test_a_float32_model_with_batchnorm_is_read_in_float64_on_the_gpu() -> None:
    """A float32 model with BatchNorm buffers: the working copy is upcast and moved, buffers too."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)
    ).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(48, 2, 6, 6, generator=torch.Generator().manual_seed(1))
    cpu = read(model, x, Gaussian(), progress=False, device="cpu").to_dict()
    gpu = read(model, x, Gaussian(), progress=False, device="cuda").to_dict()
    assert cpu["directions"]
    assert reading_differences(gpu, cpu) == []
    assert next(model.parameters()).dtype == torch.float32


def _tanh_mlp(width: int) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, 16), nn.Tanh(), nn.Linear(16, 4)).double()
    with torch.no_grad():  # hidden unit 0 dead both ways: a duality chain, so the read sweeps
        model[0].weight[0] = 0.0
        model[0].bias[0] = 0.0
        model[2].weight[:, 0] = 0.0
    return model


CUDA_BUDGET = 120_000_000
"""Bytes. The first layer's input factor is 1537 × 1537 (18.9 MB); with its spectrum and one
eigendecomposition in flight the detection's estimate is ≈ 115 MB, which fits
``BUDGET_FRACTION`` of this budget only just, so the plan must size every phase (as in
`test_memory`'s roomy budget, scaled down to what the GPU holds for this read alone)."""


@pytest.mark.parametrize("budget", [CUDA_BUDGET, 3 * CUDA_BUDGET])
def test_max_memory_bounds_the_gpu_peak(budget: int) -> None:
    """Peak GPU memory the read allocates (`torch.cuda.max_memory_allocated` above what was
    allocated when it started, the probe data already on the GPU) stays under ``max_memory``,
    or the read refuses the budget with the documented message."""
    model = _tanh_mlp(1536)
    x = torch.randn(512, 1536, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x.to("cuda")
    read(_tanh_mlp(8), x[:8, :8], Gaussian(), progress=False, device="cuda")  # kernels loaded
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    try:
        reading = read(model, x, Gaussian(), progress=False, device="cuda", max_memory=budget)
    except ValueError as err:
        assert budget == CUDA_BUDGET, f"the larger budget must be accepted: {err}"
        assert f"max_memory={budget} bytes" in str(err) and "is too small" in str(err)
        return
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - start
    assert reading.directions
    assert peak <= budget, (format_bytes(peak), format_bytes(budget))


def _cli(args: list[str], out: Path, launcher: list[str] | None = None) -> dict:
    cmd = [*(launcher or [sys.executable, "-m"]), "neuromanifold", "read", *args]
    cmd += ["--model", "zoo:planted-mlp", "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_cli_reads_on_cuda(tmp_path: Path) -> None:
    """``neuromanifold read --device cuda`` writes the reading the CPU gives."""
    cpu = _cli([], tmp_path / "cpu.json")
    gpu = _cli(["--device", "cuda"], tmp_path / "gpu.json")
    assert gpu["meta"]["device"] == "cuda:0"
    assert reading_differences(gpu, cpu) == []


def test_torchrun_on_one_gpu_reads_over_nccl(tmp_path: Path) -> None:
    """One torchrun process with ``--device cuda`` (the CLI then opens an nccl process group,
    `distributed.backend_for`; the reading does not record the backend, so this test checks its
    result only): its all-reduced sums give the CPU reading."""
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    launcher = [torchrun, "--standalone", "--nproc_per_node", "1", "-m"]
    gpu = _cli(["--device", "cuda"], tmp_path / "nccl.json", launcher)
    cpu = _cli([], tmp_path / "cpu.json")
    assert gpu["meta"]["device"] == "cuda:0" and gpu["meta"]["world_size"] == 1
    assert reading_differences(gpu, cpu) == []
