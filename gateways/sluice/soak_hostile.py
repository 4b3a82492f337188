"""A soak of Sluice under mixed normal and hostile traffic, on loopback.

    .venv/bin/python gateways/sluice/soak_hostile.py                         # 10 minutes
    .venv/bin/python gateways/sluice/soak_hostile.py --minutes 2 --phase-s 30 --workers 2

Sluice (compiled first, unless SLUICE_PURE_PYTHON=1) runs in front of bench_overhead.py's fast
provider (or mocks.server with ``--upstream mock``) and a lying provider (soak_attacks.py). Phases
alternate, normal-only then normal+hostile: in every phase a closed loop of well-formed chat requests
(``--users``, bench_overhead.py's load generator, its latency measured); in hostile phases also
``--hostile-clients`` connections cycling through the raw-socket attacks of the hostile tests
(soak_attacks.ATTACKS), and ``--lying-share`` of the users' count as clients whose requests go
to the lying provider.

The report (printed, and written as JSON to ``--out``): worker deaths (pids of Sluice's
processes that changed), the RSS of Sluice's process tree at launch, after the first phase (warm,
the start), at the end and its growth, per attack class the answers by status, the connections
Sluice closed, and the longest a connection stayed open or unanswered past its deadline; the
normal requests' p50/p99 per phase and their mean ± sd over the phases of each kind; a verdict:
no worker death, RSS growth < 20 MB, every hostile connection answered or closed within its
deadline (plus ``--deadline-slack-s``: Sluice checks client deadlines once a second), and the
hostile phases' mean p99 within the normal-only phases' mean + 2 sd (judged only with two
normal-only phases or more). Load goes to 127.0.0.1 only, and stops by itself.
"""
import argparse
import asyncio
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import bench_overhead as bench
import soak_attacks

SCHEMA_VERSION = 1
MODEL = "mock-alias"
KEY = "sk-bench"
LIAR_KEY = "sk-liar"
RSS_GROWTH_LIMIT_BYTES = 20e6
LOAD_WARMUP_S = 2.0   # bench_overhead's load generator warms up this long before measuring


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="total time of the phases")
    ap.add_argument("--phase-s", type=float, default=60.0, help="length of each phase")
    ap.add_argument("--workers", type=int, default=2, help="Sluice's worker processes")
    ap.add_argument("--users", type=int, default=50, help="concurrent normal clients (closed loop)")
    ap.add_argument("--hostile-clients", type=int, default=len(soak_attacks.ATTACKS),
                    help="concurrent hostile connections in hostile phases")
    ap.add_argument("--lying-share", type=float, default=0.05,
                    help="clients of the lying provider, as a share of --users (0: none)")
    ap.add_argument("--client-timeout-s", type=float, default=5.0,
                    help="Sluice's client_header/body/idle/send timeouts, the attacks' deadlines")
    ap.add_argument("--prompt-deadline-s", type=float, default=2.0,
                    help="deadline of an answer due on arrival (431, 414, 413, 400)")
    ap.add_argument("--provider-timeout-s", type=float, default=3.0,
                    help="the lying provider's response and stream idle timeouts in Sluice")
    ap.add_argument("--deadline-slack-s", type=float, default=1.5,
                    help="lateness allowed past a deadline in the verdict")
    ap.add_argument("--overrun-cap-s", type=float, default=10.0,
                    help="how long an attack waits past its deadline before giving up")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="the provider's latency")
    ap.add_argument("--upstream", choices=("fast", "mock"), default="fast")
    ap.add_argument("--out", default=os.path.join(bench.REPO, "artifacts", "sluice_soak_hostile.json"))
    args = ap.parse_args(argv)
    if args.phase_s < LOAD_WARMUP_S + 1:
        ap.error(f"--phase-s must be at least {LOAD_WARMUP_S + 1:g}")
    return args


def soak_config(port, up_port, liar_port, args):
    """bench_overhead's config (a key, an alias) with the client deadlines under test, the lying
    provider and a key for it."""
    t = args.client_timeout_s
    text = bench.sluice_config(port, up_port, args.workers)
    text = text.replace('access_log = ""\n', f'access_log = ""\nclient_header_timeout_s = {t}\n'
                        f'client_body_timeout_s = {t}\nclient_idle_timeout_s = {t}\n'
                        f'client_send_timeout_s = {t}\n', 1)
    return text + f"""
[providers.liar]
base_url = "http://127.0.0.1:{liar_port}/v1"
api_key = "sk-liar-provider"
response_timeout_s = {args.provider_timeout_s}
stream_idle_timeout_s = {args.provider_timeout_s}
[models.lying-model]
provider = "liar"
[keys.liar]
key = "{LIAR_KEY}"
models = ["lying-model"]
"""


