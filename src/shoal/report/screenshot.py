"""A screenshot of a report page, taken with headless Chromium, to check what a reader sees.

Used by the screenshot test and `bench/report_screenshot.py`. Chromium runs with a throwaway
profile and every background service off (no network, updates, sync or QUIC), so it only reads
the local page and its PNGs. `--no-sandbox` is needed when running as root in a container.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from shoal.errors import UserError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER_ENV = "SHOAL_BROWSER"  # a browser path or name that overrides the search on PATH
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium() -> str | None:
    """$SHOAL_BROWSER if set (a path, or a name on PATH), else the first Chromium-like browser
    on PATH, or None."""
    chosen = os.environ.get(BROWSER_ENV)
    if chosen:
        return shutil.which(chosen)
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(
    page: str | Path,
    out: str | Path,
    *,
    chromium: str | None = None,
    window_size: tuple[int, int] = (1280, 2000),
    timeout_s: float = 60.0,
) -> Path:
    """Render `page` (an HTML file) in headless Chromium and save a PNG of the window to `out`."""
    browser = chromium or find_chromium()
    if browser is None and os.environ.get(BROWSER_ENV):
        raise UserError(f"{BROWSER_ENV}={os.environ[BROWSER_ENV]!r}: no such browser")
    if browser is None:
        raise UserError(f"no Chromium found on PATH (tried {', '.join(CHROMIUM_NAMES)})")
    page, out = Path(page).resolve(), Path(out).resolve()
    if not page.is_file():
        raise UserError(f"{page}: no such page")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)  # so a stale file never passes for a fresh screenshot
    width, height = window_size
    with tempfile.TemporaryDirectory(prefix="shoal-chromium-") as profile:
        cmd = [
            browser,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={out}",
            f"--window-size={width},{height}",
            page.as_uri(),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise UserError(f"{browser}: no screenshot within {timeout_s:g} s") from None
    if not out.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{browser} wrote no screenshot (exit {proc.returncode}): {last}")
    return out
