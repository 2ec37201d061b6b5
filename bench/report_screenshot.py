"""Render a run report and screenshot it in headless Chromium; print one JSON line.

    .venv/bin/python bench/report_screenshot.py [DIR] [--out PNG] [--chromium PATH]

With no DIR, a synthetic elastic run (a failure, two joins, a graceful leave) is written to a
temporary directory first, by the report tests' fixture (tests/unit/report/synthetic_run.py).
The JSON line gives the paths and how long rendering and the screenshot took, so a slow report
shows up in the benchmark history.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from shoal.errors import UserError
from shoal.report import write_report
from shoal.report.screenshot import CHROMIUM_NAMES, screenshot

# the synthetic run is a test fixture, not library code: load it from the report tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from unit.report.synthetic_run import write_synthetic_run  # noqa: E402

MIN_STEPS = 8  # the synthetic run's scripted events fit in no fewer


def _window(text: str) -> tuple[int, int]:
    """WIDTHxHEIGHT in pixels, each at least 1 (argparse type)."""
    try:
        width, height = (int(x) for x in text.lower().split("x"))
    except ValueError:
        width = height = 0
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"must look like 1280x2000, got {text!r}")
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("directory", nargs="?", help="run directory (None: a synthetic run)")
    parser.add_argument("--out", help="screenshot path (None: DIR/report_screenshot.png)")
    parser.add_argument(
        "--chromium",
        help="browser binary (None: $SHOAL_BROWSER, else the first of "
        f"{', '.join(CHROMIUM_NAMES)} on PATH)",
    )
    parser.add_argument("--steps", type=int, default=40, help="steps of the synthetic run")
    parser.add_argument(
        "--window", type=_window, default="1280x2000", help="window size WIDTHxHEIGHT"
    )
    args = parser.parse_args(argv)
    width, height = args.window
    if args.directory and not Path(args.directory).is_dir():
        parser.error(f"no run directory {args.directory!r}")
    if not args.directory and args.steps < MIN_STEPS:
        parser.error(
            f"--steps must be at least {MIN_STEPS} (the synthetic run's events), not {args.steps}"
        )
    if args.chromium and shutil.which(args.chromium) is None:
        parser.error(f"--chromium: no browser {args.chromium!r} (not an executable, nor on PATH)")
    if args.out and Path(args.out).is_dir():
        parser.error(f"--out: {args.out} is a directory")

    if args.directory:
        directory = Path(args.directory)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="shoal-report-"))
        directory = write_synthetic_run(tmp / "run", num_steps=args.steps)
    try:
        t0 = time.perf_counter()
        page = write_report(directory)
        t1 = time.perf_counter()
        out = Path(args.out) if args.out else directory / "report_screenshot.png"
        shot = screenshot(page, out, chromium=args.chromium, window_size=(width, height))
        t2 = time.perf_counter()
    except UserError as exc:
        print(f"report_screenshot: error: {exc}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "report": str(page),
                "screenshot": str(shot),
                "render_s": round(t1 - t0, 3),
                "screenshot_s": round(t2 - t1, 3),
                "window": [width, height],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
