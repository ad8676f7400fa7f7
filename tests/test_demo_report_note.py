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
