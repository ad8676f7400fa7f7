"""The demo's report directory: ``report.json``, ``report.md`` and ``figures/``.

``report.json`` is `DemoResult.to_dict` (load it back with `load_demo`); ``report.md`` opens with
the findings vs expectation (`neuromanifold.report.findings`, computed from the results), then
the cell table, each ViT's read (per-layer tables, coordinate scan beside the genuine
singularities) and the optimizer comparison (one table, one figure). Every file is written
atomically, JSON first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from neuromanifold.report._atomic import atomic_write_text
from neuromanifold.report.markdown import fmt, reading_markdown, scan_summary, table

__all__ = ["demo_findings", "demo_markdown", "load_demo", "plot_optimizers", "write_demo_report"]


def demo_findings(result: Any) -> list[Any]:
    """All findings of a `DemoResult` (cells, scratch ViT, fine-tuned ViT, optimizers)."""
    from neuromanifold.demo_result import READABLE_R2
    from neuromanifold.report.findings import (
        cell_finding,
        gauge_findings,
        node_death_findings,
        optimizer_finding,
    )

    out = []
    if result.cells:
        out.append(cell_finding(result.cells))
    scratch = result.models.get("vit-digits-scratch")
    if scratch is not None:
        out += node_death_findings(scratch, r2_min=READABLE_R2)
        out += gauge_findings(scratch, r2_min=READABLE_R2, expect_no_deaths=False)
    ft = result.models.get("vit-digits-finetune")
    if ft is not None:
        out += gauge_findings(ft, r2_min=READABLE_R2, expect_no_deaths=True)
    if result.rows:
        out.append(optimizer_finding(result.rows))
    return out


def _probe_cell(d: dict[str, Any]) -> str:
    if d["k"] is None:
        return f"{d['class']}, no window"
    return f"k={d['k']} (k̂ {d['k_hat']:.3f}, r² {d['r2']:.4f}), {d['class']}"


def _verdict(holds: bool | None) -> str:
    return {True: "holds", False: "**does not hold**", None: "undecided"}[holds]


def _probe_sentence(result: Any) -> str:
    """How many validation digits each read used: ``--probe`` asks for the first ``probe`` of
    its task's validation split, and a split holds fewer than a large ``probe`` (s34 trial DEMO
    D3: "Probe: 1000" printed for reads of 359 and 179 digits)."""
    asked = result.config.probe
    used = {
        name: int(m.reading.meta.get("n_samples", asked))
        for name, m in [*result.models.items(), *((o.stage, o) for o in result.optimizers)]
    }
    if all(n == asked for n in used.values()):
        return f"Probe: {asked} validation digits per read"
    counts = ", ".join(f"{name} {n}" for name, n in used.items())
    return (
        f"Probe: the first {asked} validation digits asked for per read; the validation splits "
        f"hold fewer, so the reads used: {counts}"
    )


def demo_markdown(result: Any, figures: dict[str, str]) -> str:
    """The demo's Markdown (module docstring); ``figures`` maps names to relative paths."""
    from neuromanifold.demo_result import READABLE_R2

    t = result.timings
    lines = [
        "# neuromanifold demo",
        "",
        f"Wall time to the results {t.get('total', float('nan')):.1f} s, before this report "
        "and its figures were written (each step's own duration, steps in parallel workers "
        "overlap: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in t.items() if k != "total")
        + f"). {_probe_sentence(result)}; categorical family, "
        "true Fisher. A direction is *readable* when its selected window fits with "
        f"r² ≥ {READABLE_R2}.",
        "",
        "## Findings vs expectation",
        "",
        "Computed from the results below (`neuromanifold.report.findings` defines each check).",
        "",
        table(
            ["subject", "expectation (spec)", "observed", "verdict"],
            [
                [f.subject, f.expectation, f.observed, _verdict(f.holds)]
                for f in demo_findings(result)
            ],
        ),
    ]
    if result.cells:
        lines += ["", "## Constructed cells", ""]
        lines.append(
            table(
                ["cell", "expected", "k", "k̂", "r²", "class", "pass"],
                [
                    [
                        c["name"],
                        c["expected_class"] if c["expected_k"] is None else f"k={c['expected_k']}",
                        fmt(c["k"]),
                        fmt(c["k_hat"], ".4f"),
                        fmt(c["r2"], ".5f"),
                        c["class"],
                        "pass" if c["passed"] else "FAIL",
                    ]
                    for c in result.cells
                ],
            )
        )
    for key, title in (
        ("vit-digits-scratch", "ViT trained from scratch"),
        ("vit-digits-finetune", "Fine-tuned ViT"),
    ):
        mr = result.models.get(key)
        if mr is None:
            continue
        m = mr.metrics
        lines += [
            "",
            f"## {title} (`{mr.stage}`)",
            "",
            f"Validation loss {fmt(m.get('val_loss'), '.4f')}, accuracy "
            f"{fmt(m.get('val_accuracy'), '.4f')}, train accuracy "
            f"{fmt(m.get('train_accuracy'), '.4f')}; task `{mr.task}`; checkpoint "
            f"{'loaded from the cache' if mr.cached else 'trained in this run'}; read in "
            f"{mr.read_s:.1f} s. MLP units compressed (< 1 % RMS contribution): "
            f"{m.get('mlp_compressed_units')}.",
            "",
        ]
        lines.append(reading_markdown(mr.reading, title=f"{title}: read", level=3))
        if mr.probes:
            lines += [
                "### Weakest hidden direction per MLP block, read as a rotated node death",
                "",
                "Not a detector output (`neuromanifold.singular.hidden_probe.hidden_probes`): "
                "v = the eigenvector of the fc2 input factor A with the smallest eigenvalue, "
                "the direction ΔW1 = v aᵀ, ΔW2 = g vᵀ; beside it the per-coordinate scan of "
                "fc1 and fc2.",
                "",
                table(
                    ["block", "A ratio", "unsnapped", "snapped", "offset", "coord. scan"],
                    [
                        [
                            p["block"],
                            f"{p['ratio']:.1e}",
                            _probe_cell(p["unsnapped"]),
                            _probe_cell(p["snapped"]),
                            f"{p['snapped']['offset']:.2g}",
                            "; ".join(
                                f"{layer}: {scan_summary(p['scan'], layer)}" for layer in p["scan"]
                            ),
                        ]
                        for p in mr.probes
                    ],
                ),
                "",
            ]
        for fig in ("sweeps", "spectra", "classes"):
            name = f"{key}-{fig}"
            if name in figures:
                lines.append(f"![{name}]({figures[name]})")
            if fig == "sweeps" and name in figures:
                from neuromanifold.report.figures import sweep_panels, sweeps_note

                total = len(mr.reading.directions)
                if note := sweeps_note(len(sweep_panels(mr.reading)), total):
                    lines.append(f"*{note}; every direction is in the tables above.*")
    if result.rows:
        lines += ["", "## Optimizer comparison", ""]
        lines.append(
            "Same initialisation and batches under each optimizer (recipe `optimizer-sweep`). "
            "*unreadable*: fraction of the possible dead directions (detectors other than the "
            "closed-form gauges) neither readable nor classed flat gauge by magnitude; "
            "*fc2 spectrum*: over the MLP `fc2` "
            "input factors A, the ratios α/α_max below 1e-3 (in brackets: those zero within "
            "round-off, directions no sample reaches), the detector's near-kernel, and the "
            "largest drop between consecutive ratios in decades (to zeros of dead units a lower "
            "bound, to zeros the probe size explains none; ≥ 1: a clean kernel; small: a "
            "diffuse one; `neuromanifold.report.spectra`)."
        )
        lines.append("")
        lines.append(
            table(
                [
                    "optimizer",
                    "val loss",
                    "val acc",
                    "read",
                    f"readable (r² ≥ {READABLE_R2})",
                    "readable kinds",
                    "unreadable",
                    "fc2 ratios < 1e-3 (round-off 0)",
                    "fc2 near-kernel",
                    "fc2 largest gap (decades)",
                ],
                [
                    [
                        r.optimizer,
                        f"{r.val_loss:.4f}",
                        f"{r.val_accuracy:.4f}",
                        str(r.n_read),
                        str(r.n_readable),
                        "; ".join(f"{k}: {v}" for k, v in r.readable_kinds.items()) or "—",
                        fmt(r.unreadable_fraction, ".2f"),
                        f"{r.fc2_n_small} ({r.fc2_n_zero})",
                        str(r.fc2_kernel),
                        f"{r.fc2_max_gap:.2f}",
                    ]
                    for r in result.rows
                ],
            )
        )
        if "optimizers" in figures:
            lines += ["", f"![optimizers]({figures['optimizers']})"]
    return "\n".join(lines) + "\n"


