"""Micro benchmark for tuning Sluice: the same closed-loop load against the provider
directly and through Sluice, on loopback. Not a test and not the study (the study
harness compares against nginx with Locust); this is for quick before/after checks.

    .venv/bin/python gateways/sluice/bench_overhead.py --users 300 --seconds 15 --latency-ms 60
    .venv/bin/python gateways/sluice/bench_overhead.py --upstream mock      # use mocks.server
    .venv/bin/python gateways/sluice/bench_overhead.py --stream --users 100  # SSE responses
    .venv/bin/python gateways/sluice/bench_overhead.py --users 1000 --think-ms 1000 --workers 2 --nginx
    # two builds side by side (a built checkout of the base commit), nginx alternated, 3 rounds:
    .venv/bin/python gateways/sluice/bench_overhead.py --nginx --rounds 3 --base-dir /tmp/base/gateways/sluice

It prints, per system and round: requests/s, latency p50/p99, p50 minus direct p50, Sluice's
self-reported overhead (median), CPU-ms per request of the system's processes, and
their summed peak RSS. The load generator runs in its own process (uvloop + httptools,
keep-alive connections), as does the upstream.
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = sys.executable

BODY = json.dumps({
    "model": "MODEL",
    "messages": [{"role": "system", "content": "You are a helpful assistant."},
                 {"role": "user", "content": "Say hello in a few words."}],
    "max_tokens": 32,
})


def sluice_config(port, upstream_port, workers, validate_json=True, with_key=True, require_auth=None):
    """The Sluice config both benchmarks measure: one provider, an alias, and (``with_key``) a
    virtual key whose rate limit and budget are checked on every request but never reached.
    The provider's key comes from $BENCH_KEY."""
    text = f"""
[server]
listen = "127.0.0.1:{port}"
workers = {workers}
access_log = ""
validate_json = {str(validate_json).lower()}
""" + ("" if require_auth is None else f"require_auth = {str(require_auth).lower()}\n") + f"""
[providers.mock]
base_url = "http://127.0.0.1:{upstream_port}/v1"
api_key_env = "BENCH_KEY"
[models.mock-model]
provider = "mock"
aliases = ["mock-alias"]
"""
    if with_key:
        text += """
[keys.bench]
key = "sk-bench"
models = ["mock-model"]
rpm = 1000000000
token_budget = 1000000000000000
"""
    return text

UNARY_ANSWER = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "mock-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there, friend!"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}).encode()


def free_port():
    """A port nothing listens on, for a process started next: at random below the kernel's
    ephemeral range, where no outgoing connection's source port can take it first."""
    while True:
        port = random.SystemRandom().randrange(10000, 32768)   # never the seeded global one
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


# ------------------------------------------------------------------ fast upstream
def serve_upstream(port, latency_ms, chunks):
    """A minimal provider (raw protocol) so the upstream is never the bottleneck."""
    import uvloop
    from httptools import HttpRequestParser

    unary = UNARY_ANSWER
    unary_resp = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                  % len(unary)) + unary
    frame = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"mock-model",' \
            b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
    frame_chunk = b"%x\r\n%s\r\n" % (len(frame), frame)
    done = b"data: [DONE]\n\n"
    end = b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
    stream_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

    class P(asyncio.Protocol):
        def connection_made(self, t):
            self.t = t
            self.p = HttpRequestParser(self)
            self.body = []

        def data_received(self, d):
            self.p.feed_data(d)

        def on_body(self, b):
            self.body.append(b)

        def on_message_complete(self):
            stream = b'"stream": true' in b"".join(self.body) or b'"stream":true' in b"".join(self.body)
            self.body = []
            loop.call_later(latency_ms / 1000, self.reply, stream)

        def reply(self, stream):
            if self.t.is_closing():
                return
            if not stream:
                self.t.write(unary_resp)
                return
            self.t.write(stream_head + frame_chunk)
            for i in range(1, chunks):
                loop.call_later(0.005 * i, self._w, frame_chunk)
            loop.call_later(0.005 * chunks, self._w, end)

        def _w(self, data):
            if not self.t.is_closing():
                self.t.write(data)

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    srv = loop.run_until_complete(loop.create_server(P, "127.0.0.1", port, backlog=4096))
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    print("ready", flush=True)
    loop.run_forever()
    srv.close()