class Watch:
    """Sluice's process tree, sampled in a thread: every pid seen, and the RSS."""

    def __init__(self, pid, workers):
        self.pid = pid
        self.supervised = workers > 1  # the main process serves nothing: its children are the workers
        deadline = time.monotonic() + 15
        while len(self.pids()) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        self.first_pids = self.pids()
        self.seen = set(self.first_pids)
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def pids(self):
        """The worker processes' pids."""
        return {p.pid for p in bench._tree(self.pid) if not (self.supervised and p.pid == self.pid)}

    def rss(self):
        return bench._rss(bench._tree(self.pid))

    def _run(self):
        while not self._stop.wait(0.5):
            self.seen |= self.pids()
            self.peak_rss = max(self.peak_rss, self.rss())

    def stop(self):
        self._stop.set()
        self._thread.join(2)

    @property
    def deaths(self):
        """Worker processes replaced: each restart brings a new pid."""
        return len(self.seen - self.first_pids)


class Tally:
    """Per attack class: attacks, answers by status, closes, the longest overrun."""

    def __init__(self, names):
        self.classes = {n: {"attacks": 0, "answers_by_status": {}, "no_answer": 0, "closed_by_sluice": 0,
                            "left_open": 0, "attacker_errors": 0, "max_overrun_s": 0.0} for n in names}

    def add(self, name, outcome, cap_s):
        c = self.classes[name]
        c["attacks"] += 1
        if outcome.error:
            c["attacker_errors"] += 1
        if outcome.status is None:
            c["no_answer"] += 1
        else:
            key = str(outcome.status)
            c["answers_by_status"][key] = c["answers_by_status"].get(key, 0) + 1
        if outcome.closed:
            c["closed_by_sluice"] += 1
        elif outcome.overrun_s >= cap_s:
            c["left_open"] += 1
        c["max_overrun_s"] = round(max(c["max_overrun_s"], outcome.overrun_s), 3)


async def hostile_clients(port, args, limits, tally, stop):
    """``--hostile-clients`` attack loops and the lying provider's clients, until ``stop``;
    the attacks under way are finished (each is bounded by its deadline and the cap)."""
    rotation = itertools.cycle(soak_attacks.ATTACKS)

    async def attacker():
        while not stop.is_set():
            name = next(rotation)
            tally.add(name, await soak_attacks.Attack(port, limits, KEY, MODEL).run(name), args.overrun_cap_s)

    async def liar_client():
        while not stop.is_set():
            outcome = await soak_attacks.Attack(port, limits, LIAR_KEY, "lying-model").run("lying_provider")
            tally.add("lying_provider", outcome, args.overrun_cap_s)

    n_liars = math.ceil(args.users * args.lying_share) if args.lying_share > 0 else 0
    tasks = [asyncio.ensure_future(attacker()) for _ in range(args.hostile_clients)]
    tasks += [asyncio.ensure_future(liar_client()) for _ in range(n_liars)]
    await stop.wait()
    bound = max(limits.idle_s, limits.body_s, limits.header_s, limits.provider_s) + args.overrun_cap_s + 15
    _, pending = await asyncio.wait(tasks, timeout=bound)
    for t in pending:
        t.cancel()
    return len(pending)


def normal_load(port, seconds, users):
    """One phase of normal traffic: bench_overhead's closed-loop load generator."""
    load_args = argparse.Namespace(stream=False, users=users, seconds=seconds, think_ms=0.0)
    return bench.measure("normal", 0, port, "/v1/chat/completions", load_args,
                         {"authorization": f"Bearer {KEY}"}, MODEL)


