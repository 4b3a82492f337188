"""StudyConfig's sections mirror the run: every setting is in one section, and every field of a
RunSpec section comes from the StudyConfig section of the same name, value for value."""
import dataclasses

from harness.model import affinity
from harness.model.affinity import CpuAffinity, Niceness
from harness.model.config import SECTIONS, StudyConfig, from_profile, reads, section_fields
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import LoadShape, MockSettings, WireSettings, make_plan
from harness.run.run import instruments

# RunSpec section -> the StudyConfig sections it is built from.
FED_BY = {LoadShape: ("load", "request", "inflight"), MockSettings: ("mock", "faults"),
          WireSettings: ("wire",)}
# RunSpec section fields computed by the plan rather than read from one setting.
COMPUTED = {LoadShape: {"max_tokens", "spawn_rate_per_s"}, MockSettings: {"faults"},
            WireSettings: set()}


def names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_setting_is_in_exactly_one_section_with_its_type():
    types = {f.name: f.type for f in dataclasses.fields(StudyConfig)}
    held = [flat for section in SECTIONS for flat in section_fields(section).values()]
    assert sorted(held) == sorted(types), "a setting in no section, or in two"
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            assert f.type == types[reads(f)], (cls.__name__, f.name)


def test_runspec_sections_equal_the_config_sections_they_come_from():
    for run_section, sections in FED_BY.items():
        given = [own for section in sections for own in section_fields(section)]
        assert len(given) == len(set(given)), f"{run_section.__name__}: a field in two sections"
        assert set(given) | COMPUTED[run_section] == names(run_section), run_section.__name__
    placement = section_fields("placement")
    for run_section, fields in ((CpuAffinity, affinity.FIELDS), (Niceness, affinity.NICE_FIELDS)):
        assert set(fields) == names(run_section) and set(fields.values()) <= set(placement.values())


def _every_value_its_own():
    """A config in which no two settings of a section share a value, so that a field read from
    the wrong setting shows."""
    return from_profile("faults", gateways=("direct",), users=301, ramp_s=7.0, hold_s=61.0,
                        min_hold_requests=11, max_hold_s=97.0, warmup_s=13.0, warmup_users=3,
                        think_time_s=0.3, request_timeout_s=29.0, stream=True, request_bytes=4096,
                        mock_latency_ms=41.0, mock_workers=2, mock_response_tokens=17,
                        stream_chunks=19, chunk_delay_ms=23.0, fault_scenario="error_burst",
                        fault_start_s=5.0, fault_duration_s=9.0, fault_seed=37,
                        wire_capture_s=3.0, wire_capture_offset_s=1.5, wire_snaplen_bytes=300,
                        cpu_affinity_load="0", cpu_affinity_mock="1", cpu_affinity_system="0-1",
                        nice_load=1, nice_mock=2, nice_system=4)


def _built(config, run, attr: str, run_section) -> None:
    """Every field of the RunSpec section `attr` equals its config section's field, except what
    a lane carries only in that lane (plan.py: the in-flight steps, the fault window, the
    open-loop step length), unset outside it; in the in-flight lane the mock holds each request
    for inflight_hold_s in place of its latency and chunks."""
    unset = set()
    if not config.inflight_steps:
        unset |= set(section_fields("inflight"))
    if not config.fault_scenario:
        unset |= set(section_fields("faults"))
    if not config.open_loop_rates_per_s:
        unset.add("open_loop_step_s")
    replaced = {"latency_ms", "stream_chunks"} if config.inflight_steps else set()
    built = getattr(run, attr)
    for section in FED_BY[run_section]:
        for own, value in dataclasses.asdict(config.section(section)).items():
            if own in unset:
                assert not getattr(built, own), f"{attr}.{own} set outside its lane"
            elif own not in replaced:
                assert getattr(built, own) == value, f"{attr}.{own} from {section}"


def test_the_plan_builds_each_runspec_section_from_its_config_section():
    inflight = from_profile("inflight", gateways=("direct",), inflight_steps=(100, 300),
                            inflight_step_s=47.0, inflight_hold_s=8.0, open_files_limit=4096)
    open_loop = from_profile("open_loop", gateways=("direct",), open_loop_step_s=21.0)
    for config in (_every_value_its_own(), inflight, open_loop):
        run = make_plan(config, {"direct": load_gateway_spec("direct")}, instruments())[0]
        for run_section, attr in ((LoadShape, "load"), (MockSettings, "mock"), (WireSettings, "wire")):
            _built(config, run, attr, run_section)
        for role, flat in affinity.FIELDS.items():
            assert getattr(run.affinity, role) == getattr(config.placement, flat)
        for role, flat in affinity.NICE_FIELDS.items():
            assert getattr(run.nice, role) == getattr(config.placement, flat)
        assert run.open_files_limit == config.placement.open_files_limit


def test_the_serialized_config_stays_flat():
    config = _every_value_its_own()
    assert set(config.to_dict()) == {f.name for f in dataclasses.fields(StudyConfig)}
    assert config.mock.latency_ms == config.to_dict()["mock_latency_ms"] == 41.0
