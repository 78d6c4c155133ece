"""The page a person reads (issue 26 item 3), measured in a real headless browser.

Six shapes of report, made once from real runs (real libzmq over loopback tcp) and real reports
(the report command in this process, on the test session's local Spark): the demo's (a capacity
search over one HWM and an unpaced run), one paced run, one unpaced run, a failed run (its
consumer SIGKILLed), a sweep of 2 HWMs x 5 rates (every rate in its
summary's "rates tested" cell), a capacity search over 2 HWMs. Each page is
opened in Debian's headless `chromium` at 1400 and 900 px with a measuring script added to a copy
of it; `--dump-dom` returns what the script found. It fails on an image that did not decode
(natural width 0), a table wider than its box where the box does not scroll, a page wider than
the window, and, for the search shapes, the answer and its probe plot not in the first screen.
Without chromium the test skips with one line.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import fault_table as ft

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTHS = (1400, 900)
FIRST_SCREEN_PX = 900  # the height of the window the answer must show in
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)
# A consumer doing 200 us of work per message tops out near 5k/s: the searches find a knee in a
# few 0.3 s probes (from 2k, to 50%: a ramp, a failing probe, a bisection and the confirming re-run
# in 4-6 probes; the per-probe table is folded, so its length does not move the first screen),
# and the sweep's 8k and 16k rates fail.
SEARCH = [
    "--consumer-delay-us",
    "200",
    "--start-rate",
    "2k",
    "--probe-duration",
    "0.3",
    "--precision",
    "0.5",
    "--slo-p99-us",
    "50000",
    "--quiet",
]


def _cli(*args: str, ok: tuple[int, ...] = (0,)) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(
        [sys.executable, "-m", "zmqload", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert p.returncode in ok, (p.stdout[-2000:], p.stderr[-2000:])


def make_runs(root: str) -> dict[str, list[str]]:
    """The runs of every shape under `root`: shape -> the report's input paths."""
    d = {
        name: os.path.join(root, name)
        for name in ("search1", "search2", "max", "paced", "failed", "sweep")
    }
    _cli(
        "capacity",
        "--pattern",
        "pub-sub",
        "--sndhwm",
        "1000",
        "--rcvhwm",
        "1000",
        *SEARCH,
        "--out",
        d["search1"],
        ok=(0, 1),
    )
    _cli(
        "capacity",
        "--pattern",
        "push-pull",
        "--rcvhwm",
        "10,1000",
        *SEARCH,
        "--out",
        d["search2"],
        ok=(0, 1),
    )
    _cli(
        "run",
        "--pattern",
        "push-pull",
        "--size",
        "64",
        "--count",
        "300000",
        "--out",
        d["max"],
        "--quiet",
    )
    _cli(
        "run",
        "--pattern",
        "push-pull",
        "--rate",
        "5k",
        "--duration",
        "0.5",
        "--out",
        d["paced"],
        "--quiet",
    )
    killed = ft.kill_worker(
        d["failed"], "c0", ["--pattern", "push-pull", "--rate", "5k", "--duration", "2.5"]
    )
    assert killed.meta["status"] == "failed", killed.stderr
    _cli(
        "sweep",
        "--pattern",
        "push-pull",
        "--rcvhwm",
        "10,1000",
        "--rate",
        "1k,2k,4k,8k,16k",
        "--duration",
        "0.3",
        "--consumer-delay-us",
        "100",
        "--out",
        d["sweep"],
        "--name",
        "hwm",
        "--quiet",
    )
    return {
        "demo": [d["search1"], d["max"]],
        "one run": [d["paced"]],
        "unpaced": [d["max"]],
        "failed": [d["failed"]],
        "sweep 2 HWMs x 5 rates": [d["sweep"]],
        "search over 2 HWMs": [d["search2"]],
    }


def report(paths: list[str], out: str) -> str:
    """The real report command, in this process (the session's Spark): the page's path."""
    from zmqload.cli import report as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.run(parser.parse_args([*paths, "--out", out, "--no-server"])) == 0
    return os.path.join(out, "index.html")


