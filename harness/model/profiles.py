"""The named presets of a study (`--profile NAME`): each a set of StudyConfig values, the rest
staying at their defaults (harness/model/config.py documents every field)."""

PROFILES: dict[str, dict] = {
    # Tiny: for tests and CI.
    "smoke": dict(users=4, ramp_s=2.0, hold_s=3.0, warmup_s=1.0, warmup_users=1, idle_s=1.0,
                  cooldown_s=1.0, think_time_s=0.1, runs_per_gateway=1, max_hold_s=10.0,
                  ready_timeout_s=30.0),
    # The default: offered load ~900 req/s at the top, within what one Locust process generates.
    "standard": dict(count_lane=True),
    # The counting lane with the smoke runs before it: instructions and system calls per
    # request of every system, which do not depend on the machine (harness/run/count_lane.py).
    "counting": dict(users=4, ramp_s=2.0, hold_s=3.0, warmup_s=1.0, warmup_users=1, idle_s=1.0,
                     cooldown_s=1.0, think_time_s=0.1, runs_per_gateway=1, max_hold_s=10.0,
                     count_lane=True),
    # The same ramp without waiting: every system is pushed to its limit (or Locust's).
    "saturation": dict(think_time_s=0.0),
    # The HeimOS protocol: 0 -> 1,000 users over 5 min 30 s, 3 runs.
    # The measured window is the 30 s held at the top, as in every other profile.
    "published": dict(ramp_s=330.0, think_time_s=0.0),
    # The regression gate's timed check (the counts decide first: harness/verdicts/count_verdict.py):
    # two builds of Sluice side by side, the base commit's (sluice~base, its ref given by
    # `python -m harness gate run` as builds=sluice~base=REF) and this tree's, with nginx as the
    # reference; two short rounds, since it only looks for a latency rise counts cannot see.
    "gate": dict(gateways=("nginx", "sluice~base", "sluice"), gate_base_system="sluice~base",
                 users=50, ramp_s=3.0, hold_s=10.0, warmup_s=2.0, think_time_s=0.05, idle_s=1.0,
                 cooldown_s=1.0, max_hold_s=30.0, runs_per_gateway=2),
    # The study measuring itself: nginx as A and as A' must show no clear difference.
    "aa": dict(gateways=("nginx", "nginx~aa"), aa_pair=("nginx", "nginx~aa"), users=50, ramp_s=5.0, hold_s=20.0, warmup_s=2.0,
               think_time_s=0.05, idle_s=1.0, cooldown_s=2.0, max_hold_s=40.0),
    # The streaming lane: every response an SSE stream of 20 frames 20 ms apart after the head;
    # time to first token and each gap between frames are measured by the load generator.
    "streaming": dict(users=200, ramp_s=30.0, hold_s=30.0, stream=True),
    # Steady load on the in-house gateway, then a long cool-down: RSS, open files and in-flight
    # requests must stay flat and return to idle (python -m harness soak STUDY_DIR).
    "soak": dict(gateways=("sluice",), users=100, ramp_s=5.0, hold_s=120.0, warmup_s=2.0,
                 think_time_s=0.05, cooldown_s=15.0, runs_per_gateway=1, max_hold_s=150.0),
    # The feature-cost lane: Sluice called one feature at a time, interleaved in the same rounds
    # with its passthrough and with the same load straight to the mock in each client dialect,
    # with agent-sized bodies (32 KiB here; request_bytes=307200 for 300 KiB, stream=true for SSE).
    "feature_cost": dict(gateways=("direct@passthrough", "direct@anthropic_to_openai",
                                   "sluice@passthrough", "sluice@alias", "sluice@auth_budget",
                                   "sluice@anthropic_to_openai", "sluice@openai_to_anthropic"),
                         users=20, ramp_s=5.0, hold_s=15.0, warmup_s=2.0, think_time_s=0.25,
                         idle_s=1.0, cooldown_s=2.0, max_hold_s=60.0, request_bytes=32768),
    # Sluice's performance target: closed loop, 300 users, no wait, beside nginx.
    "passthrough": dict(gateways=("direct", "nginx", "sluice"), users=300, ramp_s=10.0,
                        hold_s=30.0, think_time_s=0.0),
    # The open-loop lane: a fixed arrival schedule in steps of offered req/s, each request's
    # intended start recorded, so a slow system cannot hide by being sent less (coordinated
    # omission). 500 users keep 2,400 req/s on schedule up to ~200 ms per request; one Locust
    # process on 2 shared cores generates 2,400 req/s with room to spare.
    "open_loop": dict(gateways=("direct", "nginx", "sluice"), users=500, warmup_s=10.0,
                      ramp_s=0.0, hold_s=0.0, think_time_s=0.0, open_loop_step_s=20.0,
                      open_loop_rates_per_s=(100.0, 200.0, 400.0, 800.0, 1200.0, 1600.0, 2400.0)),
    # The in-flight lane: requests held open like real LLM calls (10 s each at the mock; a stream
    # sends a frame every 2.5 s throughout: at 250 ms, and at 1 s from 5,000 open, the load
    # generator, not the systems, stopped first), 1,000 to 10,000 at once, each step 25 s (its new users spawned over one hold, 2 s to
    # settle, one measured hold, then the abandon phase: streamed, a quarter of the open streams
    # left by their client; one more hold after the last, so its requests are answered); a
    # system that fails a step, or adds over 1 s to it, is not run above it, and a step whose descriptors do not fit the
    # machine's limits is not run. Each system sized for the step as its vendor documents
    # (scale="sized": [scale] in its gateway.toml). Four Locust processes (Locust's master/worker
    # mode) and two mock workers hold 10,000 open streams; direct at each step proves it. Every
    # runnable system (gateways=all).
    "inflight": dict(users=10000, warmup_users=10, warmup_s=5.0, ramp_s=0.0, hold_s=0.0,
                     think_time_s=0.0, inflight_steps=(1000, 2500, 5000, 10000),
                     inflight_step_s=25.0, inflight_hold_s=10.0, chunk_delay_ms=2500.0,
                     inflight_abandon_share=0.25,
                     request_timeout_s=60.0, locust_processes=4, mock_workers=2,
                     wire_capture_s=0.0, idle_s=2.0, cooldown_s=3.0, scale="sized"),
    # The provider-fault lane: the same arrivals for every system (open loop: 100 req/s for 60 s,
    # each request's intended start recorded), the provider failing from 15 s to 45 s
    # (provider_down: 10 s); fault_scenario picks what fails (harness/model/fault_scenarios.py);
    # each system configured for resilience as its vendor recommends (resilience=shipped: as
    # installed). 1,000 users: a request held for seconds (a Retry-After, a backoff, an outage)
    # keeps one busy, and a slot with none free waits in a backlog, measured (they spawn in the
    # warm-up, at 100 a second). No packet capture: the lane's figures are the client's rows and
    # the providers' logs.
    "faults": dict(gateways=("direct", "nginx", "sluice"), users=1000, warmup_s=10.0, ramp_s=0.0,
                   hold_s=0.0, think_time_s=0.0, open_loop_rates_per_s=(100.0,),
                   open_loop_step_s=60.0, idle_s=0.5, cooldown_s=1.0, runs_per_gateway=1,
                   wire_capture_s=0.0,
                   fault_scenario="error_burst", fault_start_s=15.0,
                   resilience="recommended"),
    # The same lane in closed loop (each user waits for its answer, then 0.1 s): a system that
    # fails fast sends its users round sooner, so its clients meet more of a burst; labelled.
    "faults_closed_loop": dict(gateways=("direct", "nginx", "sluice"), users=50, warmup_users=5,
                               think_time_s=0.1, warmup_s=5.0, ramp_s=5.0, hold_s=60.0,
                               max_hold_s=60.0, idle_s=1.0, cooldown_s=2.0, runs_per_gateway=1,
                               fault_scenario="error_burst", fault_start_s=15.0,
                               resilience="recommended"),
}
