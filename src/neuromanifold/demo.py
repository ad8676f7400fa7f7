"""`neuromanifold demo`: the constructed cells, two ViTs and four optimizers, read and reported.

`run_demo(out, config)`:

1. **Cells.** `read_cells` on every constructed cell (or ``config.cells``): expected vs read order
   and class (the method's ground truth).
2. **Train or load.** The zoo recipes ``vit-digits-scratch``, ``vit-digits-finetune`` and
   ``optimizer-sweep`` through `run_recipe`, whose cache (``config.cache``, default the user
   cache) holds only checkpoints the recipes wrote themselves and is reused only when the
   stage's configuration matches.
3. **Read.** Each trained ViT is read with `read` (categorical family, true Fisher) on the first
   ``config.probe`` validation digits of its task; the scratch ViT with the per-coordinate scan
   beside each genuine singularity. The K-FAC factors are recomputed once per model
   (`kfac_factors`, the same sums the read used) for the A/G spectra and the diffuseness measure
   (`neuromanifold.report.spectra`).
4. **Compare optimizers.** Per optimizer: validation loss, directions read, readable directions
   (selected window with ``r² ≥ READABLE_R2``) by class and order, the unreadable fraction of
   the possible dead directions, and the spread of the MLP hidden-layer spectra (``A`` of each
   ``fc2``).
5. **Report.** `write_demo_report` writes ``report.json`` (a `DemoResult`, which loads back with
   `DemoResult.from_dict`), ``report.md`` (findings computed from the results against the spec's
   expectations) and ``figures/`` into ``out``, each file atomically.

The configuration and result types live in :mod:`neuromanifold.demo_result`; `DemoConfig` and
`DemoResult` are re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from neuromanifold.demo_result import (
    OPTIMIZER_STAGES,
    DemoConfig,
    DemoResult,
    ModelRead,
    optimizer_row,
)

__all__ = ["DemoConfig", "DemoResult", "run_demo"]


def _read_model(
    name: str, stage: str, path: Path, cached: bool, config: DemoConfig, *, baseline: bool
) -> ModelRead:
    from neuromanifold.report.spectra import block_spectra
    from neuromanifold.singular.factors import kfac_factors
    from neuromanifold.singular.family import Categorical
    from neuromanifold.singular.hidden_probe import hidden_probes
    from neuromanifold.singular.read import read
    from neuromanifold.zoo.checkpoint import load_checkpoint
    from neuromanifold.zoo.data import digits

    model, meta = load_checkpoint(path)
    task = meta.task or "digits"
    split = digits(task, seed=0)
    x = split.x_val[: config.probe]  # type: ignore[arg-type]
    y = split.y_val[: config.probe]  # type: ignore[arg-type]
    t0 = time.perf_counter()
    reading = read(
        model,
        (x, y),  # with labels: the whole-gradient check says whether θ0 is critical (DEMO O4)
        Categorical(),
        grid=None if config.grid is None else list(config.grid),
        max_directions=config.max_directions,
        baseline=baseline,
        progress=config.progress,
    )
    factors = kfac_factors(model, x, Categorical())
    spectra = block_spectra(factors)
    probes = tuple(hidden_probes(model, x, factors, grid=config.grid)) if baseline else ()
    metrics = {k: v for k, v in meta.metrics.items() if k != "history"}
    return ModelRead(
        name=name,
        stage=stage,
        task=task,
        checkpoint=str(path),
        metrics=metrics,
        reading=reading,
        spectra=spectra,
        cached=cached,
        read_s=time.perf_counter() - t0,
        probes=probes,
    )


def _train_job(recipe: str, config: DemoConfig) -> Any:
    """Train or load one recipe (a top-level function: it runs in a worker process)."""
    import torch

    from neuromanifold.zoo.recipes import run_recipe

    torch.set_num_threads(config.threads)
    steps = config.sweep_steps if recipe == "optimizer-sweep" else config.steps
    return run_recipe(
        recipe, out=config.cache, steps=steps, seed=config.seed, progress=config.workers == 1
    )


def _read_job(
    name: str, stage: str, path: str, cached: bool, config: DemoConfig, baseline: bool
) -> ModelRead:
    """Read one checkpoint (a top-level function: it runs in a worker process)."""
    import torch

    torch.set_num_threads(config.threads)
    if config.workers > 1:
        config = replace(config, progress=False)
    return _read_model(name, stage, Path(path), cached, config, baseline=baseline)


_RECIPES = ("vit-digits-scratch", "vit-digits-finetune", "optimizer-sweep")


def _reads_of(recipe: str, res: Any, config: DemoConfig) -> list[tuple[Any, ...]]:
    stages = list(res.checkpoints)
    if recipe != "optimizer-sweep":
        stages = stages[-1:]
    baseline = config.baseline and recipe == "vit-digits-scratch"
    return [(recipe, s, str(res.checkpoints[s]), s in res.cached, config, baseline) for s in stages]


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``(fn(*args), seconds it took)``, measured where it runs (a pool worker)."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def _run_jobs(config: DemoConfig, timings: dict[str, float]) -> dict[tuple[str, str], ModelRead]:
    """Train the three recipes and read their checkpoints, on ``config.workers`` processes.

    Each read is submitted as soon as its recipe is trained; with one worker everything runs
    here, in order. ``timings`` gets each job's own duration, measured in the process that ran
    it (not the time it waited in the pool's queue).
    """
    reads: dict[tuple[str, str], ModelRead] = {}
    lines = config.progress and not _on_terminal()  # a log: a line per job, not a frozen bar
    if config.workers == 1:
        for recipe in _RECIPES:
            res, timings[f"train {recipe}"] = _timed(_train_job, recipe, config)
            if lines:
                _note(config, f"train {recipe} done ({timings[f'train {recipe}']:.1f} s)")
            for job in _reads_of(recipe, res, config):
                reads[(job[0], job[1])], timings[f"read {job[1]}"] = _timed(_read_job, *job)
                if lines:
                    _note(config, f"read {job[1]} done ({timings[f'read {job[1]}']:.1f} s)")
        return reads
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    bar = _bar(config, 3 + 6)
    started: dict[Any, tuple[str, str]] = {}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=config.workers, mp_context=ctx) as pool:
        for recipe in _RECIPES:
            started[pool.submit(_timed, _train_job, recipe, config)] = ("train", recipe)
        pending = set(started)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                kind, label = started[fut]
                result, seconds = fut.result()  # a worker's exception propagates here
                timings[f"{kind} {label}"] = seconds  # in the worker: no time queued
                if kind == "train":
                    for job in _reads_of(label, result, config):
                        f = pool.submit(_timed, _read_job, *job)
                        started[f] = ("read", job[1])
                        pending.add(f)
                else:
                    reads[(result.name, result.stage)] = result
                if bar is not None:
                    bar[0].update(bar[1], advance=1, description=f"demo: {kind} {label} done")
                elif lines:
                    _note(config, f"{kind} {label} done ({seconds:.1f} s)")
    if bar is not None:
        bar[0].stop()
    return reads


def _on_terminal() -> bool:
    """Whether stderr is a terminal (or a notebook) that redraws a bar in place."""
    from rich.console import Console

    console = Console(stderr=True)
    return bool(console.is_terminal or console.is_jupyter)


def _bar(config: DemoConfig, total: int) -> Any:
    """A bar over the jobs on a terminal; ``None`` without progress or off a terminal, where
    rich draws a bar once, when it stops (s34 trial DEMO D4: 11 minutes of a log without a line,
    then one frozen bar): `_run_jobs` says a line per finished job there instead."""
    if not config.progress or not _on_terminal():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),  # progress, not output: stdout keeps the findings
    )
    task = bar.add_task(
        f"demo: training 3 recipes, then 6 reads on {config.workers} workers", total=total
    )
    bar.start()
    return bar, task


def _note(config: DemoConfig, message: str) -> None:
    if config.progress:
        from rich.console import Console

        Console(stderr=True).print(f"[bold]demo[/bold] {message}")


def run_demo(out: str | Path, config: DemoConfig | None = None) -> DemoResult:
    """Run the demo (module docstring) and write its report into ``out``; return the result."""
    import torch

    from neuromanifold.cells.registry import all_cells, get_cell
    from neuromanifold.cells.table import read_cells
    from neuromanifold.report.demo_report import write_demo_report

    config = DemoConfig() if config is None else config
    if not isinstance(config, DemoConfig):
        raise TypeError(f"config must be a DemoConfig; got {type(config).__name__}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a directory; {out} is a file")
    timings: dict[str, float] = {}
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        t0 = time.perf_counter()
        if config.cells is None:
            cells = all_cells(seed=config.seed)
        else:
            cells = [get_cell(n, seed=config.seed) for n in config.cells]
        _note(config, f"reading {len(cells)} constructed cells")
        cell_rows = [res.to_dict() for _, _, res in read_cells(cells)]
        timings["cells"] = time.perf_counter() - t0
        reads = _run_jobs(config, timings)
    finally:
        torch.set_num_threads(threads)
    models = {
        r: next(m for (name, _), m in reads.items() if name == r)
        for r in ("vit-digits-scratch", "vit-digits-finetune")
    }
    optimizers = [m for (name, _), m in sorted(reads.items()) if name == "optimizer-sweep"]
    order = list(OPTIMIZER_STAGES)
    optimizers.sort(key=lambda m: order.index(m.stage) if m.stage in order else len(order))
    rows = [optimizer_row(m) for m in optimizers]
    timings["total"] = time.perf_counter() - start
    result = DemoResult(
        config=config,
        cells=cell_rows,
        models=models,
        optimizers=optimizers,
        rows=rows,
        timings=timings,
    )
    _note(config, f"writing report.md, report.json and figures/ into {out}")
    write_demo_report(result, out)
    return result


def with_overrides(config: DemoConfig, **changes: Any) -> DemoConfig:
    """``dataclasses.replace`` with validation (for the CLI)."""
    return replace(config, **changes)
