"""The HTML report in a real browser (headless Chromium: the first screen, the plots, the page
fitting 1,280 × 800) and through papermill (notebooks/report.ipynb on a Jupyter kernel)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from synthetic import RunParams, make_study, write_lane_counts
from test_report import _fmt, _headline, _recompute

from report import build
from report import publish as P

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def report_path(syn):
    return build.build_report(syn.path).path


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium_cmd(exe: str, profile: str, *extra: str) -> list[str]:
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", *extra]


def test_report_renders_in_headless_chromium(report_path, tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed: run scripts/install-test-deps.sh")
    url = report_path.resolve().as_uri()
    shot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(_chromium_cmd(exe, profile, f"--screenshot={shot}",
                                            "--window-size=1400,3000", url),
                              capture_output=True, text=True, timeout=90)
    assert shot.is_file(), done.stderr[-2000:]
    from PIL import Image
    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 3000)
    small = np.asarray(img.resize((350, 750)))
    non_white = (small.min(axis=2) < 240).mean()
    colors = len(np.unique(small.reshape(-1, 3), axis=0))
    assert non_white > 0.05 and colors > 200, (non_white, colors)
    # the banner's yellow is on the first screen
    top = np.asarray(img.crop((0, 0, 1400, 900)))
    yellow = ((top[..., 0] > 250) & (top[..., 1] > 240) & (top[..., 2] < 210)).mean()
    assert yellow > 0.05, yellow

    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(_chromium_cmd(exe, profile, "--dump-dom", url),
                             capture_output=True, text=True, timeout=90).stdout
    assert 'id="banner"' in dom and "Behaviour, not capacity." in dom
    assert 'id="headline-table"' in dom
    assert dom.count('class="plot"') >= 5
    rows = _headline(dom)
    assert set(rows) == {"direct", "nginx", "sluice", "litellm"}


def test_papermill_smoke(syn, tmp_path):
    out = build.build_report_via_notebook(syn.path, out=tmp_path / "nb.html")
    html = out.read_text(encoding="utf-8")
    assert 'id="banner"' in html and 'id="headline-table"' in html
    assert html.count("data:image/png;base64,") >= 5
    assert "render_section" not in html          # exported without code cells
    assert "<script src=" not in html             # no CDN scripts: self-contained
    table = _headline(html)
    assert table["nginx"]["throughput (req/s)"] == _fmt(_recompute(syn.path)["nginx"]["throughput"], 1)


_FIT_PROBE = """<script>
window.addEventListener('load', () => {
  const bottom = id => document.getElementById(id)?.getBoundingClientRect().bottom ?? null;
  document.body.setAttribute('data-fit', JSON.stringify({
    width: innerWidth, scroll: document.documentElement.scrollWidth,
    summary: bottom('summary'), headline: bottom('headline-table'),
    headline_right: document.getElementById('headline-table').getBoundingClientRect().right}));
});
</script>"""


def _seven_systems() -> dict[str, list[RunParams]]:
    """Every runnable system of a standard study, three runs each, LiteLLM far off the rest."""
    def runs(overheads, cpu, rss_mib, rate=180):
        return [RunParams(overhead_ms=o, span_ms=10.0, cpu_cores=cpu, hold_rate=rate,
                          rss_idle=rss_mib // 2 * 2**20, rss_steady=rss_mib * 2**20,
                          rss_peak=rss_mib * 2**20, rss_recovered=rss_mib // 2 * 2**20)
                for o in overheads]
    return {"direct": [RunParams(overhead_ms=o, span_ms=10.0, cpu_cores=None)
                       for o in (0.20, 0.25, 0.30)],
            "nginx": runs((0.78, 0.80, 0.82), 0.20, 48),
            "sluice": runs((0.45, 0.50, 0.55), 0.32, 36),
            "tensorzero": runs((0.9, 1.0, 1.1), 0.8, 90),
            "portkey": runs((2.0, 2.2, 2.4), 3.0, 400),
            "mlflow": runs((40.0, 45.0, 50.0), 1.5, 600, rate=60),
            "litellm": runs((3000.0, 3150.0, 3300.0), 1.4, 1200, rate=60)}


def _fit(exe: str, html: str, tmp_path) -> dict:
    """Where the first screen's parts end at 1,280 × 800 (_FIT_PROBE), in headless Chromium."""
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", _FIT_PROBE + "</body>"))
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(_chromium_cmd(exe, profile, "--hide-scrollbars",
                                           "--window-size=1280,800", "--dump-dom", page.as_uri()),
                             capture_output=True, text=True, timeout=90, check=False).stdout
    return json.loads(re.search(r'data-fit="([^"]*)"', dom).group(1).replace("&quot;", '"'))


def test_first_screen_holds_the_answer_at_1280x800(tmp_path):
    """At 1,280 × 800 the summary and the whole head-to-head table of a seven-system study are
    on the first screen, and nothing makes the page scroll sideways."""
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed: run scripts/install-test-deps.sh")
    s = make_study(tmp_path, params=_seven_systems())
    fit = _fit(exe, build.build_report(s.path).path.read_text(), tmp_path)
    assert fit["width"] == 1280 and fit["scroll"] <= fit["width"], fit
    assert fit["headline_right"] <= fit["width"], fit
    assert fit["summary"] <= 800 and fit["headline"] <= 800, fit


def test_the_published_page_opens_on_the_whole_head_to_head_at_1280x800(tmp_path):
    """The published table has more columns than the report's (net overhead p99 beside p50,
    the counted instructions): all of it, its verdicts included, on the first screen."""
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed: run scripts/install-test-deps.sh")
    s = make_study(tmp_path / "artifacts", params=_seven_systems())
    write_lane_counts(s.path, json.loads((s.path / "manifest.json").read_text())["systems"], {})
    out = tmp_path / "artifacts" / P.PUBLISHED
    P.publish(s.path, {"faults": "not run", "inflight": "not run"}, {}, out)
    fit = _fit(exe, (out / P.PAGE).read_text(), tmp_path)
    assert fit["width"] == 1280 and fit["scroll"] <= fit["width"], fit
    assert fit["headline_right"] <= fit["width"] and fit["headline"] <= 800, fit


def test_the_committed_publication_opens_on_its_whole_head_to_head_at_1280x800(tmp_path):
    """What the repository publishes, as a reader opens it: real figures are wider than any
    synthetic study's ("4.87 ± 0.10 s", "slower ×4,166")."""
    exe = _chromium()
    page = P.ARTIFACTS_DIR / P.PUBLISHED / P.PAGE
    if exe is None or not page.is_file():
        pytest.skip("nothing published yet" if exe else "chromium is not installed")
    fit = _fit(exe, page.read_text(), tmp_path)
    assert fit["width"] == 1280 and fit["scroll"] <= fit["width"], fit
    assert fit["headline_right"] <= fit["width"] and fit["headline"] <= 800, fit
