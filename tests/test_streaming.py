"""The streaming lane for real at smoke scale: frames timed as they arrive, through each system."""
import dataclasses

import pandas as pd
import pytest

from harness import stats
from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study
from report.build import render_report_html

pytestmark = pytest.mark.integration
CHUNKS, GAP_MS = 6, 20.0


@pytest.fixture(scope="module")
def stream_study(tmp_path_factory):
    config = from_profile("smoke", gateways=["direct", "nginx", "sluice"], stream=True,
                          stream_chunks=CHUNKS, chunk_delay_ms=GAP_MS,
                          out_dir=str(tmp_path_factory.mktemp("artifacts")))
    result = run_study(preflight(config), progress=lambda m: None)
    assert [r.status for r in result.records] == ["completed"] * 3, [r.reason for r in result.records]
    return stats.load_study(result.study_dir)


def test_rows_carry_frame_timings(stream_study):
    rows = stream_study.requests
    ok = rows[rows.error_kind == ""]
    assert len(ok) > 20 and (ok.chunks == CHUNKS).all() and ok.stream_done.all()
    assert (ok.chunk_gaps_ms.map(len) == CHUNKS - 1).all()
    # the content each client assembled is what the provider sent: no truncation where none was
    assert (ok.content_chars > 0).all() and (ok.content_chars == ok.content_chars_sent).all()
    assert not (rows.error_kind == "truncated").any()
    # head after ~60 ms, first token with it, the whole stream after the last frame
    assert (ok.ttfb_ms >= 59).all() and (ok.ttft_ms >= ok.ttfb_ms - 1).all()
    assert (ok.latency_ms >= 60 + (CHUNKS - 1) * GAP_MS - 2).all()


def test_summary_sees_no_buffering_and_small_overheads(stream_study):
    table = stats.stream_summary(stream_study).set_index("system")
    assert set(table.index) == {"direct", "nginx", "sluice"}
    for system, row in table.iterrows():
        assert not row.buffered, system
        assert row.gap_p50_ms == pytest.approx(GAP_MS, abs=3.0), system
        assert row.done_share == 1.0 and row.chunks_mean == CHUNKS
        assert row.silent_truncations == 0
    assert table.loc["direct", "ttft_overhead_p50_ms"] == pytest.approx(0.0)


def test_a_buffering_system_is_marked_and_a_lagging_one_only_bunched(stream_study):
    """Frames in one burst at the end of the stream: buffered. Frames in bursts but the first
    one early (a system falling behind under load): bunched, not buffered."""
    rows = stream_study.requests.copy()
    nginx = rows.system == "nginx"
    rows.loc[nginx, "chunk_gaps_ms"] = pd.Series([[0.05] * (CHUNKS - 1)] * int(nginx.sum()),
                                                 index=rows.index[nginx])
    lagging = stats.stream_summary(dataclasses.replace(stream_study, requests=rows))
    row = lagging.set_index("system").loc["nginx"]
    assert row.bunched and not row.buffered
    rows.loc[nginx, "ttft_ms"] = rows.loc[nginx, "latency_ms"] - 1.0
    held = stats.stream_summary(dataclasses.replace(stream_study, requests=rows))
    row = held.set_index("system").loc["nginx"]
    assert row.buffered and not row.bunched


def test_report_has_a_streaming_section(stream_study):
    html = render_report_html(stream_study.path)
    assert 'id="streaming-table"' in html and "Streaming lane" in html
