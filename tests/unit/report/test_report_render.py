"""The rendered report: plots are real PNGs, the page shows them, the summary and the events."""

import errno
import os
import re
import struct
from pathlib import Path

import pytest
from PIL import Image

from shoal.errors import UserError
from shoal.report import build, write_report
from shoal.report.load import load_run
from shoal.report.page import render_page
from shoal.report.plots import _break_at
from shoal.report.summary import summarize
from shoal.report.timeline import build_timeline

PLOTS = ["loss", "throughput", "share", "timeline"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _page(directory: Path) -> str:
    return (directory / "report.html").read_text(encoding="utf-8")


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plots_are_valid_non_blank_pngs(rendered):
    for name in PLOTS:
        path = rendered / "report" / f"{name}.png"
        width, height = _png_size(path)
        assert width >= 800 and height >= 200
        with Image.open(path) as im:
            im.verify()  # checks chunk CRCs: a truncated file fails here
        with Image.open(path) as im:
            colors = im.convert("RGB").getcolors(maxcolors=1 << 16)
            assert colors is None or len(colors) > 20, f"{name} looks blank"


def test_page_references_every_plot_relatively(rendered):
    page = _page(rendered)
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert sources == [f"report/{name}.png" for name in PLOTS]
    for src in sources:
        assert (rendered / src).is_file()


def test_page_is_self_contained(rendered):
    page = _page(rendered).lower()
    assert "<script" not in page and "<link" not in page and "<iframe" not in page
    assert "url(" not in page and "@import" not in page
    assert "http:" not in page and "https:" not in page
    for url in re.findall(r'(?:src|href)="([^"]*)"', page):
        assert url.startswith("report/"), url


def test_page_shows_summary_and_event_table(rendered):
    page = _page(rendered)
    run = load_run(rendered)
    assert run.result.state_sha256 in page
    assert "2 / 1 / 1" in page  # joins / leaves / failures
    table = page[page.index('<table class="events">') :]
    rows = re.findall(r'<tr class="event-(\w+)">', table)
    assert rows == [e.event for e in run.events]
    assert "SIGKILL (injected)" in table
    recover = next(e for e in run.events if e.event == "recover" and e.lost_steps == 1)
    assert f"{recover.recovery_time_s:,.2f}" in table


def test_text_from_the_run_is_escaped(write_metrics):
    evil = "<script>alert(1)</script>"
    directory = write_metrics(
        [
            {"kind": "step", "step": 1, "workers": [{"id": evil, "device": '"><b>'}]},
            {"kind": "membership", "event": "fail", "worker": evil, "detail": evil},
        ],
        result={"consistency": "<i>exact</i>", "workers": ["<u>k80</u>"]},
    )
    run = load_run(directory)
    page = render_page("a&b <dir>", summarize(run), build_timeline(run), {"loss": "a b.png"})
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page
    assert "<u>" not in page and "<dir>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a&amp;b &lt;dir&gt;" in page
    assert 'src="a%20b.png"' in page


def test_empty_run_still_renders(write_metrics):
    directory = write_metrics([""])
    page = write_report(directory).read_text()
    assert "No membership changes" in page
    assert "No <code>result.json</code>" in page
    for name in PLOTS:
        _png_size(directory / "report" / f"{name}.png")


def test_throughput_line_breaks_at_changes():
    xs, ys = _break_at([(1.0, 10.0), (2.0, 11.0), (5.0, 9.0), (6.0, 9.5)], cuts=[2.0])
    assert xs[:2] == [1.0, 2.0] and xs[3:] == [5.0, 6.0]
    assert xs[2] != xs[2] and ys[2] != ys[2]  # NaN separates the segments
    assert _break_at([(1.0, 1.0), (2.0, 2.0)], cuts=[]) == ([1.0, 2.0], [1.0, 2.0])


def test_a_run_of_hundreds_of_workers_draws_sixteen(write_metrics):
    """4,096 workers (the most `shoal run --workers` starts) took 75 s and 1.2 GB: a band and a
    legend entry each, and a timeline 2,250 inches tall; 20,000 never finished."""
    workers = [
        {"id": f"w{i}", "rank": i, "device": "k80", "micro_batches": 1, "micro_batch_time_s": 0.1}
        for i in range(300)
    ]
    step = {"kind": "step", "loss": 1.0, "global_batch_size": 300, "micro_batch_size": 1}
    step |= {"step_time_s": 0.1, "samples_per_s": 2e4, "redone": 0, "generation": 0}
    lines = [{**step, "step": n, "wall_time_s": 1.0 + n, "workers": workers} for n in range(3)]
    directory = write_metrics(lines)
    write_report(directory)
    width, height = _png_size(directory / "report" / "timeline.png")
    assert height < 16 * 0.6 * 100 + 400  # 16 rows, not 300
    assert _png_size(directory / "report" / "share.png")[1] < 600


def test_a_report_the_disk_refuses_leaves_the_directory_as_it_was(write_metrics, monkeypatch):
    directory = write_metrics([])
    before = sorted(directory.rglob("*"))
    real = build.render_plots

    def full(run, timeline, folder):  # the plots drawn, then the disk is full
        real(run, timeline, folder)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(build, "render_plots", full)
    with pytest.raises(UserError, match=f"cannot write the report: {directory}/report: No space"):
        write_report(directory)
    assert sorted(directory.rglob("*")) == before  # no plots, no page, no temporary folder
