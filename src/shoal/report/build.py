"""Writing a report: load a run directory, draw its plots, write `report.html` beside them.

This is the one entry point the CLI calls. The page goes to `DIR/report.html` and the plots to
`DIR/report/*.png`, referenced relatively, so the pair can be copied anywhere together. The page
is written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
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
    """Render the report of the run in `directory`; return the path of `report.html`. The
    plots are drawn into a temporary folder first and moved in place with the page: a write
    that fails (a full disk, no permission) leaves the directory as it was, an earlier report
    included, and names what could not be written."""
    directory = Path(directory)
    run = load_run(directory)
    timeline = build_timeline(run)
    target, plots = directory / PAGE_FILE, directory / PLOTS_DIR
    tmp = target.with_name(f".{PAGE_FILE}.tmp")
    drawn = directory / f".{PLOTS_DIR}.tmp-{os.getpid()}"
    where: Path = plots
    try:  # a file where DIR/report/ goes, a directory where report.html goes, no permission
        paths = render_plots(run, timeline, drawn)
        images = {name: f"{PLOTS_DIR}/{path.name}" for name, path in paths.items()}
        page = render_page(str(directory), summarize(run), timeline, images)
        where = target
        tmp.write_text(page, encoding="utf-8")
        where = plots
        plots.mkdir(exist_ok=True)
        for path in paths.values():  # renames: they need no room on the disk
            os.replace(path, plots / path.name)
        where = target
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        shutil.rmtree(drawn, ignore_errors=True)
        where = exc.filename2 or exc.filename or where  # os.replace: the target
        raise UserError(f"cannot write the report: {where}: {exc.strerror or exc}") from None
    shutil.rmtree(drawn, ignore_errors=True)
    return target
