"""The [server] table: listening, workers, client limits and timeouts, what is forwarded."""
from __future__ import annotations

from collections.abc import Sequence

from sluice.config_checks import ConfigError, Table, _bool, _check_keys, _has_ctl, _num, _str


def _names(table: Table, key: str, default: Sequence[str], where: str) -> tuple[str, ...]:
    """A list of header names, lowercased; a trailing ``*`` makes a prefix."""
    value = table.get(key, default)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}.{key} must be a list of header names")
    out = []
    for v in value:
        name = v.lower()
        if not all(c.isalnum() or c in "-_." for c in name.rstrip("*")) or "*" in name[:-1]:
            raise ConfigError(f"{where}.{key}: invalid header name {v!r}")
        out.append(name)
    return tuple(out)


# Client headers forwarded to providers by default: what the request needs, nothing that
# chooses the provider account's organization, project or paid beta features.
DEFAULT_REQUEST_HEADERS = ("content-type", "accept", "user-agent", "anthropic-version",
                           "x-request-id", "x-stainless-*")
# Provider headers relayed to clients by default: none that describe the provider account
# (openai-organization, openai-project, x-ratelimit-*, anthropic-ratelimit-*, set-cookie).
DEFAULT_RESPONSE_HEADERS = ("content-type", "cache-control", "date", "retry-after", "x-request-id",
                            "request-id", "openai-processing-ms", "openai-version")


class ServerConfig:
    KEYS = ("listen", "workers", "backlog", "max_body_bytes", "client_idle_timeout_s",
            "shutdown_grace_s", "validate_json", "overhead_header", "access_log",
            "access_log_flush_s", "metrics", "debug_endpoints", "require_auth",
            "max_pipelined", "max_queued_bytes_per_connection", "max_url_bytes",
            "max_header_bytes", "max_headers", "client_header_timeout_s", "client_body_timeout_s",
            "max_client_connections", "metrics_token", "forward_request_headers",
            "forward_response_headers", "metrics_per_key", "max_sse_frame_bytes", "request_timeout_s",
            "client_send_timeout_s", "key_max_in_flight", "max_held_body_bytes")

    def __init__(self, t: Table) -> None:
        w = "[server]"
        _check_keys(t, self.KEYS, w)
        self.listen = _str(t, "listen", "127.0.0.1:8080", w)
        self.host, self.port = parse_listen(self.listen)
        self.warnings: list[str] = []  # accepted, but probably not meant: said at start (config.load)
        if not self.listen.rpartition(":")[0].strip("[]"):
            self.warnings.append(
                f"{w}.listen = {self.listen!r} names no host: Sluice listens on every address "
                f"({self.host}); write \"{self.host}:{self.port}\" if that is meant, "
                f"\"127.0.0.1:{self.port}\" for this machine only")
        self.workers = _num(t, "workers", 1, w, 1, integer=True)
        self.backlog = _num(t, "backlog", 2048, w, 1, integer=True)
        self.max_body_bytes = _num(t, "max_body_bytes", 4 * 1024 * 1024, w, 1, integer=True)
        self.client_idle_timeout_s = float(_num(t, "client_idle_timeout_s", 75.0, w, 0.01))
        self.shutdown_grace_s = float(_num(t, "shutdown_grace_s", 5.0, w, 0.0))
        self.validate_json = _bool(t, "validate_json", True, w)
        self.overhead_header = _bool(t, "overhead_header", True, w)
        self.access_log = _str(t, "access_log", "", w)
        self.access_log_flush_s = float(_num(t, "access_log_flush_s", 1.0, w, 0.05))
        self.metrics = _bool(t, "metrics", True, w)
        self.debug_endpoints = _bool(t, "debug_endpoints", False, w)
        self.require_auth: bool | None = t.get("require_auth")  # None = "if any key is configured"
        if self.require_auth is not None and not isinstance(self.require_auth, bool):
            raise ConfigError("[server].require_auth must be true or false")
        self.max_pipelined = _num(t, "max_pipelined", 16, w, 1, integer=True, maximum=1024)
        # bodies read ahead of their turn; nginx and HAProxy read none (one request at a time)
        self.max_queued_bytes_per_connection = _num(t, "max_queued_bytes_per_connection",
                                                    2 * 1024 * 1024, w, 0, integer=True)
        # request head limits, as nginx's large_client_header_buffers 4 8k
        self.max_url_bytes = _num(t, "max_url_bytes", 8192, w, 64, integer=True)
        self.max_header_bytes = _num(t, "max_header_bytes", 32768, w, 256, integer=True)
        self.max_headers = _num(t, "max_headers", 100, w, 1, integer=True)
        self.client_header_timeout_s = float(_num(t, "client_header_timeout_s", 30.0, w, 0.01))
        self.client_body_timeout_s = float(_num(t, "client_body_timeout_s", 120.0, w, 0.01))
        # per worker: 10,000 open requests fit one worker, with room for skew between two
        self.max_client_connections = _num(t, "max_client_connections", 16384, w, 1, integer=True,
                                           maximum=1000000)
        self.metrics_token = _str(t, "metrics_token", "", w)
        if _has_ctl(self.metrics_token) or " " in self.metrics_token:
            raise ConfigError(f"{w}.metrics_token must not contain spaces or control characters")
        # key names and spend are shown only to whoever holds the scrape token
        self.metrics_per_key = _bool(t, "metrics_per_key", bool(self.metrics_token), w)
        if self.metrics_per_key and not self.metrics_token:
            raise ConfigError(f"{w}.metrics_per_key = true needs a metrics_token")
        # one provider SSE event (translated streams) may hold at most this many bytes
        self.max_sse_frame_bytes = _num(t, "max_sse_frame_bytes", 1 << 20, w, 1024, integer=True,
                                        maximum=64 << 20)
        # the whole request, every attempt included; a model may set its own
        self.request_timeout_s = float(_num(t, "request_timeout_s", 600.0, w, 0.1, maximum=86400))
        # a client whose pending response bytes see no progress this long is cut (nginx's send_timeout)
        self.client_send_timeout_s = float(_num(t, "client_send_timeout_s", 60.0, w, 0.1, maximum=3600))
        # the max_in_flight of a key that sets none: a quarter of a worker's default provider
        # connections, so that one key's long requests leave room for the others
        self.key_max_in_flight = _num(t, "key_max_in_flight", 4096, w, 0, integer=True, maximum=1000000)
        # request bodies held by a worker at once, arriving or in flight; beyond it, 503
        self.max_held_body_bytes = _num(t, "max_held_body_bytes", 256 << 20, w, 1, integer=True)
        if self.max_held_body_bytes < self.max_body_bytes:
            raise ConfigError(f"{w}.max_held_body_bytes must be >= max_body_bytes (one body must fit)")
        self.forward_request_headers = _names(t, "forward_request_headers", DEFAULT_REQUEST_HEADERS, w)
        self.forward_response_headers = _names(t, "forward_response_headers", DEFAULT_RESPONSE_HEADERS, w)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, digits = text.rpartition(":")
    if not sep or not digits.isdigit():
        raise ConfigError(f"[server].listen must be HOST:PORT, got {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    port = int(digits)
    if not 0 <= port <= 65535:
        raise ConfigError(f"[server].listen port out of range: {port}")
    return host, port
