"""Rendering of an NTK-determinacy survey: a Markdown table and a bar chart (PNG).

The survey itself (rows, sampling, verdicts) is :mod:`neuromanifold.linear.survey`; this module
only reads a :class:`~neuromanifold.linear.survey.SurveyResult`.
"""

from __future__ import annotations

import textwrap

import numpy as np

from neuromanifold.linear.survey import NOTION_DATASET, NOTION_GLOBAL, SurveyResult

__all__ = ["plot_survey", "to_markdown"]


def to_markdown(result: SurveyResult) -> str:
    """A Markdown table of the rows, followed by the witnesses of disagreements."""
    head = (
        "| architecture | condition | fiber notion | samples | fraction dependent | "
        "max spread | verdict | paper claim | agrees |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in result.rows:
        lines.append(
            f"| {r.architecture} | {r.condition} | {r.fiber_notion} | {r.samples} | "
            f"{r.fraction_dependent:.2f} | {r.max_spread:.3g} | {r.verdict} | "
            f"{r.paper_claim or '—'} | {_yes_no(r.agrees)} |"
        )
    text = f"# NTK determinacy survey (samples={result.samples}, seed={result.seed})\n\n"
    text += head + "\n".join(lines) + "\n"
    wit = [r for r in result.rows if r.witness is not None]
    if wit:
        text += "\n## Disagreements with the paper's claim\n"
        for r in wit:
            w = r.witness or {}
            text += f"\n* **{r.architecture} — {r.condition}** ({r.fiber_notion}): "
            if "ntks" in w:
                text += (
                    f"{w['architecture']}: {w['n_distinct_ntks']} distinct NTKs on one fiber, "
                    f"relative gap {w['max_ntk_diff_rel']:.3g} (points and NTKs in the JSON).\n"
                )
            else:
                text += f"{w.get('note')}.\n"
    text += "\n" + "\n".join(f"_{n}_  " for n in result.notes) + "\n"
    return text


def _yes_no(x: bool | None) -> str:
    return "—" if x is None else ("yes" if x else "NO")


def plot_survey(result: SurveyResult, path: str) -> None:
    """Bar chart of the fraction of dependent samples per row, paper claims marked (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows
    labels = [
        "\n".join([r.architecture, *textwrap.wrap(r.condition, 30), f"[{_short(r.fiber_notion)}]"])
        for r in rows
    ]
    y = np.arange(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 0.8 * len(rows) + 1.5), sharey=True)
    ax1.barh(y, [r.fraction_dependent for r in rows], color="tab:blue")
    for i, r in enumerate(rows):
        if r.paper_claim is not None:
            x = 1.0 if r.paper_claim == "dependent" else 0.0
            ax1.plot([x], [i], marker="D", color="tab:red", ms=7)
    ax1.set_xlim(-0.05, 1.05)
    ax1.set_xlabel("fraction of samples with more than one NTK on the fiber")
    ax1.set_yticks(y, labels, fontsize=7)
    ax1.invert_yaxis()
    ax1.set_title(
        "computed (bars) vs paper claim (red ◆: 0 = independent, 1 = dependent)", fontsize=9
    )
    spreads = [max(r.max_spread, 1e-17) for r in rows]
    ax2.barh(y, spreads, color="tab:orange")
    ax2.set_xscale("log")
    ax2.axvline(result.ntk_rtol, color="k", ls="--", lw=1)
    ax2.set_xlabel("largest relative NTK spread on a fiber (dashed: threshold)")
    fig.suptitle(f"NTK determinacy survey, samples={result.samples}, seed={result.seed}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _short(notion: str) -> str:
    if notion == NOTION_DATASET:
        return "dataset, one region"
    if notion == NOTION_GLOBAL:
        return "global function"
    return "(v, δ)"
