"""Write one read's report directory: ``report.json``, ``report.md`` and ``figures/*.png``.

Every file is written atomically (temporary file in the same directory, then ``os.replace``), so
a failed or interrupted write — a full disk included — leaves the previous report's files
intact; JSON is written first (the archival record), then the figures, then the Markdown that
links them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuromanifold.report._atomic import atomic_write_text
from neuromanifold.report.archive import write_reading_json
from neuromanifold.report.markdown import reading_markdown
from neuromanifold.singular.reading import Reading

__all__ = ["ReportFiles", "write_report"]


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by `write_report` (``figures`` by name: sweeps, spectra, classes)."""

    directory: Path
    json: Path
    markdown: Path
    figures: dict[str, Path]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of path strings."""
        return {
            "directory": str(self.directory),
            "json": str(self.json),
            "markdown": str(self.markdown),
            "figures": {k: str(v) for k, v in self.figures.items()},
        }


def write_report(
    reading: Reading,
    out: str | Path,
    *,
    title: str = "Reading",
    factors: Mapping[str, Any] | None = None,
    figures: bool = True,
) -> ReportFiles:
    """Write ``reading`` into directory ``out`` (module docstring).

    ``factors`` (optional; `kfac_factors` of the same model and probe set — `read` does not
    return them — after ``rewrite_as_read(copy_of_model, reading.meta)``, so that an
    ``nn.MultiheadAttention`` the read unpacked has its projections' panels) adds the A/G
    spectra figure. ``figures=False`` writes JSON and Markdown only.
    When the sweeps figure leaves directions out (`sweep_panels`), the line under its link says
    how many it shows (`sweeps_note`); the tables list them all.
    """
    if not isinstance(reading, Reading):
        raise TypeError(f"reading must be a Reading; got {type(reading).__name__}")
    directory = Path(out)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"out must be a directory; {directory} is a file")
    directory.mkdir(parents=True, exist_ok=True)
    json_path = write_reading_json(reading, directory / "report.json")
    figs: dict[str, Path] = {}
    if figures:
        from neuromanifold.report.figures import (
            plot_class_map,
            plot_spectra,
            plot_sweeps,
            sweep_panels,
            sweeps_note,
        )

        fig_dir = directory / "figures"
        shown = sweep_panels(reading)
        figs["sweeps"] = plot_sweeps(reading, fig_dir / "sweeps.png", title=title)
        if factors is not None:
            from neuromanifold.report.spectra import block_spectra

            spectra = block_spectra(factors)
            figs["spectra"] = plot_spectra(spectra, fig_dir / "spectra.png", title=title)
        figs["classes"] = plot_class_map(reading, fig_dir / "classes.png", title=title)
    text = reading_markdown(reading, title=title, level=1)
    if figs:
        lines = []
        for name, p in figs.items():
            lines.append(f"![{name}]({p.relative_to(directory).as_posix()})")
            if name == "sweeps" and (note := sweeps_note(len(shown), len(reading.directions))):
                lines.append(f"*{p.name}: {note}; every direction is in the tables above.*")
        text += "\n## Figures\n\n" + "\n".join(lines) + "\n"
    md_path = atomic_write_text(directory / "report.md", text)
    return ReportFiles(directory=directory, json=json_path, markdown=md_path, figures=figs)
