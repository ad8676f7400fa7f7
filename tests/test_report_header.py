"""The read report's header: what the whole-gradient check found, flagged or not (s32 trial
TRAIN #6: a checkpoint at chance accuracy read z = 1.3, and no report said the check had run),
and how many directions detector caps cut (TRAIN #9)."""

from __future__ import annotations

from neuromanifold.report.markdown import reading_markdown
from neuromanifold.singular.reading import Reading

CHECK = {"z": 1.3, "threshold": 4.0, "n_direction": 64, "n_test": 64, "not_critical": False}


def _md(meta: dict) -> str:
    return reading_markdown(Reading(directions=(), not_covered=(), meta=meta))


def test_the_check_is_said_whether_or_not_it_flags() -> None:
    md = _md({"critical_check": CHECK})
    assert "Critical check: z = 1.30 (threshold 4), 64 + 64 samples: not significant" in md
    flagged = _md({"critical_check": {**CHECK, "z": 9.0, "not_critical": True}})
    assert "z = 9.00 (threshold 4), 64 + 64 samples: θ0 is not a critical point" in flagged


def test_without_labels_the_report_says_the_check_did_not_run() -> None:
    assert "Critical check: not run (the probe data carry no labels)" in _md(
        {"critical_check": None}
    )
    assert "Critical check" not in _md({})  # a reading from before the check: nothing said


def test_the_header_counts_directions_cut_by_detector_caps() -> None:
    """s32 trial TRAIN #9: "53 candidates, 53 read" while caps had cut 27 before they became
    candidates."""
    cuts = [
        {"layers": ["a"], "detector": "kfac-A", "cap": 2, "found": 11, "kept": 2},
        {"layers": ["b"], "detector": "kfac-G", "cap": 2, "found": 20, "kept": 2},
        {
            "layers": ["c"],
            "detector": "norm-scale",
            "cap": 4,
            "found": 9,
            "kept": 4,
            "of": "generators",
        },  # generators, not directions: not counted
    ]
    md = _md({"n_candidates": 5, "n_read": 5, "truncated": cuts})
    assert "5 candidates, 5 read (27 more cut by detector caps: notes below)" in md
    assert "more cut" not in _md({"n_candidates": 5, "n_read": 5})


def test_the_read_line_names_a_hugging_face_directorys_weight_files_and_hashes() -> None:
    """s34 trial REPORT O3: report.json kept the SHA-256 of a directory's model.safetensors and
    report.md did not, so two reads of retrained weights in one directory looked the same."""
    weights = {"path": "/m/model.safetensors", "sha256": "ab" * 32}
    source = {"model": "m", "model_files": [weights], "checkpoint": None, "data": None}
    md = _md({"source": source})
    assert "Read: `--model m`; weights `/m/model.safetensors` (SHA-256 abababababab…)." in md
    assert "weights" not in _md({"source": {**source, "model_files": []}})