async def run_phase(index, kind, port, args, limits, tally):
    t0 = time.monotonic()
    stop = asyncio.Event()
    hostile = None
    if kind == "hostile":
        hostile = asyncio.ensure_future(hostile_clients(port, args, limits, tally, stop))
    load = await asyncio.to_thread(normal_load, port, args.phase_s - LOAD_WARMUP_S, args.users)
    stop.set()
    cancelled = await hostile if hostile is not None else 0
    return {"index": index, "kind": kind, "duration_s": round(time.monotonic() - t0, 2),
            "normal_requests": load["n"], "normal_errors": load["errors"],
            "normal_rps": round(load["rps"], 1),
            "normal_p50_ms": _round(load["p50_ms"]), "normal_p99_ms": _round(load["p99_ms"]),
            "attacks_cancelled": cancelled}


def _round(x, digits=2):
    return None if x is None else round(x, digits)


def _mean_sd(values):
    values = [v for v in values if v is not None]
    if not values:
        return {"phases": 0, "mean": None, "sd": None}
    sd = statistics.stdev(values) if len(values) > 1 else None
    return {"phases": len(values), "mean": _round(statistics.fmean(values)), "sd": _round(sd)}


def latency_summary(phases):
    out = {}
    for kind in ("normal_only", "hostile"):
        ps = [p for p in phases if p["kind"] == kind]
        out[kind] = {"p50_ms": _mean_sd([p["normal_p50_ms"] for p in ps]),
                     "p99_ms": _mean_sd([p["normal_p99_ms"] for p in ps])}
    return out


def judge(report, args):
    """The verdict's criteria: each passes (True), fails (False) or is not judged (None)."""
    growth = report["rss"]["growth_mib"] * 2 ** 20
    overruns = [c["max_overrun_s"] for c in report["attack_classes"].values()]
    left_open = sum(c["left_open"] for c in report["attack_classes"].values())
    lat = report["normal_latency"]
    quiet, noisy = lat["normal_only"]["p99_ms"], lat["hostile"]["p99_ms"]
    p99_ok = None
    bound = None
    if quiet["phases"] >= 2 and noisy["mean"] is not None:
        bound = quiet["mean"] + 2 * quiet["sd"]
        p99_ok = noisy["mean"] <= bound
    criteria = {
        "no_worker_death": {"pass": report["worker_deaths"] == 0, "measured": report["worker_deaths"]},
        "rss_growth_under_20_mb": {"pass": growth < RSS_GROWTH_LIMIT_BYTES,
                                   "measured_mib": report["rss"]["growth_mib"],
                                   "limit_mib": round(RSS_GROWTH_LIMIT_BYTES / 2 ** 20, 2)},
        "connections_within_deadline": {
            "pass": left_open == 0 and max(overruns, default=0.0) <= args.deadline_slack_s,
            "max_overrun_s": max(overruns, default=0.0), "slack_s": args.deadline_slack_s,
            "left_open": left_open},
        "hostile_p99_within_normal_spread": {"pass": p99_ok, "hostile_p99_mean_ms": noisy["mean"],
                                             "normal_only_p99_bound_ms": _round(bound)},
    }
    results = [c["pass"] for c in criteria.values()]
    # one failure fails the soak; otherwise a criterion not judged leaves the verdict open
    overall = False if False in results else (None if None in results else True)
    return {"pass": overall, "criteria": criteria}


async def soak(port, sluice_pid, args):
    limits = soak_attacks.Limits(args.client_timeout_s, args.client_timeout_s, args.client_timeout_s,
                                 args.prompt_deadline_s, args.provider_timeout_s, args.overrun_cap_s)
    tally = Tally(soak_attacks.ATTACKS + ("lying_provider",))
    watch = Watch(sluice_pid, args.workers)
    rss_launch = watch.rss()
    n_phases = max(2, math.ceil(args.minutes * 60 / args.phase_s))
    phases = []
    rss_start = None
    try:
        for i in range(n_phases):
            kind = "normal_only" if i % 2 == 0 else "hostile"
            phases.append(await run_phase(i, kind, port, args, limits, tally))
            print(_phase_line(phases[-1]), flush=True)
            if rss_start is None:
                rss_start = watch.rss()   # warm: after the first normal-only phase
        await asyncio.sleep(2.0)          # lingering closes end
        rss_end = watch.rss()
    finally:
        watch.stop()
    mib = 2 ** 20
    report = {
        "schema_version": SCHEMA_VERSION,
        "config": {k: getattr(args, k) for k in (
            "minutes", "phase_s", "workers", "users", "hostile_clients", "lying_share", "client_timeout_s",
            "prompt_deadline_s", "provider_timeout_s", "deadline_slack_s", "overrun_cap_s", "latency_ms",
            "upstream")},
        "worker_deaths": watch.deaths,
        "worker_pids_start": sorted(watch.first_pids), "worker_pids_seen": sorted(watch.seen),
        "rss": {"launch_mib": round(rss_launch / mib, 2), "start_mib": round(rss_start / mib, 2),
                "end_mib": round(rss_end / mib, 2), "peak_mib": round(watch.peak_rss / mib, 2),
                "growth_mib": round((rss_end - rss_start) / mib, 2)},
        "attack_classes": tally.classes,
        "phases": phases,
        "normal_latency": latency_summary(phases),
    }
    report["verdict"] = judge(report, args)
    return report