def plot_optimizers(result: Any, path: str | Path) -> Path:
    """Left: fc2 ``A`` ratio spectra per optimizer; right: the directions read, the readable ones
    by kind and the others as the table splits them (`_unreadable_split`)."""
    from neuromanifold.report.figures import (
        _DPI,
        _LABEL_FONTSIZE,
        _mark_at_edge,
        _plt,
        _spectra_floor,
        save_png,
    )

    plt = _plt()
    # the other figures' dpi and sizes (s34 trial DEMO D8: dpi 90 and 6-pt legends and ticks)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.5, 3.8), dpi=_DPI)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = [
        (i, j, row, name, [float(r) for r in s["A"]])
        for i, (mr, row) in enumerate(zip(result.optimizers, result.rows, strict=True))
        for j, (name, s) in enumerate(n for n in mr.spectra.items() if n[0].endswith("mlp.fc2"))
    ]
    # every positive ratio at its value; an exact 0 is a triangle on the floor (it had been
    # clamped to 1e-18 and drawn as data; s15 trial S #8, as plot_spectra, #2)
    lo = _spectra_floor([r for *_, ratios in series for r in ratios])
    ax0.set_yscale("log")
    ax0.set_ylim(lo, 2.0)
    n_zero = 0
    for i, j, row, name, ratios in series:
        c = colours[i % len(colours)]
        xs = range(1, len(ratios) + 1)
        ax0.plot(
            xs,
            [r if r > 0 else float("nan") for r in ratios],
            ["-", "--", ":", "-."][j % 4],
            color=c,
            lw=1.0,
            label=f"{row.optimizer} · {name.split('.mlp')[0]}",
        )
        zero = [x for x, r in zip(xs, ratios, strict=True) if r == 0]
        if zero:
            label = None if n_zero else "α = 0 (drawn at floor)"
            _mark_at_edge(ax0, zero, lo, ms=3, color=c, label=label)
            n_zero += len(zero)
    ax0.axhline(1e-3, ls=":", color="grey", lw=0.7)
    ax0.set_xlabel("eigenvalue index", fontsize=_LABEL_FONTSIZE)
    ax0.set_ylabel("α / α_max of fc2 input A", fontsize=_LABEL_FONTSIZE)
    if series:  # no fc2 spectra: nothing to name
        ax0.legend(fontsize=7)
    kinds = sorted({k for r in result.rows for k in r.readable_kinds})
    xs = list(range(len(result.rows)))
    bottom = [0] * len(result.rows)
    for k in kinds:
        vals = [r.readable_kinds.get(k, 0) for r in result.rows]
        ax1.bar(xs, vals, bottom=bottom, label=f"readable: {k}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    # the table's categories (`optimizer_row`): a flat gauge has no window by definition (its
    # magnitude at the floor decides its class); "not readable" is the table's unreadable set
    # (possible directions, not gauge detectors); a gauge detector's record without a readable
    # window gets its own bar
    split = [_unreadable_split(mr.reading.directions) for mr in result.optimizers]
    for i, (label, colour) in enumerate(
        (
            ("flat gauge, no window (at the floor)", "darkgrey"),
            ("not readable", "lightgrey"),
            ("gauge detector, no readable window", "whitesmoke"),
        )
    ):
        vals = [parts[i] for parts in split]
        if not any(vals):  # no legend entry for a category no bar holds (DEMO D8)
            continue
        ax1.bar(xs, vals, bottom=bottom, color=colour, edgecolor="grey", lw=0.3, label=label)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax1.set_ylim(0, max([*bottom, 1]) * 1.08)  # headroom: the tallest bar met the frame (S #8)
    ax1.set_xticks(xs, [r.optimizer.replace(" + ", "\n+ ") for r in result.rows], fontsize=7)
    ax1.set_ylabel("directions read", fontsize=_LABEL_FONTSIZE)
    ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars
    fig.suptitle("optimizer comparison: MLP spectra and the directions read, by class", fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)


def _unreadable_split(recs: Any) -> tuple[int, int, int]:
    """The records without a readable window (``r² < READABLE_R2`` or none), split as the table
    splits them (`demo_result.optimizer_row`): ``(flat gauges, the table's unreadable ones, from
    detectors not in GAUGE_DETECTORS; the other gauge-detector records)``."""
    from neuromanifold.demo_result import GAUGE_DETECTORS, READABLE_R2

    rest = [r for r in recs if r.r2 is None or r.r2 < READABLE_R2]
    flat = [r for r in rest if r.klass == "flat_gauge"]
    other = [r for r in rest if r.klass != "flat_gauge"]
    unread = [r for r in other if r.detector not in GAUGE_DETECTORS]
    return len(flat), len(unread), len(other) - len(unread)


def write_demo_report(result: Any, out: str | Path, *, figures: bool = True) -> dict[str, Path]:
    """Write the demo report into ``out`` (module docstring); return ``{name: path}``."""
    from neuromanifold.report.figures import plot_class_map, plot_spectra, plot_sweeps

    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    # the verdicts beside the results they are computed from (s32 trial TRAIN #11: only the
    # markdown had them); `load_demo` ignores the key and `demo_findings` recomputes it
    payload = {**result.to_dict(), "findings": [f.to_dict() for f in demo_findings(result)]}
    paths = {"json": atomic_write_text(directory / "report.json", json.dumps(payload))}
    rel: dict[str, str] = {}
    if figures:
        fig_dir = directory / "figures"
        for key, mr in result.models.items():
            made = {  # plot_sweeps orders the panels (flat gauges last)
                "sweeps": plot_sweeps(mr.reading, fig_dir / f"{key}-sweeps.png", title=key),
                "spectra": plot_spectra(mr.spectra, fig_dir / f"{key}-spectra.png", title=key),
                "classes": plot_class_map(mr.reading, fig_dir / f"{key}-classes.png", title=key),
            }
            for fig, p in made.items():
                paths[f"{key}-{fig}"] = p
        if result.rows:
            paths["optimizers"] = plot_optimizers(result, fig_dir / "optimizers.png")
        rel = {k: p.relative_to(directory).as_posix() for k, p in paths.items() if k != "json"}
    paths["markdown"] = atomic_write_text(directory / "report.md", demo_markdown(result, rel))
    return paths


def load_demo(path: str | Path) -> Any:
    """Load ``report.json`` (or its directory) back into a `DemoResult`."""
    from neuromanifold.demo_result import DemoResult

    p = Path(path)
    if p.is_dir():
        p = p / "report.json"
    try:
        return DemoResult.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{p} does not hold a demo result: {err!r}") from err
