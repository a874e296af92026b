"""`jobs report`: the HTML file through the real CLI, opened from a file:// path in headless Chromium.

The store holds testchain (count -> double, no metrics) and reportchain (count -> train -> evaluate:
train logs loss, lr, reward and validation accuracy; evaluate writes an eval report). Chromium
loads the page, and the test reads its console, its laid-out DOM and a screenshot. Without
Chromium the browser checks skip, except under CI, where they must run (dev/test.sh installs
Debian's chromium and graphviz).
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import run_jobs, tree_state
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ENV = {"JOBS_RECIPES": str(FIXTURES / "recipes"),
       "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
RUN_FILL, ART_FILL, CURVE = (0xD6, 0xE6, 0xF5), (0xFB, 0xE3, 0xC4), (0x1F, 0x77, 0xB4)


def need_chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        raise RuntimeError("chromium is not installed: dev/test.sh must `apt-get install -y chromium graphviz` in CI")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


def need_dot() -> None:
    """The graph tests count Graphviz's nodes; test_graph_without_graphviz covers the fallback."""
    if shutil.which("dot"):
        return
    if os.environ.get("CI"):
        raise RuntimeError("graphviz is not installed: dev/test.sh must `apt-get install -y chromium graphviz` in CI")
    pytest.skip("graphviz is not installed (apt-get install -y graphviz)")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report store") / "st 'o' re"
    for args in (("reportchain", "--stage", "all"), ("testchain", "--stage", "count,double")):
        r = run_jobs(root, "submit", *args, env=ENV)
        assert r.code == 0, r.err
    return root


def report(store: Path, target: str, out: Path) -> str:
    r = run_jobs(store, "report", target, "--out", str(out), env=ENV)
    assert r.code == 0, r.err
    assert Path(r.out.strip()) == out.absolute() and out.is_file()
    text = out.read_text()
    # Self-contained: nothing the browser could fetch, and a policy that forbids fetching anyway.
    # (A URL a user wrote into a config value may appear as escaped text, never as markup.)
    tags, refs = markup(text)
    assert not tags & {"script", "link", "iframe", "img", "object", "embed", "base", "image", "foreignobject"}, tags
    assert not refs, refs
    assert "default-src 'none'" in text
    return text


def markup(text: str) -> tuple[set[str], list[str]]:
    """The page's tag names, and every attribute or style that points outside the page."""
    from html.parser import HTMLParser

    tags: set[str] = set()
    refs: list[str] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)
            for name, value in attrs:
                v = (value or "").strip().lower()
                if name != "xmlns" and (re.match(r"(https?:|//|file:|data:)", v) or re.search(r"url\(\s*['\"]?(?!#)", v)):
                    refs.append(f"<{tag} {name}={value}>")

        def handle_data(self, data):
            if self.lasttag == "style" and re.search(r"url\(|@import", data):
                refs.append("style: " + data[:80])

    Collect().feed(text)
    return tags, refs


