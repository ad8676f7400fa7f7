"""The demo says that it is writing its report before the figures are drawn (tens of seconds
after the progress bar ends, with nothing on the screen before)."""

from __future__ import annotations

from neuromanifold import demo
from neuromanifold.demo import DemoConfig


def test_the_demo_says_it_writes_the_report_before_drawing(monkeypatch, tmp_path, capsys):
    seen: list[str] = []

    def fake_jobs(config, timings):
        return {("vit-digits-scratch", "s"): "scratch", ("vit-digits-finetune", "f"): "finetune"}

    def fake_report(result, out):
        seen.append(capsys.readouterr().err)  # what was on stderr when drawing began

    monkeypatch.setattr(demo, "_run_jobs", fake_jobs)
    monkeypatch.setattr("neuromanifold.cells.table.read_cells", lambda cells: [])
    monkeypatch.setattr("neuromanifold.report.demo_report.write_demo_report", fake_report)
    config = DemoConfig(cells=(), progress=True)
    demo.run_demo(tmp_path / "out", config)
    assert len(seen) == 1
    assert "writing report.md, report.json and figures/ into" in seen[0]
    assert str(tmp_path / "out") in seen[0].replace("\n", "")


def test_off_a_terminal_the_demo_says_a_line_per_finished_job(monkeypatch, capsys):
    """s34 trial DEMO D4: with stderr a log file the demo wrote nothing for 11 minutes, then one
    frozen bar. Off a terminal each finished job is a line; on one, the bar stays."""
    monkeypatch.setattr(demo, "_train_job", lambda recipe, config: recipe)
    monkeypatch.setattr(
        demo, "_reads_of", lambda recipe, res, config: [(recipe, f"{recipe}-stage")]
    )
    monkeypatch.setattr(demo, "_read_job", lambda name, stage: (name, stage))
    config = DemoConfig(cells=(), progress=True, workers=1)
    demo._run_jobs(config, {})
    err = capsys.readouterr().err
    for recipe in demo._RECIPES:
        assert f"demo train {recipe} done (" in err
        assert f"demo read {recipe}-stage done (" in err
    monkeypatch.setattr(demo, "_on_terminal", lambda: True)
    demo._run_jobs(config, {})
    assert " done (" not in capsys.readouterr().err
