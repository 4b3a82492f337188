"""The in-flight lane's abandon phase on synthetic rows with known answers: the time from a
client's close to the provider side's, the share never closed, the frames sent after the client
left, the descriptors kept and the RSS after the wave, the health probe's p99 during it; the wave
itself (which streams a process closes) and the load generator's stop rule."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.model.inflight import abandon_phase_s, added_p99_ms
from harness.run.loadgen.abandon import Streams
from harness.stats import inflight_abandon as A
from harness.stats.inflight_lane import step_windows

WINDOW_END = 100.0
PHASE_END = 103.0
WINDOW = {"window_start_t_unix_s": 90.0, "window_end_t_unix_s": WINDOW_END}


def _wave(n: int, close_after_ms: float | None, frames_after: int, kept: int = 0):
    """n streams opened at 95 s, each left by its client at 100 s after 2 frames; the mock saw
    each close ``close_after_ms`` later (None: never, the stream ran to its end) and wrote
    ``frames_after`` frames beyond the client's."""
    rows = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "start_t_unix_s": 95.0,
                         "latency_ms": 5000.0, "abandoned_t_unix_s": WINDOW_END,
                         "chunks": 2})
    closed = 0 if close_after_ms is None else int((WINDOW_END + close_after_ms / 1e3) * 1e9)
    mock = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)],
                         "client_closed_t_unix_ns": closed, "frames_sent": 2 + frames_after})
    return rows, mock


def _samples(fds_after: float, rss_after_mib: float):
    t = np.array([101.5, 102.5])
    return pd.DataFrame({"role": "system", "t_unix_s": t, "num_fds": fds_after,
                         "rss_bytes": rss_after_mib * A.MIB})


def _figures(rows, mock, samples=None, probes=None):
    samples = samples if samples is not None else _samples(10.0, 50.0)
    probes = probes if probes is not None else pd.DataFrame({"t_unix_s": [], "latency_ms": []})
    return A.wave_figures(rows, mock, samples, probes, WINDOW, PHASE_END, idle_fds=10.0,
                          window_fds=10.0 + 2 * len(rows), window_open=float(len(rows)),
                          window_rss_mib=50.0)


def test_a_close_passed_on_at_once_is_its_delay_and_leaks_no_frame():
    rows, mock = _wave(4, close_after_ms=3.0, frames_after=0)
    f = _figures(rows, mock)
    assert f["abandoned"] == 4 and f["abandon_unmatched"] == 0
    assert f["close_to_provider_p50_ms"] == pytest.approx(3.0, abs=1e-3)
    assert f["close_to_provider_p99_ms"] == pytest.approx(3.0, abs=1e-3)
    assert f["never_closed_share"] == 0.0 and f["frames_after_leave_per_1000"] == 0.0


def test_a_provider_stream_kept_to_its_end_is_never_closed_and_its_frames_leak():
    rows, mock = _wave(4, close_after_ms=None, frames_after=2)
    f = _figures(rows, mock)
    assert f["never_closed_share"] == 1.0
    assert math.isnan(f["close_to_provider_p99_ms"])
    assert f["frames_after_leave_per_1000"] == 2000.0


def test_the_p99_of_the_delays_and_the_share_never_closed_mix():
    rows, mock = _wave(100, close_after_ms=10.0, frames_after=0)
    mock.loc[mock.index[:10], "client_closed_t_unix_ns"] = 0           # 10 never closed
    mock.loc[mock.index[10:20], "client_closed_t_unix_ns"] = int((WINDOW_END + 0.5) * 1e9)
    f = _figures(rows, mock)
    assert f["never_closed_share"] == pytest.approx(0.10)
    assert f["close_to_provider_p50_ms"] == pytest.approx(10.0, abs=1e-2)
    assert f["close_to_provider_p99_ms"] == pytest.approx(500.0, abs=1e-1)


def test_a_stream_the_mock_never_saw_is_counted_apart():
    rows, mock = _wave(4, close_after_ms=1.0, frames_after=0)
    f = _figures(rows, mock.iloc[:3])
    assert f["abandon_unmatched"] == 1 and f["never_closed_share"] == 0.0