# ------------------------------------------------------------------ load generator
def run_load(port, path, users, seconds, body, headers, overhead_header, think_s=0.0):
    import uvloop
    from httptools import HttpResponseParser

    req = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
           + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
           + f"content-length: {len(body)}\r\n\r\n").encode() + body.encode()
    lat = []
    ovs = []
    errors = [0]
    ohb = overhead_header.encode().lower()
    stop_at = [0.0]
    measuring = [False]

    class C(asyncio.Protocol):
        def __init__(self, done):
            self.done = done
            self.p = HttpResponseParser(self)

        def connection_made(self, t):
            self.t = t
            self.send()

        def send(self):
            if time.perf_counter() >= stop_at[0]:
                self.t.close()
                return
            self.t0 = time.perf_counter()
            self.t.write(req)

        def data_received(self, d):
            self.p.feed_data(d)

        def on_header(self, name, value):
            if ohb and name.lower() == ohb:
                self.ov = int(value)

        def on_message_begin(self):
            self.ov = None

        def on_message_complete(self):
            if measuring[0]:
                lat.append(time.perf_counter() - self.t0)
                if self.ov is not None:
                    ovs.append(self.ov)
                if self.p.get_status_code() != 200:
                    errors[0] += 1
            if think_s:
                asyncio.get_running_loop().call_later(think_s, self.send)
            else:
                self.send()

        def connection_lost(self, exc):
            if not self.done.done():
                self.done.set_result(None)

    async def main():
        loop = asyncio.get_running_loop()
        warm = 2.0
        stop_at[0] = time.perf_counter() + warm + seconds
        dones = []
        for _ in range(users):
            d = loop.create_future()
            dones.append(d)
            await loop.create_connection(lambda d=d: C(d), "127.0.0.1", port)
        await asyncio.sleep(warm)
        measuring[0] = True
        t0 = time.perf_counter()
        print("measure-start", flush=True)
        await asyncio.sleep(seconds)
        measuring[0] = False
        elapsed = time.perf_counter() - t0
        print("measure-stop", flush=True)
        await asyncio.wait(dones, timeout=10)
        return elapsed

    uvloop.install()
    elapsed = asyncio.run(main())
    lat.sort()
    ovs.sort()
    res = {"n": len(lat), "rps": len(lat) / elapsed, "errors": errors[0],
           "p50_ms": lat[len(lat) // 2] * 1000 if lat else None,
           "p99_ms": lat[int(len(lat) * 0.99)] * 1000 if lat else None,
           "self_overhead_p50_us": ovs[len(ovs) // 2] if ovs else None}
    print("RESULT " + json.dumps(res), flush=True)


# ------------------------------------------------------------------ orchestration
def _tree(pid):
    import psutil
    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return []


def _cpu(procs):
    """(user, system) CPU seconds of the processes."""
    import psutil
    user = system = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            user += t.user
            system += t.system
        except psutil.Error:
            pass
    return user, system


def _rss(procs):
    import psutil
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(name, target_pid, port, path, args, headers, model, overhead_header=""):
    body = BODY.replace("MODEL", model)
    if args.stream:
        body = body[:-1] + ', "stream": true}'
    cmd = [PY, __file__, "--_load", str(port), path, str(args.users), str(args.seconds), body,
           json.dumps(headers), overhead_header, str(args.think_ms / 1000.0)]
    lg = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    procs = _tree(target_pid) if target_pid else []
    cpu0 = None
    peak = 0
    result = None
    for line in lg.stdout:
        if line.startswith("measure-start"):
            procs = _tree(target_pid) if target_pid else []
            cpu0 = _cpu(procs)
            # sample RSS while measuring
            t_end = time.monotonic() + args.seconds
            while time.monotonic() < t_end - 0.3:
                peak = max(peak, _rss(procs))
                time.sleep(0.25)
        elif line.startswith("measure-stop"):
            cpu1 = _cpu(procs)
        elif line.startswith("RESULT "):
            result = json.loads(line[7:])
    lg.wait()
    if result is None:
        raise RuntimeError(f"{name}: load generator failed")
    if target_pid and cpu0 is not None:
        n = max(1, result["n"])
        result["cpu_ms_per_req"] = (cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1]) * 1000 / n
        result["sys_share"] = (cpu1[1] - cpu0[1]) / max(1e-9, cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1])
        result["peak_rss_mb"] = peak / 1e6
    result["system"] = name
    return result


def wait_http(port, path="/health", timeout=15):
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answers on port {port}")


def start_upstream(kind, port, latency_ms):
    """The provider on ``port``: "fast" (the raw one above, never the bottleneck) or "mock"
    (mocks.server); SSE answers have 10 frames. Returns its process, once it listens."""
    if kind == "fast":
        up = subprocess.Popen([PY, __file__, "--_upstream", str(port), str(latency_ms), "10"],
                              stdout=subprocess.PIPE, text=True)
        up.stdout.readline()
        return up
    up = subprocess.Popen([PY, "-m", "mocks.server", "--port", str(port), "--latency-ms",
                           str(latency_ms), "--stream-chunks", "10", "--chunk-delay-ms", "5"],
                          cwd=REPO, stdout=subprocess.DEVNULL)
    wait_http(port)
    return up


def start_sluice(config_text, port, directory, sluice_dir=HERE):
    """Sluice from ``sluice_dir`` with ``config_text`` written in ``directory``, listening on
    ``port``; the provider's key is in $BENCH_KEY. Returns its process, once it answers (stopped
    if it does not)."""
    cfg = os.path.join(directory, "sluice.toml")
    with open(cfg, "w") as f:
        f.write(config_text)
    path = os.pathsep.join(p for p in (sluice_dir, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, BENCH_KEY="sk-provider", PYTHONPATH=path)
    sl = subprocess.Popen([PY, "-m", "sluice", "--config", cfg], env=env)
    try:
        wait_http(port)
    except RuntimeError:
        stop(sl)
        raise
    return sl


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--latency-ms", type=float, default=60)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--think-ms", type=float, default=0.0,
                    help="each user waits this long between calls (the study's paced regime)")
    ap.add_argument("--stream", action="store_true", help="SSE responses (10 frames)")
    ap.add_argument("--upstream", choices=("fast", "mock"), default="fast")
    ap.add_argument("--plain", action="store_true", help="Sluice without key/alias (pure relay)")
    ap.add_argument("--no-validate", action="store_true", help="validate_json = false")
    ap.add_argument("--only", choices=("direct", "nginx", "sluice"), default=None)
    ap.add_argument("--nginx", action="store_true", help="also measure nginx (gateways/nginx template)")
    ap.add_argument("--base-dir", default=None,
                    help="also measure the Sluice of another checkout (its gateways/sluice, built), "
                         "as sluice-base, in the same sitting: an A/B of two builds")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the systems this many times, alternating their order")
    args = ap.parse_args()

    up_port = free_port()
    up = start_upstream(args.upstream, up_port, args.latency_ms)
    up_path = "/v1/chat/completions"
    tmp = tempfile.mkdtemp(prefix="sluice-bench-")
    builds = [("sluice", HERE)] if args.only in (None, "sluice") else []
    if args.base_dir:
        builds.insert(0, ("sluice-base", os.path.abspath(args.base_dir)))
    rounds = []
    try:
        for i in range(args.rounds):
            results = []
            if args.only in (None, "direct"):
                results.append(measure("direct", up.pid, up_port, up_path, args, {}, "mock-model"))
            # alternate the order of the systems from round to round, so that drift in the
            # machine's speed does not always favour the same one
            systems = (["nginx"] if args.only == "nginx" or (args.only is None and args.nginx) else []) + [n for n, _ in builds]
            for name in (systems if i % 2 == 0 else systems[::-1]):
                if name == "nginx":
                    results.append(measure_nginx(up_port, args, tmp))
                else:
                    results.append(measure_sluice(name, dict(builds)[name], up_port, args, tmp))
            print_round(i, args.rounds, results)
            rounds.append(results)
    finally:
        stop(up)
    print_comparison(rounds)


def stop(proc, sig=signal.SIGTERM):
    proc.send_signal(sig)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure_nginx(up_port, args, tmp):
    port = free_port()
    run_dir = tempfile.mkdtemp(prefix="nginx-", dir=tmp)
    with open(os.path.join(REPO, "gateways", "nginx", "nginx.conf.tmpl")) as f:
        text = f.read()
    for k, v in {"port": port, "workers": args.workers, "run_dir": run_dir,
                 "upstream_host": "127.0.0.1", "upstream_port": up_port,
                 "listen_host": "127.0.0.1"}.items():
        text = text.replace("{{" + k + "}}", str(v))
    with open(os.path.join(run_dir, "nginx.conf"), "w") as f:
        f.write(text)
    ng = subprocess.Popen(["nginx", "-p", run_dir + "/", "-c", os.path.join(run_dir, "nginx.conf"),
                           "-g", "daemon off;"])
    try:
        wait_http(port)
        return measure("nginx", ng.pid, port, "/v1/chat/completions", args, {}, "mock-model")
    finally:
        stop(ng, signal.SIGQUIT)


def measure_sluice(name, sluice_dir, up_port, args, tmp):
    """Sluice from ``sluice_dir`` (this one, or a built checkout of another commit)."""
    port = free_port()
    sl = start_sluice(sluice_config(port, up_port, args.workers, not args.no_validate, with_key=not args.plain),
                      port, tempfile.mkdtemp(prefix=name + "-", dir=tmp), sluice_dir)
    try:
        headers = {} if args.plain else {"authorization": "Bearer sk-bench"}
        model = "mock-model" if args.plain else "mock-alias"
        return measure(name, sl.pid, port, "/v1/chat/completions", args, headers, model, "x-gateway-overhead-us")
    finally:
        stop(sl)


def print_round(i, n, results):
    direct = next((r for r in results if r["system"] == "direct"), None)
    print(f"\nround {i + 1} of {n}\n{'system':11} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} "
          f"{'self us':>8} {'cpu ms/req':>10} {'sys %':>6} {'rss MB':>7} {'errors':>6}")
    for r in results:
        extra = (r["p50_ms"] - direct["p50_ms"]) if direct and r is not direct else 0.0
        print(f"{r['system']:11} {r['rps']:8.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {extra:8.2f} "
              f"{r['self_overhead_p50_us'] if r['self_overhead_p50_us'] is not None else '-':>8} "
              f"{r.get('cpu_ms_per_req', float('nan')):10.4f} {r.get('sys_share', float('nan')) * 100:6.0f} "
              f"{r.get('peak_rss_mb', float('nan')):7.1f} "
              f"{r['errors']:6d}", flush=True)


def print_comparison(rounds):
    """CPU per request as ratios taken within each round (the systems ran minutes apart, on the
    same machine), then their mean and spread over the rounds."""
    import statistics

    def ratios(a, b):
        out = []
        for results in rounds:
            by = {r["system"]: r for r in results}
            if a in by and b in by and by[b].get("cpu_ms_per_req"):
                out.append(by[a]["cpu_ms_per_req"] / by[b]["cpu_ms_per_req"])
        return out

    print("\nCPU per request, ratios within each round (mean ± sd over rounds; each round):")
    for a, b in (("sluice", "sluice-base"), ("sluice", "nginx"), ("sluice-base", "nginx")):
        rs = ratios(a, b)
        if rs:
            sd = f"{statistics.stdev(rs):.3f}" if len(rs) > 1 else "n/a (one round)"
            print(f"  {a} / {b}: {statistics.mean(rs):.3f} ± {sd}  ({', '.join(f'{x:.3f}' for x in rs)})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_upstream":
        serve_upstream(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--_load":
        run_load(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6],
                 json.loads(sys.argv[7]), sys.argv[8], float(sys.argv[9]))
    else:
        main()
