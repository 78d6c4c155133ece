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
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

import fault_table as ft
import numpy as np
import pyarrow.parquet as pq
import zmq
from conftest import free_ports
from test_consumer_side import UserPush
from users_header import header

from zmqload.analysis.verdicts import fmt_rate, fmt_us
from zmqload.store.record_files import read_search
from test_one_side import UserRep

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


def _cli(*args: str, ok: tuple[int, ...] = (0,)) -> str:
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
    return p.stdout


def _runs_of(root: str, name: str) -> str:
    """The runs of one name under `root`, made the first time they are asked for: their path."""
    d = os.path.join(root, name)
    if os.path.isdir(d):
        return d
    if name == "search1":
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
            d,
            ok=(0, 1),
        )
    elif name == "search2":
        _cli(
            "capacity",
            "--pattern",
            "push-pull",
            "--rcvhwm",
            "10,1000",
            *SEARCH,
            "--out",
            d,
            ok=(0, 1),
        )
    elif name == "max":
        _cli(
            "run",
            "--pattern",
            "push-pull",
            "--size",
            "64",
            "--count",
            "300000",
            "--out",
            d,
            "--quiet",
        )
    elif name == "paced":
        _cli(
            "run",
            "--pattern",
            "push-pull",
            "--rate",
            "5k",
            "--duration",
            "0.5",
            "--out",
            d,
            "--quiet",
        )
    elif name == "failed":
        killed = ft.kill_worker(
            d, "c0", ["--pattern", "push-pull", "--rate", "5k", "--duration", "2.5"]
        )
        assert killed.meta["status"] == "failed", killed.stderr
    elif name == "sweep":
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
            d,
            "--name",
            "hwm",
            "--quiet",
        )
    elif name == "restart":
        # a slow PULL killed with a backlog loses it: the SLO on restarts breaks (exit 3), and the
        # report judges the run by it as `run` did
        _cli(
            "run",
            "--pattern",
            "push-pull",
            "--rate",
            "5k",
            "--duration",
            "2.2",
            "--consumer-delay-us",
            "300",
            "--restart",
            "c0@0.4",
            "--restart-gap-ms",
            "100",
            "--pacing",
            "sleep",
            "--slo-restart-lost",
            "0",
            "--out",
            d,
            "--quiet",
            ok=(3,),
        )
    elif name == "mixed":
        _mixed(d)
    elif name == "consumer":
        _consumer_only(d)
    else:
        raise KeyError(name)
    return d


def _mixed(d: str) -> None:
    """A parent directory as a user keeps one: the capacity search of a REP service of theirs
    (plain pyzmq, 2 ms per answer) in c-capacity/, a run against the same service and a
    push-pull run of zmqload's own beside it."""
    service = UserRep(echo=True, idle_ms=20_000, work_s=0.002)
    said = _cli(
        "capacity",
        "--pattern",
        "req-rep",
        "--role",
        "producer",
        "--producers-connect",
        service.endpoint,
        "--start-rate",
        "200",
        "--probe-duration",
        "0.5",
        "--max-probes",
        "8",
        "--precision",
        "0.5",
        "--max-loss",
        "0",
        "--slo-p99-us",
        "5000000",
        "--min-achieved",
        "0.9",
        "--out",
        os.path.join(d, "c-capacity"),
        ok=(0, 1),  # 1: no answer within --max-probes (a loaded machine): its bracket still is
    )
    with open(os.path.join(os.path.dirname(d), "mixed-capacity.txt"), "w") as f:
        f.write(said)  # what capacity said, read by the words' test
    _cli(
        "run",
        "--pattern",
        "req-rep",
        "--role",
        "producer",
        "--producers-connect",
        service.endpoint,
        "--rate",
        "200",
        "--count",
        "200",
        "--out",
        d,
        "--quiet",
    )
    service.join()
    _cli(
        "run", "--pattern", "push-pull", "--rate", "5k", "--duration", "0.3", "--out", d, "--quiet"
    )


# What the user's producer of the consumer-only run sends: zmqload's header (written with struct,
# docs/RECORDS.md) on seqs 0-999 but SKIPPED, seq 300 twice, then 100 foreign messages.
SKIPPED = set(range(100, 150)) | {700}
FOREIGN = [b"reading %d" % i for i in range(100)]


def _consumer_only(d: str) -> None:
    """`--role consumer` against a user's XPUB (plain pyzmq): header-writing, then foreign."""
    seqs = [s for s in range(1000) if s not in SKIPPED]
    seqs.insert(seqs.index(300), 300)
    (port,) = free_ports(1)
    user = UserPush(
        f"tcp://127.0.0.1:{port}",
        [lambda s=s: header(0, s, time.monotonic_ns()) + b"." * 48 for s in seqs] + FOREIGN,
        kind=zmq.XPUB,
        gap_s=0.0002,
    )
    _cli(
        "run",
        "--role",
        "consumer",
        "--pattern",
        "pub-sub",
        "--consumers-connect",
        f"tcp://127.0.0.1:{port}",
        "--duration",
        "2",
        "--out",
        d,
        "--quiet",
    )
    user.join()
    assert len(user.sent) == len(seqs) + len(FOREIGN)


