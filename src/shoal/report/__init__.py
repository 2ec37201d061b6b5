"""Run reports: `metrics.jsonl` and `result.json` of a run directory -> plots and an HTML page.

Pure Python plus matplotlib (imported lazily, Agg renderer); no torch. `load` reads the files
through the schema in `shoal.metrics`, `timeline` and `summary` derive what the page shows,
`plots` draws the PNGs (those only some runs get in `plots_optional`, the look they share in
`plot_style`), `page` writes the HTML and `build.write_report` ties them together for
`shoal report`.
"""

from shoal.report.build import write_report
from shoal.report.load import Run, load_run

__all__ = ["Run", "load_run", "write_report"]