def _phase_line(p):
    return (f"phase {p['index']:2d} {p['kind']:11s} {p['duration_s']:6.1f} s  normal: {p['normal_requests']:6d} req "
            f"{p['normal_errors']:4d} err  p50 {p['normal_p50_ms']} ms  p99 {p['normal_p99_ms']} ms")


def print_report(r):
    print(f"\nworker deaths: {r['worker_deaths']}   RSS (MiB): launch {r['rss']['launch_mib']}, "
          f"start {r['rss']['start_mib']}, end {r['rss']['end_mib']}, growth {r['rss']['growth_mib']}, "
          f"peak {r['rss']['peak_mib']}")
    print(f"\n{'attack class':24} {'attacks':>7} {'closed':>6} {'open':>5} {'no ans':>6} {'overrun s':>9}  answers")
    for name, c in r["attack_classes"].items():
        print(f"{name:24} {c['attacks']:7d} {c['closed_by_sluice']:6d} {c['left_open']:5d} {c['no_answer']:6d} "
              f"{c['max_overrun_s']:9.2f}  {c['answers_by_status']}")
    print("\nnormal latency, mean ± sd over phases:")
    for kind, s in r["normal_latency"].items():
        print(f"  {kind:12} p50 {s['p50_ms']['mean']} ± {s['p50_ms']['sd']} ms   "
              f"p99 {s['p99_ms']['mean']} ± {s['p99_ms']['sd']} ms   ({s['p99_ms']['phases']} phases)")
    print(f"\nverdict: {({True: 'PASS', False: 'FAIL', None: 'OPEN'})[r['verdict']['pass']]}")
    for name, c in r["verdict"]["criteria"].items():
        mark = {True: "ok", False: "FAIL", None: "not judged"}[c["pass"]]
        detail = ", ".join(f"{k}={v}" for k, v in c.items() if k != "pass")
        print(f"  {mark:10} {name}: {detail}")


def build_sluice():
    """Compile the hot path (idempotent) unless SLUICE_PURE_PYTHON=1; whether Sluice will run
    compiled."""
    if os.environ.get("SLUICE_PURE_PYTHON") != "1":
        subprocess.run([bench.PY, os.path.join(bench.HERE, "build.py")], check=True, capture_output=True)
    done = subprocess.run([bench.PY, "-c", "import sluice; print(sluice.compiled)"], cwd=bench.HERE,
                          check=True, capture_output=True, text=True)
    return done.stdout.strip() == "True"


def main(argv=None):
    args = parse_args(argv)
    compiled = build_sluice()
    up_port, liar_port, port = bench.free_port(), bench.free_port(), bench.free_port()
    up = liar = sl = None
    tmp = tempfile.mkdtemp(prefix="sluice-soak-")
    try:
        up = bench.start_upstream(args.upstream, up_port, args.latency_ms)
        liar = subprocess.Popen([bench.PY, __file__, "--_lying", str(liar_port), str(args.latency_ms)],
                                stdout=subprocess.PIPE, text=True)
        liar.stdout.readline()
        sl = bench.start_sluice(soak_config(port, up_port, liar_port, args), port, tmp)
        report = asyncio.run(soak(port, sl.pid, args))
        report["sluice_compiled"] = compiled
    finally:
        for proc in (sl, liar, up):
            if proc is not None:
                bench.stop(proc)
    print_report(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nreport written to {args.out}")
    return report


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_lying":
        soak_attacks.serve_lying_provider(int(sys.argv[2]), float(sys.argv[3]))
    else:
        main()
