"""A system's warm-up requests go out at once: each is held by the mock as long as a run's
requests, so one after another they would cost one hold each before every run."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.run.verify import warm_up


def test_warm_up_requests_are_all_open_at_once():
    lock, open_now, most, release = threading.Lock(), [0], [0], threading.Event()

    class Held(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                open_now[0] += 1
                most[0] = max(most[0], open_now[0])
                if most[0] == 5:
                    release.set()
            release.wait(timeout=20)  # held until every warm-up request is open (bounded)
            with lock:
                open_now[0] -= 1
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        warm_up(f"http://127.0.0.1:{server.server_port}", "/v1/chat/completions", "m", {}, 5,
                timeout_s=30)
    finally:
        server.shutdown()
        server.server_close()
    assert most[0] == 5 and open_now[0] == 0
