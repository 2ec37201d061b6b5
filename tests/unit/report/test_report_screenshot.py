"""The report as a reader sees it: rendered by headless Chromium, screenshot checked."""

import numpy as np
import pytest
from PIL import Image

from shoal.report.screenshot import CHROMIUM_NAMES, find_chromium, screenshot

CHROMIUM = find_chromium()


@pytest.mark.skipif(
    CHROMIUM is None,
    reason=f"no browser: set $SHOAL_BROWSER or put one of {CHROMIUM_NAMES} on PATH",
)
def test_headless_chromium_shows_the_plots(rendered, tmp_path):
    shot = screenshot(rendered / "report.html", tmp_path / "shot.png", chromium=CHROMIUM)
    assert shot.stat().st_size > 10_000
    with Image.open(shot) as im:
        assert im.size == (1280, 2000)
        rgb = im.convert("RGB")
    lo, hi = zip(*rgb.getextrema(), strict=True)
    assert max(hi) - min(lo) > 100, "the screenshot is a single flat colour"
    # The page chrome is black, grey and white; strongly coloured pixels come from the plots
    # (the loss curve's event lines, the share plot's bands), so they prove the PNGs loaded.
    pixels = np.asarray(rgb, dtype=np.int16)
    coloured = int(((pixels.max(axis=2) - pixels.min(axis=2)) > 80).sum())
    assert coloured > 30_000, f"only {coloured} coloured pixels: plots missing?"


def test_shoal_browser_overrides_the_search(monkeypatch, tmp_path):
    fake = tmp_path / "my-browser"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SHOAL_BROWSER", str(fake))
    assert find_chromium() == str(fake)
    monkeypatch.setenv("SHOAL_BROWSER", str(tmp_path / "absent"))
    assert find_chromium() is None
