"""A run with an exchange across sites (--compress, two sites) gets a 'link' plot (measured
rate, keep ratio, step and exchange time); its step lines keep the link fields through the
schema; a run without one gets no such plot."""

import json

from shoal.metrics.training import StepLine
from shoal.report import write_report


def _write(directory, compressed: bool):
    lines = []
    for step in range(12):
        link = {}
        if compressed:  # the rate falls at step 6, the keep ratio follows at step 7
            keep = 1.0 if step < 7 else 0.125
            link = dict(keep_ratio=keep, link_mbit_s=900.0 if step < 6 else 90.0)
            link.update(sent_bytes=int(1e6 * keep), exchange_s=0.01 if step != 6 else 0.1)
        line = StepLine(step=step, loss=1.0, step_time_s=0.1, **link)
        assert StepLine.from_json(line.to_json()) == line
        lines.append(json.dumps(line.to_json()))
    (directory / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_a_compressed_run_plots_its_link(tmp_path):
    _write(tmp_path, compressed=True)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert (tmp_path / "report" / "link.png").stat().st_size > 10_000
    assert "Across slow links" in page


def test_a_dense_run_has_no_link_plot(tmp_path):
    _write(tmp_path, compressed=False)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert not (tmp_path / "report" / "link.png").exists()
    assert "Across slow links" not in page
