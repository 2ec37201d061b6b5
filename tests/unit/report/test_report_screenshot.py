"""The report as a reader sees it: rendered by headless Chromium, screenshot checked."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shoal.report.screenshot import screenshot

CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_headless_chromium_shows_the_plots(rendered, tmp_path):
    shot = screenshot(rendered / "report.html", tmp_path / "shot.png", chromium=str(CHROMIUM))
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
