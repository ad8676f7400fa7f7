"""Reports of a read: JSON (archival), Markdown, PNG figures, atomic writes, resumable reads.

JSON: `reading_json`, `write_reading_json`, `load_reading` (exact round trip).
Markdown: `reading_markdown`. Figures: `plot_sweeps`, `plot_spectra`, `plot_class_map`.
Report directory: `write_report`, `ReportFiles`. Resume: `resumable_read`, `ReadLog`,
`read_fingerprint`. The directions swept: `save_directions`, `load_directions`. Atomic writes:
`atomic_write`, `atomic_write_text`, `atomic_write_bytes`.
Figures import matplotlib lazily.
"""

from neuromanifold.report._atomic import atomic_write, atomic_write_bytes, atomic_write_text
from neuromanifold.report.archive import load_reading, reading_json, write_reading_json
from neuromanifold.report.directions import load_directions, save_directions
from neuromanifold.report.figures import plot_class_map, plot_spectra, plot_sweeps
from neuromanifold.report.markdown import reading_markdown
from neuromanifold.report.resume import ReadLog, read_fingerprint, resumable_read
from neuromanifold.report.write import ReportFiles, write_report

__all__ = [
    "ReadLog",
    "ReportFiles",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "load_directions",
    "load_reading",
    "plot_class_map",
    "plot_spectra",
    "plot_sweeps",
    "read_fingerprint",
    "reading_json",
    "reading_markdown",
    "resumable_read",
    "save_directions",
    "write_reading_json",
    "write_report",
]