# Run in the page once it has loaded: every figure of the checks below, as JSON in a <pre>.
MEASURE = """<script>
window.addEventListener('load', () => {
  const folded = document.body.scrollHeight, details = document.querySelectorAll('details').length;
  const answerTop = (e => e ? e.getBoundingClientRect().top + scrollY : null)(document.querySelector('.answer'));
  const probePlot = [...document.querySelectorAll('img')].filter(i => i.alt.startsWith('probes of'))
    .map(i => i.getBoundingClientRect().top + scrollY);
  document.querySelectorAll('details').forEach(d => { d.open = true; });     // what a click opens must fit too
  const boxOf = t => t.parentElement;
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const visible = el => el.getClientRects().length > 0;
  const tables = [...document.querySelectorAll('table')].filter(visible).map(t => ({
    head: (t.querySelector('tr') || t).innerText.slice(0, 60), width: t.scrollWidth,
    box: boxOf(t).clientWidth, boxScrolls: scrolls(boxOf(t)), boxWidth: boxOf(t).getBoundingClientRect().width}));
  const images = [...document.querySelectorAll('img')].map(i => ({alt: i.alt, natural: i.naturalWidth,
    shown: i.getBoundingClientRect().width}));
  const out = {tables, images, pageWidth: document.documentElement.scrollWidth,
    viewWidth: document.documentElement.clientWidth, height: folded, opened: document.body.scrollHeight,
    answerTop, probePlot, details};
  const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def measure(page: str, width: int, tmp: str) -> dict:
    """The page at `width` px in headless chromium, measured by MEASURE (a copy of the page with it)."""
    with open(page) as f:
        text = f.read()
    copy = os.path.join(tmp, f"measure-{width}.html")
    with open(copy, "w") as f:
        f.write(text.replace("</body>", MEASURE + "</body>"))
    p = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{FIRST_SCREEN_PX}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            "file://" + copy,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="measured">(.*?)</pre>', p.stdout, re.S)
    assert found, (p.returncode, p.stderr[-2000:])
    return json.loads(html.unescape(found.group(1)))


def screenshot(page: str, width: int, png: str, height: int = FIRST_SCREEN_PX) -> None:
    """The page at `width` x `height` px as a PNG (for a person to look at)."""
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            "--virtual-time-budget=10000",
            "file://" + page,
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="session")
def pages(spark, tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip(
            "no chromium to render the page in (apt-get install chromium; make test-system installs it)"
        )
    root = str(tmp_path_factory.mktemp("page"))
    shapes = make_runs(os.path.join(root, "runs"))
    return {
        name: report(paths, os.path.join(root, "report-" + re.sub(r"\W+", "-", name)))
        for name, paths in shapes.items()
    }


@pytest.fixture(scope="session")
def measured(pages, tmp_path_factory):
    """measure(page of shape, width), run once per shape and width in the session: both tests
    read the same measurement (one chromium per page and width, not two)."""
    tmp, found = str(tmp_path_factory.mktemp("measure")), {}

    def get(shape: str, width: int) -> dict:
        if (shape, width) not in found:
            where = os.path.join(tmp, re.sub(r"\W+", "-", shape))
            os.makedirs(where, exist_ok=True)
            found[shape, width] = measure(pages[shape], width, where)
        return found[shape, width]

    return get


SHAPES = ("demo", "one run", "unpaced", "failed", "sweep 2 HWMs x 5 rates", "search over 2 HWMs")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_the_page_fits_and_every_plot_has_data(measured, shape, width):
    m = measured(shape, width)
    assert m["pageWidth"] <= m["viewWidth"], (
        f"the page is {m['pageWidth']} px wide in a {width} px window"
    )
    for t in m["tables"]:
        assert t["boxScrolls"] or t["width"] <= t["box"], (
            f"table {t['head']!r}: {t['width']} px in a {t['box']} px box"
        )
        assert t["boxWidth"] <= m["viewWidth"], t
    assert m["images"], "no plot at all"
    for i in m["images"]:
        assert i["natural"] > 0, f"plot {i['alt']!r} did not decode"
        assert 0 < i["shown"] <= m["viewWidth"], i
    assert m["details"] >= 1  # per-run detail is folded


@pytest.mark.parametrize("shape", ("demo", "search over 2 HWMs"))
def test_the_answer_and_its_probe_plot_are_in_the_first_screen(measured, shape):
    for width in WIDTHS:
        m = measured(shape, width)
        assert m["answerTop"] is not None and m["answerTop"] < FIRST_SCREEN_PX / 3, (
            width,
            m["answerTop"],
        )
        # the search table above it, and the plot's axes at least (250 px of it) on the screen
        assert m["probePlot"] and m["probePlot"][0] < FIRST_SCREEN_PX - 250, (width, m["probePlot"])
