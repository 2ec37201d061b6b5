"""Writing a report: load a run directory, draw its plots, write `report.html` beside them.

This is the one entry point the CLI calls. The page goes to `DIR/report.html` and the plots to
`DIR/report/*.png`, referenced relatively, so the pair can be copied anywhere together. The page
is written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal.errors import UserError
from shoal.report.load import load_run
from shoal.report.page import render_page
from shoal.report.plots import render_plots
from shoal.report.summary import summarize
from shoal.report.timeline import build_timeline

PAGE_FILE = "report.html"
PLOTS_DIR = "report"


def write_report(directory: str | Path) -> Path:
    """Render the report of the run in `directory`; return the path of `report.html`."""
    directory = Path(directory)
    run = load_run(directory)
    timeline = build_timeline(run)
    target = directory / PAGE_FILE
    tmp = target.with_name(f".{PAGE_FILE}.tmp")
    try:  # a file where DIR/report/ goes, a directory where report.html goes, no permission
        paths = render_plots(run, timeline, directory / PLOTS_DIR)
        images = {name: f"{PLOTS_DIR}/{path.name}" for name, path in paths.items()}
        page = render_page(str(directory), summarize(run), timeline, images)
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        where = exc.filename2 or exc.filename or target  # os.replace: the target
        raise UserError(f"cannot write the report: {where}: {exc.strerror or exc}") from None
    return target
