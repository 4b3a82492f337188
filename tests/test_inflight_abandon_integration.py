"""The abandon phase at tiny scale with the real processes: 40 streams held open, a quarter left
by their client mid-stream. Direct passes each close to the mock at once; nginx configured with
proxy_ignore_client_abort on (a test fixture) does not notice the client's close and keeps its
stream to the provider until a write to the client fails: after a close the client's kernel
answers the first frame with a reset and the next write fails, so the hop lets go about two
frames later, or at the stream's natural end when fewer frames were left. The streams carry 15
frames, so most closes reach the provider before that end: the time from the client's close to
the provider side's tells the two apart."""
import math
import shutil

import pytest

from harness.model.config import REPO_DIR, from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study
from harness.stats.inflight_lane import inflight_steps
from harness.stats.loading import load_study

pytestmark = [pytest.mark.integration]   # ~40 s: two systems, one 16-s step of 40 streams each
KEEPS = "nginx-keeps-provider"


@pytest.fixture(scope="module")
def waves(tmp_path_factory):
    if shutil.which("nginx") is None:
        pytest.fail("nginx is not installed: make install-competitors")
    systems = tmp_path_factory.mktemp("gateways")
    shutil.copytree(REPO_DIR / "gateways" / "direct", systems / "direct")
    shutil.copytree(REPO_DIR / "tests" / "fixtures" / "gateways" / KEEPS, systems / KEEPS)
    out = tmp_path_factory.mktemp("artifacts")
    config = from_profile("inflight", gateways=["direct", KEEPS], gateways_dir=str(systems),
                          out_dir=str(out), seed=5, runs_per_gateway=1, inflight_steps=(40,),
                          inflight_hold_s=4.0, inflight_step_s=13.0, chunk_delay_ms=250.0,
                          stream=True, inflight_abandon_share=0.25, users=40,
                          locust_processes=1, mock_workers=1, warmup_s=1.0, idle_s=1.0,
                          cooldown_s=0.5, request_timeout_s=10.0, scale="shipped")
    result = run_study(preflight(config), progress=lambda line: None)
    assert [r.status for r in result.records] == ["completed", "completed"], \
        [r.reason for r in result.records]
    steps = inflight_steps(load_study(result.study_dir))
    return {rec["system"]: rec for rec in steps.to_dict("records")}


def test_a_quarter_of_the_open_streams_is_left_and_each_joins_the_mocks_row(waves):
    for rec in waves.values():
        assert 5 <= rec["abandoned"] <= 15, rec            # a quarter of ~40 open
        assert rec["abandon_unmatched"] == 0, rec
        assert rec["failed"] == 0, rec                     # a stream left is not a failure


def test_direct_passes_the_close_on_and_the_hop_that_ignores_it_does_not(waves):
    direct, keeps = waves["direct"], waves[KEEPS]
    figures = {name: (direct[name], keeps[name]) for name in (
        "close_to_provider_p50_ms", "close_to_provider_p99_ms", "never_closed_share",
        "frames_after_leave_per_1000")}
    assert direct["never_closed_share"] == 0.0, figures
    # the hop waits for a failed write, up to two frames (500 ms): far beyond direct's
    assert keeps["close_to_provider_p50_ms"] > max(50.0, 3 * direct["close_to_provider_p50_ms"]), \
        figures
    # the frame its failed write carried was written by the mock after the client had left
    assert keeps["frames_after_leave_per_1000"] > direct["frames_after_leave_per_1000"], figures
    assert not math.isnan(direct["probe_p99_wave_ms"]), direct   # the health probe ran
