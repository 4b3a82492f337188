"""Sluice's Python hot path alone: microseconds of interpreter work per request, no sockets.

A client connection and a pooled provider connection are wired to in-memory transports; each
iteration feeds one request to the client side and one response to the provider side, exactly
as uvloop would, so everything Sluice's own code does per request runs, and nothing else (no
system calls, no event loop, caches warm). Use it to see what a change to the hot path costs
before measuring it for real with bench_overhead.py or the study: the real per-request cost is
larger (cold caches, uvloop, the kernel), but it moves with this one.

    .venv/bin/python gateways/sluice/bench_hotpath.py              # key + alias (as the study runs)
    .venv/bin/python gateways/sluice/bench_hotpath.py --plain      # no key, provider model name
    .venv/bin/python gateways/sluice/bench_hotpath.py --profile    # cProfile of the same loop
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class MemoryTransport:
    """What the protocols call on a transport; writes are counted, not sent."""

    def __init__(self):
        self.writes = 0
        self.last = b""

    def write(self, data):
        self.writes += 1
        self.last = data

    def writelines(self, parts):
        self.writes += 1

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        pass

    def abort(self):
        pass

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1)

    def is_closing(self):
        return False


def build(args):
    import uvloop
    from bench_overhead import BODY, UNARY_ANSWER, sluice_config

    from sluice.client import ClientConn
    from sluice.config import load
    from sluice.server import App
    from sluice.shared import Shared
    from sluice.upstream import UpstreamConn

    os.environ.setdefault("BENCH_KEY", "sk-provider")  # never sent: no socket is opened
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        # the key is configured either way; --plain requests simply do not present it
        f.write(sluice_config(1, 9, args.workers, not args.no_validate, with_key=True, require_auth=False))
    try:
        cfg = load(f.name)
    finally:
        os.unlink(f.name)
    loop = uvloop.new_event_loop()
    app = App(cfg, loop, Shared(len(cfg.keys), args.workers), 0, args.workers)
    body = BODY.replace("MODEL", "mock-model" if args.plain else "mock-alias").encode()
    auth = b"" if args.plain else b"authorization: Bearer sk-bench\r\n"
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nuser-agent: bench\r\n"
               b"accept: */*\r\ncontent-type: application/json\r\n" + auth
               + b"content-length: %d\r\n\r\n" % len(body) + body)
    answer = UNARY_ANSWER
    response = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: 1\r\n"
                b"content-length: %d\r\n\r\n" % len(answer) + answer)
    pool = next(iter(app.providers.values())).pool
    upstream = UpstreamConn(pool)
    upstream_t = MemoryTransport()
    upstream.connection_made(upstream_t)
    pool.idle.append(upstream)
    client = ClientConn(app)
    client_t = MemoryTransport()
    client.connection_made(client_t)

    def one():
        client.data_received(request)
        upstream.data_received(response)

    one()
    if not client_t.last.startswith(b"HTTP/1.1 200 ") or upstream_t.writes != 1:
        sys.exit(f"bench_hotpath: the exchange did not complete: {client_t.last[:200]!r}")
    return one


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=50000, help="per repetition (best of 5 is reported)")
    ap.add_argument("--workers", type=int, default=2, help="as configured (shared-memory slots)")
    ap.add_argument("--plain", action="store_true", help="no key, the provider's model name")
    ap.add_argument("--no-validate", action="store_true", help="validate_json = false")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the loop instead")
    args = ap.parse_args()
    one = build(args)
    for _ in range(2000):
        one()
    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.runcall(lambda: [one() for _ in range(args.requests)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    best = min(_timed(one, args.requests) for _ in range(5))
    what = "plain relay" if args.plain else "key + alias"
    print(f"{best * 1e6:.2f} us of Python per request ({what}; best of 5 x {args.requests})")


def _timed(one, n):
    t = time.perf_counter()
    for _ in range(n):
        one()
    return (time.perf_counter() - t) / n


if __name__ == "__main__":
    main()
