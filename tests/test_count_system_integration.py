"""The counting with the real parts at tiny scale: Sluice under callgrind and strace, in lockstep
with the provider; the counts see what they must (a write more, a refusal that never goes on);
the counting lane counts nginx and keeps the systems it cannot count."""
import pytest

from harness.files.readers import read_counts
from harness.model.count_cases import CountCase, Sizes, families
from harness.model.gateway_spec import load_gateway_spec
from harness.run.count_lane import run_count_lane
from harness.run.count_system import count_system, tools_missing
from harness.run.systems import install
from harness.stats.count_table import lane_frame

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
TINY = Sizes(warmup=5, n1=20, n2=60, syscall_n1=20, syscall_n2=60)
CASES = (CountCase("plain", "passthrough"), CountCase("stream", "", stream=True),
         CountCase("refused", "refused"), CountCase("nothing", "no_such_feature"))


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    if tools_missing():
        pytest.fail(tools_missing())
    spec = load_gateway_spec("sluice")
    work = tmp_path_factory.mktemp("count")
    installed = install(spec, work / "install.log")   # as a study does: instant when current
    assert installed.ok, installed.message
    plain = count_system(spec, CASES, work, "head", sizes=TINY, progress=lambda _: None)
    extra = count_system(spec, CASES[:1], work, "write", sizes=TINY, progress=lambda _: None,
                         extra_env={"SLUICE_TEST_EXTRA_WRITE": "1"})
    return plain, extra


def test_every_declared_case_is_counted_and_a_missing_feature_says_so(counted):
    plain, _ = counted
    assert not plain.failed, plain.failed
    by = {c.case: c for c in plain.cases}
    assert by["nothing"].missing == "sluice declares no feature 'no_such_feature'"
    for name in ("plain", "stream", "refused"):
        c = by[name]
        assert c.instructions_per_request and c.instructions_per_request > 1000, c
        assert c.allocations_per_request and c.allocations_per_request > 1, c
        assert c.rss_bytes and c.rss_bytes > 10_000_000
    assert by["plain"].statuses == {"200": 80} and by["refused"].statuses == {"401": 80}
    # one read of the request and one of the provider's answer; a streamed answer adds a read
    # and a write per frame (lockstep: every frame alone); a refusal never reaches the provider
    f = {name: families(by[name].syscalls_per_request) for name in ("plain", "stream", "refused")}
    assert f["plain"]["reads"] == pytest.approx(2.0) and f["plain"]["writes"] == pytest.approx(2.0)
    assert f["stream"]["reads"] == pytest.approx(13.0) and f["stream"]["writes"] == pytest.approx(13.0)
    assert f["refused"]["reads"] == pytest.approx(1.0) and f["refused"]["writes"] == pytest.approx(1.0)
    assert by["stream"].instructions_per_request > by["plain"].instructions_per_request


def test_one_more_write_a_request_is_counted(counted):
    plain, extra = counted
    assert not extra.failed, extra.failed
    before = families(plain.case("plain").syscalls_per_request)["writes"]
    after = families(extra.case("plain").syscalls_per_request)["writes"]
    assert after - before == pytest.approx(1.0)


def test_the_lane_counts_nginx_and_keeps_each_system_it_cannot_count_with_the_reason(tmp_path):
    specs = {name: load_gateway_spec(name) for name in ("nginx", "direct", "bifrost")}
    path = run_count_lane(specs, {"nginx": "nginx 1.22"}, {"bifrost": "not runnable here"}, "c",
                          tmp_path, TINY, progress=lambda _: None)
    frame = lane_frame(read_counts(path)).set_index(["system", "case"])
    for case in ("plain", "stream"):
        row = frame.loc[("nginx", case)]
        assert row["instructions_per_request"] > 1000 and row["reads_per_request"] >= 1, row
    assert (frame.loc[("nginx", "stream"), "instructions_per_request"]
            > frame.loc[("nginx", "plain"), "instructions_per_request"])
    assert "starts no process of its own" in frame.loc[("direct", ""), "missing"]
    assert frame.loc[("bifrost", ""), "missing"] == "not run in this study: not runnable here"
