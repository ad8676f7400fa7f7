"""Rendering of an NTK-determinacy survey: a Markdown table and a bar chart (PNG).

The survey itself (rows, sampling, verdicts) is :mod:`neuromanifold.linear.survey`; this module
only reads a :class:`~neuromanifold.linear.survey.SurveyResult`.
"""

from __future__ import annotations

import textwrap

import numpy as np

from neuromanifold.linear.survey import NOTION_DATASET, NOTION_GLOBAL, SurveyResult

__all__ = ["plot_survey", "to_markdown"]

#: the spread panel's log axis starts this factor (one decade) below the smallest positive spread
#: or the threshold, whichever is smaller; rows with a spread of exactly 0 are marked there
_AXIS_MARGIN = 10.0


def to_markdown(result: SurveyResult) -> str:
    """A Markdown table of the rows, followed by the witnesses of disagreements. Its first column
    is the row's index in `neuromanifold.linear.survey.default_rows`, the index ``lcn survey
    --rows`` takes (s31 trial LCN #9: documented nowhere)."""
    head = (
        "| row | architecture | condition | fiber notion | samples | fraction dependent | "
        "max spread | verdict | paper claim | agrees |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in result.rows:
        index = "—" if r.row_index is None else r.row_index
        lines.append(
            f"| {index} | {r.architecture} | {r.condition} | {r.fiber_notion} | {r.samples} | "
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
                    f"{w.get('architecture_label', w['architecture'])}: "
                    f"{w['n_distinct_ntks']} distinct NTKs on one fiber, "
                    f"relative gap {w['max_ntk_diff_rel']:.3g} (points and NTKs in the JSON).\n"
                )
            else:
                text += f"{w.get('note')}.\n"
    text += "\n" + "\n".join(f"_{n}_  " for n in result.notes) + "\n"
    return text


def _yes_no(x: bool | None) -> str:
    return "—" if x is None else ("yes" if x else "NO")


def plot_survey(result: SurveyResult, path: str) -> None:
    """Bar chart of the fraction of dependent samples per row, paper claims marked (PNG).

    The right panel draws each row's ``max_spread`` on a log axis; a row whose spread is exactly
    0 draws no bar (a bar clipped at some small value would read as a tiny positive spread) but
    a hollow circle and "0 (exactly)" at the axis' left end, one decade (`_AXIS_MARGIN`) below the
    smallest positive spread or the threshold ``ntk_rtol``; the axis ends one decade above the
    largest of them, so the dashed threshold line is always inside. A row whose samples all
    failed (no point on the manifold, ``n_failed == samples``) has no spread and says so.
    """
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
    # an exact 0 has no place on the log axis: no bar, a "0" at the axis' left end instead; a
    # row without a sample on the manifold measured no spread at all and says so
    measured = [i for i, r in enumerate(rows) if r.n_failed < r.samples]
    positive = [i for i in measured if rows[i].max_spread > 0]
    zero = [i for i in measured if rows[i].max_spread == 0]
    spreads = [rows[i].max_spread for i in positive] + [result.ntk_rtol]
    left, right = min(spreads) / _AXIS_MARGIN, max(spreads) * _AXIS_MARGIN
    ax2.barh(y[positive], [rows[i].max_spread for i in positive], color="tab:orange")
    ax2.set_xscale("log")
    ax2.set_xlim(left, right)  # both ends: the threshold line stays inside
    for i in zero:
        ax2.plot([left], [i], marker="o", ms=7, mfc="white", color="k", clip_on=False)
        ax2.annotate(
            "0 (exactly)", (left, i), xytext=(8, 0), textcoords="offset points", va="center"
        )
    for i in sorted(set(range(len(rows))) - set(measured)):
        ax2.annotate(
            "no sample on the manifold", (left, i), xytext=(8, 0), textcoords="offset points",
            va="center", color="tab:gray",
        )  # fmt: skip
    ax2.axvline(result.ntk_rtol, color="k", ls="--", lw=1)
    ax2.set_xlabel("largest relative NTK spread on a fiber (dashed: threshold; ○ 0: exactly zero)")
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
