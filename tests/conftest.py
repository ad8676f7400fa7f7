"""Suite-wide test settings."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """Run each test worker on one intra-op thread.

    The suite runs with ``pytest -n 2`` on two cores; letting every worker spawn one BLAS/OpenMP
    thread per core oversubscribes the machine and makes small float64 kernels several times slower.
    """
    torch.set_num_threads(1)