def chromium(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on the page's file:// URL, with the browser console on stderr."""
    return subprocess.run([need_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                           f"--user-data-dir={tmp / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
                           *args, page.absolute().as_uri()], capture_output=True, text=True, timeout=300)


def console(p: subprocess.CompletedProcess) -> list[str]:
    return [line for line in p.stderr.splitlines() if ":CONSOLE" in line]


MEASURE = """<pre id="measure"></pre><script>
document.getElementById("measure").textContent = JSON.stringify([...document.querySelectorAll("svg.figure")].map(s => {
  const r = s.getBoundingClientRect();
  return {section: s.closest("section").id, w: r.width, h: r.height, nodes: s.querySelectorAll("g.node").length,
          axes: s.querySelectorAll("g[id^=axes_]").length, lines: s.querySelectorAll("g[id^=line2d] path").length,
          text: [...s.querySelectorAll("text")].map(t => t.textContent).join("|")};
}));
</script>"""


#: Each bar of the timeline as the browser laid it out.
MEASURE_BARS = """<pre id="measure"></pre><script>
document.getElementById("measure").textContent = JSON.stringify([...document.querySelectorAll(
    "section#timeline svg.timeline rect.bar")].map(b => {
  const r = b.getBoundingClientRect();
  return {run: b.dataset.run, attempt: +b.dataset.attempt, kind: b.dataset.kind, seconds: +b.dataset.seconds,
          x: r.left, w: r.width, y: r.top, h: r.height};
}));
</script>"""


def laid_out(page: Path, tmp: Path, measure: str = MEASURE) -> list[dict]:
    """Every figure's rendered size and content, measured by the browser on a copy of the page that
    carries a measuring script (the report itself has none, and its policy would block one)."""
    probe = page.with_name("measure-" + page.name)
    text = page.read_text()
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    probe.write_text(text.replace("</body>", measure + "</body>"))
    p = chromium(probe, tmp, "--window-size=1280,1000", "--dump-dom")
    assert p.returncode == 0 and not console(p), console(p) or p.stderr[-2000:]
    found = re.search(r'<pre id="measure">(.*?)</pre>', p.stdout, re.S)
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"'))


def test_the_console_check_sees_errors(tmp_path):
    """The harness can fail: a page with a script error and one fetching past its policy are caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><body><script>console.error('boom'); nosuch();</script></body>")
    assert any("boom" in line for line in console(chromium(bad, tmp_path, "--dump-dom")))
    fetch = tmp_path / "fetch.html"
    fetch.write_text("<!DOCTYPE html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\">"
                     "</head><body><img src=\"https://example.invalid/x.png\"></body>")
    assert any("Content Security Policy" in line for line in console(chromium(fetch, tmp_path, "--dump-dom")))


def test_artifact_report_opens_in_a_browser_with_graph_curves_and_evals(store, tmp_path):
    need_chromium()
    need_dot()
    out = tmp_path / "a report dir" / "eval report.html"
    out.parent.mkdir()
    text = report(store, "reportchain/evaluate/report:latest", out)
    assert not re.search(r"https?://", text)      # no URL at all: the SVGs carry no namespace or DTD links
    s = Store(store)
    idx = s.index()
    ids = {r["stage"]: r["id"] for r in idx.runs(recipe="reportchain")}
    for run in ids.values():                        # every run upstream of the report has its section
        assert f'id="run-{run}"' in text
    assert not any(f'id="run-{r["id"]}"' in text for r in idx.runs(recipe="testchain"))
    # The eval table: results.json of the report, next to the model it scored.
    table = re.search(r'<table class="eval">(.*?)</table>', text, re.S).group(1)
    assert "reportchain/train/model:v1" in table and ">0.75<" in table and ">0.6875<" in table and ">8<" in table
    # Config, environment and attempts of the train run.
    train = text[text.index(f'id="run-{ids["train"]}"'):text.index(f'id="run-{ids["evaluate"]}"')]
    assert "&quot;steps&quot;: 60" in train and s.run(ids["train"]).spec["environment"]["digest"] in train
    assert "<th>attempt</th>" in train and ">#1<" in train and "installed distributions" in train

    # In the browser: no console message at all (the page has no script; a blocked fetch would log).
    shot = tmp_path / "shot.png"
    p = chromium(out, tmp_path, "--window-size=1280,2400", f"--screenshot={shot}")
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    assert not console(p), console(p)

    figures = laid_out(out, tmp_path)
    graph = [f for f in figures if f["section"] == "lineage"]
    curves = [f for f in figures if f["section"] == f"run-{ids['train']}"]
    assert len(graph) == 1 and graph[0]["nodes"] == 6          # 3 runs, 3 artifacts
    assert graph[0]["w"] > 600 and graph[0]["h"] > 40
    for label in ("reportchain/count", "reportchain/train", "reportchain/evaluate", "reportchain/evaluate/report:v1"):
        assert label in graph[0]["text"]
    # One plot per logged series of the train run; the count and evaluate runs have no curve.
    assert len(curves) == 1 and curves[0]["axes"] == 4 and curves[0]["lines"] >= 4
    assert all(k in curves[0]["text"] for k in ("train/loss", "train/lr", "train/reward", "train/val_accuracy"))
    assert curves[0]["w"] > 600 and curves[0]["h"] > 300
    assert len(figures) == 2

    from PIL import Image
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2400)
    colors = img.getcolors(maxcolors=1 << 20)
    count = {c: n for n, c in colors}
    not_white = sum(n for n, c in colors if c != (255, 255, 255))
    assert not_white > 0.05 * 1280 * 2400              # not a blank page
    assert count.get(RUN_FILL, 0) > 3 * 2000 and count.get(ART_FILL, 0) > 3 * 2000   # the graph's boxes, drawn
    assert count.get(CURVE, 0) > 500                   # the curves, drawn


def test_run_and_recipe_reports(store, tmp_path):
    need_dot()
    s = Store(store)
    idx = s.index()
    ids = {r["stage"]: r["id"] for r in idx.runs(recipe="reportchain")}
    # A run: its own section only, and a graph with its ancestry and its outputs' consumers.
    text = report(store, ids["train"][:13], tmp_path / "run.html")
    assert text.count('<section class="run"') == 1 and f'id="run-{ids["train"]}"' in text
    graph = text[text.index('id="lineage"'):text.index('id="eval"')]
    assert graph.count('class="node"') == 6 and "reportchain/evaluate" in graph
    assert "train/val_accuracy" in text
    # A recipe: its newest consistent chain (here the newest run of each stage), and no curves where no
    # stage logged a series.
    hostile = "</pre><script>alert(1)</script><img src=https://example.invalid/x>"
    chain = run_jobs(store, "submit", "testchain", "--stage", "count,double", "--force", "count.steps=2",
                     f"+count.note='{hostile}'", env=ENV)
    assert chain.code == 0, chain.err
    text = report(store, "testchain", tmp_path / "recipe.html")
    newest = {r["stage"]: r["id"] for r in reversed(s.index().runs(recipe="testchain"))}
    assert text.count('<section class="run"') == 2
    assert all(f'id="run-{r}"' in text for r in newest.values())
    assert 'class="curves"' not in text and "no eval-report artifact" in text
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)" in text      # a config value is shown, escaped, never markup


def test_graph_without_graphviz(store, tmp_path):
    """Without `dot` on PATH the graph is drawn with matplotlib: same nodes, still an inline SVG."""
    from jobs import report as rep

    text, _ = rep.build(Store(store), "reportchain/evaluate/report:latest", dot=None)
    graph = text[text.index('id="lineage"'):text.index('id="timeline"')]
    assert graph.count("<svg") == 1 and 'class="node"' not in graph
    for label in ("reportchain/count", "reportchain/train", "reportchain/evaluate", "reportchain/train/model:v1"):
        assert label in graph
    assert not re.search(r"https?://", text)
    page = tmp_path / "mpl.html"
    page.write_text(text)
    if CHROMIUM or os.environ.get("CI"):
        shot = tmp_path / "mpl.png"
        p = chromium(page, tmp_path, "--window-size=1280,900", f"--screenshot={shot}")
        assert p.returncode == 0 and not console(p), console(p) or p.stderr[-2000:]
        from PIL import Image
        count = {c: n for n, c in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)}
        assert count.get(RUN_FILL, 0) > 2000 and count.get(ART_FILL, 0) > 2000


def test_metrics_series_are_read_defensively(tmp_path):
    from jobs.report import read_series

    m = tmp_path / "metrics.jsonl"
    m.write_text("\n".join([
        json.dumps({"step": 1, "time": 1.0, "loss": 3.0, "note": "x", "flag": True}),
        json.dumps({"step": 2, "time": 2.0, "loss": 2.0}),
        json.dumps({"step": 2, "time": 3.0, "loss": 2.5}),         # a resumed attempt logs step 2 again
        json.dumps({"step": 3, "time": 4.0, "loss": float("nan")}),
        '{"step": 4, "loss": 1.', ""]))                           # a torn last line
    assert read_series(m) == {"loss": [(1, 3.0), (2, 2.5)]}
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert read_series(fifo) == {}                                  # never opened: would block
    assert read_series(tmp_path / "absent.jsonl") == {}


@pytest.mark.parametrize("args, says", [
    (("nosuch",), "is not a run ID, an artifact"),
    (("tiny",), "no runs of recipe 'tiny'"),
    (("art_00000000",), "no artifact art_00000000"),
    (("nosuch/x:latest",), "nosuch/x"),
    (("0000-",), "no run 0000-"),
    (("testchain", "--out", "/nonexistent-folder/r.html"), "no folder /nonexistent-folder"),
    (("testchain", "--out", "."), "it is a folder"),
])
def test_bad_input_is_one_line_exit_2_store_unchanged(store, tmp_path, args, says):
    before = tree_state(store)
    r = run_jobs(store, "report", *args, env=ENV)
    assert r.code == 2 and r.out == "" and len(r.err.splitlines()) == 1 and says in r.err, r.err
    assert tree_state(store) == before
    assert not list(tmp_path.glob("*.html"))


def test_a_run_that_never_started_shows_its_pending_input(tmp_path):
    store = tmp_path / "s"
    r = run_jobs(store, "submit", "testchain", "--stage", "count,double", "count.fail=true", env=ENV)
    assert r.code == 1
    runs = {row["stage"]: row for row in Store(store).index().runs()}
    assert runs["count"]["state"] == "FAILED" and runs["double"]["state"] != "SUCCEEDED"
    text = report(store, runs["double"]["id"], tmp_path / "r.html")
    graph = text[text.index('id="lineage"'):text.index('id="eval"')]
    assert "numbers (when it starts)" in graph and 'stroke-dasharray' in graph and "FAILED" in graph


def test_the_timeline_draws_each_attempts_wait_and_phases_to_one_scale(store, tmp_path):
    from jobs.cost import waits

    out = tmp_path / "timeline.html"
    text = report(store, "testchain/double/result:latest", out)
    assert '<section id="timeline">' in text
    s = Store(store)
    idx = s.index()
    (double,) = idx.producer(s.resolve_artifact("testchain/double/result:latest"))
    (count,) = idx.producer(idx.edges_of(double["run"], "in")[0]["artifact"])
    runs = {r: s.run(r) for r in (count["run"], double["run"])}
    laid = laid_out(out, tmp_path, MEASURE_BARS)
    # One bar per recorded wait and phase of every attempt of the chain's runs, with its recorded seconds.
    want = {}
    for v in runs.values():
        for a, w in zip(v.attempts, waits(v)):
            want[v.id, a["attempt"], "queued"] = w["queued"]
            want.update({(v.id, a["attempt"], p): secs for p, secs in a["phases"].items()})
    got = {(b["run"], b["attempt"], b["kind"]): b for b in laid}
    assert set(got) == set(want) and len(laid) == len(got)
    for key, secs in want.items():
        assert got[key]["seconds"] == pytest.approx(secs, abs=1e-6)
    # Laid out to one scale: every bar's width is its seconds times the same pixels per second.
    px_per_s = sum(b["w"] for b in laid) / sum(b["seconds"] for b in laid)
    assert px_per_s > 0
    for b in laid:
        assert b["w"] == pytest.approx(b["seconds"] * px_per_s, abs=0.5), b
        assert b["h"] > 0
    for v in runs.values():   # an attempt's phases follow each other, left to right, on its own row
        mine = [got[v.id, 1, p] for p in ("verify", "stage", "gate", "register")]
        assert [b["x"] for b in mine] == sorted(b["x"] for b in mine) and len({b["y"] for b in mine}) == 1
    up, down = runs[count["run"]], runs[double["run"]]
    assert got[up.id, 1, "stage"]["w"] > 10   # the count stage's second, drawn visibly
    assert got[down.id, 1, "queued"]["y"] > got[up.id, 1, "queued"]["y"]   # the upstream run's row first