def test_descriptors_kept_are_those_beyond_idle_and_the_streams_still_open():
    rows, mock = _wave(4, close_after_ms=1.0, frames_after=0)
    still = pd.DataFrame({"request_id": ["s0", "s1"], "start_t_unix_s": 99.0, "latency_ms": 8000.0,
                          "abandoned_t_unix_s": math.nan, "chunks": 1})
    both = pd.concat([rows, still], ignore_index=True)
    # at the window: 6 open, 10 idle + 2 per open stream; after: 2 open, so 14 expected
    f = A.wave_figures(both, mock, _samples(fds_after=17.0, rss_after_mib=48.0),
                       pd.DataFrame({"t_unix_s": [], "latency_ms": []}), WINDOW, PHASE_END,
                       idle_fds=10.0, window_fds=22.0, window_open=6.0, window_rss_mib=50.0)
    assert f["fds_expected_after_wave"] == pytest.approx(14.0)
    assert f["fds_kept_after_wave"] == pytest.approx(3.0)
    assert f["rss_change_after_wave_mib"] == pytest.approx(-2.0)


def test_the_health_probe_during_the_wave_against_the_seconds_before():
    rows, mock = _wave(4, close_after_ms=1.0, frames_after=0)
    t = np.arange(96.0, 103.0, 0.1)
    latency = np.where(t >= WINDOW_END, 400.0, 2.0)
    f = _figures(rows, mock, probes=pd.DataFrame({"t_unix_s": t, "latency_ms": latency}))
    assert f["probe_p99_before_ms"] == pytest.approx(2.0)
    assert f["probe_p99_wave_ms"] == pytest.approx(400.0)


def test_no_stream_left_gives_no_figure_but_the_count():
    rows, mock = _wave(3, close_after_ms=1.0, frames_after=0)
    rows["abandoned_t_unix_s"] = math.nan
    f = _figures(rows, mock)
    assert f["abandoned"] == 0 and math.isnan(f["close_to_provider_p50_ms"])


def test_the_measured_window_ends_where_the_abandon_phase_begins():
    (w,) = step_windows(0.0, 30.0, (100,), step_s=25.0, hold_s=10.0, phase_s=3.0)
    assert (w["window_start_t_unix_s"], w["window_end_t_unix_s"], w["step_end_t_unix_s"]) == \
        (12.0, 22.0, 25.0)
    assert abandon_phase_s(SimpleNamespace(stream=True, inflight_abandon_share=0.25)) == 3.0
    assert abandon_phase_s(SimpleNamespace(stream=False, inflight_abandon_share=0.25)) == 0.0


class _Pool:
    def __init__(self):
        self.released = []

    def release_socket(self, sock):
        self.released.append(sock)


def _response(pool):
    return SimpleNamespace(_response=SimpleNamespace(_sock=object(), _pool=pool))


def test_a_wave_closes_its_share_of_the_open_streams_and_they_wait_for_the_next_step():
    pool, streams = _Pool(), Streams(seed=7)
    users = [object() for _ in range(8)]
    for u in users:
        streams.open(u, _response(pool))
    assert streams.abandon(step=1, share=0.25, resume_t=123.0) == 2
    assert len(pool.released) == 2
    left = [u for u in users if streams.close(u) is not None]
    assert len(left) == 2
    again = Streams(seed=7)
    for u in users:
        again.open(u, _response(_Pool()))
    again.abandon(step=1, share=0.25, resume_t=123.0)
    assert [u for u in users if again.close(u) is not None] == left   # the seed chooses
    assert streams.close(users[0]) is None   # a stream it read to the end was not left


def test_the_load_generator_stops_above_a_step_that_added_over_the_limit():
    hold_s = 10.0
    before = {10000: 5}
    after = {10000: 5 + 98, 10100: 1, 11500: 1}   # 100 answers since: the 99th at 10,100 ms
    assert added_p99_ms(before, after, hold_s) == pytest.approx(100.0)
    after[11500] += 5                              # now 6 of 105 at 11,500 ms
    assert added_p99_ms(before, after, hold_s) == pytest.approx(1500.0)
    assert added_p99_ms(after, after, hold_s) is None
