"""Suite-wide test settings."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    """Run every test on one intra-op thread (set before each test, so a test that changes the
    thread count, as the demo does, cannot leave it changed for the tests after it).

    The suite runs with ``pytest -n 2`` on two cores; letting every worker spawn one BLAS/OpenMP
    thread per core oversubscribes the machine and makes small float64 kernels several times slower.
    """
    torch.set_num_threads(1)