# shape -> the names of the runs its report is given
SHAPE_RUNS = {
    "demo": ["search1", "max"],
    "one run": ["paced"],
    "unpaced": ["max"],
    # a failed run and a restarted one in one directory (one report and one chromium per width for both)
    "a failed run beside a restarted one": ["failed", "restart"],
    "sweep 2 HWMs x 5 rates": ["sweep"],
    "search over 2 HWMs": ["search2"],
    "search of a service beside other runs": ["mixed"],
    "consumer only": ["consumer"],
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
  // a word of a table drawn on two lines ("consum / er"): letters, digits, _ and . broken apart
  // (a break at a hyphen, a comma, a slash or a plus is one the browser's rules allow)
  const broken = [];
  document.querySelectorAll('td, th').forEach(cell => {
    if (!visible(cell)) return;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[\\w.µ]+/g)) {
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        const lines = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  });
  const out = {tables, images, broken, pageWidth: document.documentElement.scrollWidth,
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
    """page(shape): the report's index.html of that shape, its runs and report made the first time
    it is asked for (a test of a few shapes makes only theirs)."""
    if CHROMIUM is None:
        pytest.skip(
            "no chromium to render the page in (apt-get install chromium; make test-system installs it)"
        )
    root, made = str(tmp_path_factory.mktemp("page")), {}

    def page(shape: str) -> str:
        if shape not in made:
            paths = [_runs_of(os.path.join(root, "runs"), n) for n in SHAPE_RUNS[shape]]
            made[shape] = report(paths, os.path.join(root, "report-" + re.sub(r"\W+", "-", shape)))
        return made[shape]

    return page


@pytest.fixture(scope="session")
def measured(pages, tmp_path_factory):
    """measure(page of shape, width), run once per shape and width in the session: both tests
    read the same measurement (one chromium per page and width, not two)."""
    tmp, found = str(tmp_path_factory.mktemp("measure")), {}

    def get(shape: str, width: int) -> dict:
        if (shape, width) not in found:
            where = os.path.join(tmp, re.sub(r"\W+", "-", shape))
            os.makedirs(where, exist_ok=True)
            found[shape, width] = measure(pages(shape), width, where)
        return found[shape, width]

    return get


SHAPES = tuple(SHAPE_RUNS)


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
    assert m["details"] >= 1 or shape == "consumer only"  # per-run detail is folded
    assert m["broken"] == [], f"words broken across lines at {width} px: {m['broken'][:10]}"


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


def _page_text(page: str) -> str:
    with open(page) as f:
        return f.read()


@pytest.mark.parametrize("shape", SHAPES)
def test_every_link_in_the_page_lands_on_an_anchor_of_it(pages, shape):
    text = _page_text(pages(shape))
    ids = {html.unescape(i) for i in re.findall(r"""\bid=['"]([^'"]+)['"]""", text)}
    links = [html.unescape(h) for h in re.findall(r"""href=['"]#([^'"]*)['"]""", text)]
    assert links or shape == "consumer only", "no link within the page"  # it has no runs table
    assert [h for h in links if h not in ids] == [], (
        f"links to anchors the page lacks ({len(ids)} ids)"
    )


def test_a_search_beside_other_runs_reports_its_probes_as_its_own(pages):
    """The parent of a service's search (c-capacity/) and two other runs: one answer. Every probe
    of the search is among the runs, and the service's verdict is the search's bracket, not "no
    failure" at the one run's rate beside it."""
    page = pages("search of a service beside other runs")
    search_dir = os.path.join(os.path.dirname(os.path.dirname(page)), "runs", "mixed", "c-capacity")
    text = _page_text(page)
    probes = sorted(glob.glob(os.path.join(search_dir, "run=*")))
    assert len(probes) >= 3
    for probe in probes:
        rid = os.path.basename(probe)[len("run=") :].split(".")[0]
        assert f"id='{rid}'" in text, f"probe {rid} is not among the page's runs"
    runs_table = text[text.index("<h2>Runs</h2>") :]
    shown = re.findall(r"<tr><td class='l'><a href='#([^']+)'>", runs_table.split("</table>")[0])
    assert len(shown) == len(probes) + 2, shown
    verdicts = text[text.index("<h2>Capacity verdicts</h2>") :]
    service_row = next(
        v for v in re.findall(r"<div class='\w+'>(.*?)</div>", verdicts) if "req-rep" in v
    )
    # the search's own verdict: its lowest failing rate, never "no failure" at the run beside it
    (search,) = read_search(os.path.join(search_dir, "capacity-search.json")).searches
    assert search.bracket[1] is not None
    assert "no failure up to" not in service_row, service_row
    assert fmt_rate(search.bracket[1] * (search.producers or 1)) in service_row, service_row


def test_a_consumer_only_run_shows_what_the_users_producer_sent(pages, spark):
    """What zmqload's consumer saw of a user's producer: not skipped; the header-writer's holes
    (the seqs it skipped), its duplicate, the foreign messages with their sizes and gaps, and the
    arrivals over time, each held to numpy over the run's Parquet files."""
    from zmqload.analysis.one_side import consumer_sides
    from zmqload.analysis.runs import discover_runs

    page = pages("consumer only")
    text = html.unescape(_page_text(page))
    run_dir = glob.glob(
        os.path.join(os.path.dirname(os.path.dirname(page)), "runs", "consumer", "run=*")
    )[0]
    assert "what your side sent is not seen" not in text  # no longer skipped
    section = text[text.index("Your producer, as zmqload's consumers saw it") :]
    foreign = pq.read_table(os.path.join(run_dir, "foreign")).to_pandas()
    recvs = pq.read_table(os.path.join(run_dir, "recvs")).to_pandas()
    assert len(foreign) == len(FOREIGN) and len(recvs) == 1000 - len(SKIPPED) + 1
    assert f"<td>{len(SKIPPED)}</td>" in section  # holes
    assert "100-149, 700" in section
    assert f"<td class='l'>foreign</td><td>{len(FOREIGN)}</td>" in section.replace("\n", "")
    sizes = sorted(len(m) for m in FOREIGN)
    assert f"{sizes[0]} / {np.percentile(sizes, 50):,.0f} / {sizes[-1]}&nbsp;B" in _page_text(page)
    gaps = np.diff(np.sort(foreign["t_recv_ns"].to_numpy()))
    assert f"max {fmt_us(gaps.max() / 1e3)}" in section
    assert "arrivals of" in section  # the plot over time
    # the arrivals over time: every window's count as numpy bins them
    runs, _ = discover_runs([run_dir])
    (side,) = consumer_sides(spark, runs, 100_000_000)
    t = {"foreign": foreign["t_recv_ns"], "zmqload's header": recvs["t_recv_ns"]}
    w0 = min(int(v.min()) // 100_000_000 for v in t.values())
    for name, times in t.items():
        windows = (times.to_numpy() // 100_000_000 - w0).astype(int)
        counts = np.bincount(windows, minlength=len(side.rates[name]))
        assert [round(r / 10) for _, r in side.rates[name]] == counts.tolist(), name


def test_a_service_search_is_told_in_requests_answers_and_round_trips(pages, monkeypatch):
    """The search of a user's REP service, as capacity prints it and the page and its probe plot
    tell it: requests answered per second and round trips; the service named as what limits it."""
    from zmqload.report import plots

    page = pages("search of a service beside other runs")
    runs = os.path.join(os.path.dirname(os.path.dirname(page)), "runs")
    with open(os.path.join(runs, "mixed-capacity.txt")) as f:
        said = f.read()
    probes = [line for line in said.splitlines() if line.lstrip().startswith("probe")]
    assert len(probes) >= 3, said
    for line in probes:
        assert " req/s " in line and "answered" in line and "msg/s" not in line, line
        assert " us" not in line and " µs" in line, line
    answer = re.search(r"<div class='answer'>(.*?)</div>", _page_text(page), re.S).group(1)
    assert "your service" in answer and "consumer" not in answer, answer
    (search,) = read_search(
        os.path.join(runs, "mixed", "c-capacity", "capacity-search.json")
    ).searches
    figures = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or "png")
    assert plots.search_probes(search, None, "probes") == "png"
    achieved, p99 = figures[0].axes[:2]
    assert achieved.get_ylabel() == "answered req/s" and achieved.get_xlabel() == "offered req/s"
    assert p99.get_ylabel() == "p99 round trip from intended send"


def test_the_restarts_table_says_what_run_json_says(pages):
    """One row per restart, its figures as run.json has them (formatted here, not by the report's
    code), and the run judged by the SLO on restarts it was made with."""
    from zmqload.store.record_files import read_run

    page = pages("a failed run beside a restarted one")
    text = html.unescape(_page_text(page))
    (run_dir,) = glob.glob(
        os.path.join(os.path.dirname(os.path.dirname(page)), "runs", "restart", "run=*")
    )
    record = read_run(run_dir)
    (r,) = record.restarts
    table = text[text.index("<h3>Restarts</h3>") :].split("</table>")[0]
    first = (r.t_first_recv_ns - r.t_up_ns) / 1e6
    recovery = (r.backlog_drained_after_up_ns or r.first_recv_after_up_ns) / 1e6
    cells = ["c0", "1", "kill", f"{r.at_s:.3f}", f"{(r.t_up_ns - r.t_ns) / 1e6:,.0f}"]
    cells += [f"{r.lost:,}", f"{first:,.0f}", f"{recovery:,.0f}"]
    assert r.lost > 0 and "<td>" + "</td><td>".join(cells) + "</td></tr>" in table, table
    with open(os.path.join(os.path.dirname(page), "summary.md")) as f:
        assert f"| {record.run_id} | " + " | ".join(cells) + " |" in f.read()
    assert f"the restart of c0 at {r.at_s:.3f} s lost {r.lost:,}" in text  # the verdict's reason
