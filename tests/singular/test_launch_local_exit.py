"""How a `launch_local` rank ends (CI at 543c744: a finished read reported as SIGABRT).

A spawned gloo rank that returned normally aborted in about 1 launch in 10 ("terminate called
without an active exception"): during the interpreter's finalization a gloo worker thread freed
its last all-reduce's tensors and, asking for the GIL, was ended by Python inside a C++
destructor. A rank that finished now leaves with ``os._exit(0)`` once its result is on disk and
the group is destroyed; a rank that raised must not, or torch would never record its error. Both
are checked here on rank 0 of a one-process group run in this process, ``os._exit`` replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import neuromanifold.singular.distributed as dp

FACTORY = "neuromanifold.cells.planted:planted_mlp"
ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class _Left(Exception):
    """Raised by the stand-in for ``os._exit``, with the exit code."""


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch):
    """Run `_worker` as rank 0 of 1 here: the torchrun variables and the thread count are put
    back afterwards, and ``os._exit`` raises `_Left` (recording the files present then)."""
    for key in ENV:
        monkeypatch.setenv(key, "")  # restored by monkeypatch; `_worker` sets its own values
    seen: dict[str, list[str]] = {}

    def fake_exit(code: int) -> None:
        seen["files"] = sorted(p.name for p in Path(seen["dir"][0]).iterdir())
        raise _Left(code)

    monkeypatch.setattr(dp.os, "_exit", fake_exit)
    threads = torch.get_num_threads()

    def run(tmp: Path, factory: str, factory_kwargs: dict) -> None:
        seen["dir"] = [str(tmp)]
        dp._worker(
            0,
            1,
            dp._free_port(),
            factory,
            factory_kwargs,
            {"progress": False, "max_directions": 1},
            str(tmp),
            1,
        )

    yield run, seen
    torch.set_num_threads(threads)
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_finished_rank_leaves_with_code_zero_after_its_result_is_on_disk(
    one_rank, tmp_path: Path
) -> None:
    run, seen = one_rank
    with pytest.raises(_Left) as left:
        run(tmp_path, FACTORY, {})
    assert left.value.args == (0,)
    assert seen["files"] == ["rank0.json"]  # whole (written under another name, then renamed)
    out = json.loads((tmp_path / "rank0.json").read_text())
    assert out["reading"]["meta"]["world_size"] == 1 and out["seconds"] > 0
    assert not dist.is_initialized()  # the group was destroyed before leaving


def test_a_rank_that_raised_does_not_leave_early(one_rank, tmp_path: Path) -> None:
    """Its error propagates (torch's spawn wrapper records it) and its record is on disk."""
    run, seen = one_rank
    with pytest.raises(TypeError):
        run(tmp_path, FACTORY, {"no_such_argument": 1})
    assert "files" not in seen  # os._exit was never called
    record = json.loads((tmp_path / "rank0.error").read_text())
    assert record["kind"] == "TypeError" and "no_such_argument" in record["message"]
    assert not dist.is_initialized()
