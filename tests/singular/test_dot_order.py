"""Inner products of parameter dicts do not depend on the process's string-hash salt.

s17 user trial AF #1: ``_validate.dot`` summed its per-tensor terms in the iteration order of a
set of keys, which Python's per-process hash salt changes, so ``|uᵀθ0|`` (a record's ``offset``)
differed in the last bit from one process to the next: a resumed read and the demo's worker
processes did not reproduce the reading. Both inner products now add in sorted key order.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch
from neuromanifold.singular._validate import dot
from neuromanifold.singular.detectors.base import Candidate
# terms whose float sum depends on the order: 1e16 + 1 - 1e16 + 1 is 0, 1 or 2
vals = {"w1": 1e16, "b2": 1.0, "w3": -1e16, "b4": 1.0, "w5": 3.0, "b6": -2.5e15}
a = {k: torch.tensor([v], dtype=torch.float64) for k, v in vals.items()}
ones = {k: torch.ones(1, dtype=torch.float64) for k in vals}
c = Candidate(layers=("x",), detector="t", u=a)
d = Candidate(layers=("x",), detector="t", u=ones)
print(repr(float(dot(a, ones))), repr(c.overlap(d)))
"""


def _run(seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_dot_and_overlap_are_the_same_in_every_process() -> None:
    # three salts (a process each, ~3 s apiece): the old set order differed between them, and
    # the expected value below is the sorted order's, which a salted order matches only by chance
    results = {_run(seed) for seed in range(3)}
    assert len(results) == 1, results
    # the sorted-key sum: b2, b4, b6, w1, w3, w5
    expected = 0.0
    for v in (1.0, 1.0, -2.5e15, 1e16, -1e16, 3.0):
        expected += v
    assert results == {f"{expected!r} {abs(expected)!r}"}
