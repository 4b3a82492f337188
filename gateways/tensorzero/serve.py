"""Serve TensorZero's Rust gateway (embedded in the `tensorzero` wheel) over HTTP.

The wheel exposes its gateway as an HTTP server only through `_start_http_gateway`,
which listens on 127.0.0.1:<kernel-chosen port>; bindport.so (LD_PRELOAD, see WHY.md)
turns that into the port the study chose. This process then only waits: every
request is handled by the gateway's own Rust (tokio) threads, never by Python.

usage: python serve.py CONFIG_FILE PORT
"""
import signal
import sys
import threading
from urllib.parse import urlsplit

import tensorzero


def main() -> int:
    config_file, port = sys.argv[1], int(sys.argv[2])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    gateway = tensorzero._start_http_gateway(
        config_file=config_file,
        clickhouse_url=None,
        postgres_url=None,
        valkey_url=None,
        async_setup=False,
    )
    bound = urlsplit(gateway.base_url).port
    if bound != port:
        print(f"tensorzero: gateway bound port {bound}, not {port}: is bindport.so preloaded "
              f"(LD_PRELOAD) with SLUICE_BIND_PORT={port}?", file=sys.stderr, flush=True)
        gateway.close()
        return 2
    print(f"tensorzero: serving {gateway.base_url}", flush=True)
    while not stop.wait(3600):
        pass
    gateway.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
