"""A run with an adaptive batch gets a fifth plot (batch, noise scale, similarity, LR factor
beside the loss); a fixed-batch run does not."""

import json

from shoal.metrics.training import StepLine
from shoal.report import write_report


def _write(directory, adaptive: bool):
    lines = []
    for step in range(12):
        extra = {}
        if adaptive:
            extra = dict(
                noise_scale=20.0 + step,
                similarity=0.3 if step % 5 == 4 else None,
                lr_factor=1.0 if step < 6 else 0.8,
            )
        batch = 64 if not adaptive or step < 6 else 48
        line = StepLine(step=step, loss=2.0 / (step + 1), global_batch_size=batch, **extra)
        lines.append(json.dumps(line.to_json()))
    (directory / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_adaptive_run_plots_its_batch(tmp_path):
    _write(tmp_path, adaptive=True)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert (tmp_path / "report" / "batch.png").stat().st_size > 10_000
    assert "Adaptive batch" in page


def test_fixed_run_has_no_batch_plot(tmp_path):
    _write(tmp_path, adaptive=False)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert not (tmp_path / "report" / "batch.png").exists()
    assert "Adaptive batch" not in page


def test_fields_round_trip_through_the_schema():
    line = StepLine(step=3, noise_scale=12.5, similarity=-0.25, lr_factor=0.5)
    assert StepLine.from_json(line.to_json()) == line
    assert "similarity" not in StepLine(step=3).to_json()  # None: left out, as before
