"""Counters and histograms kept as plain Python ints in each worker.

Observing is a dict update or a bisect; rendering (GET /metrics) sums this
worker's live values with the other workers' latest snapshots (published about
once a second through shared memory) and prints the Prometheus text format.
"""
from bisect import bisect_left
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from collections.abc import Sequence  # noqa: F401 (type comments)
    from typing import Any

    # gauges by metric name: a series of ([label name, label value, ...], value) points
    Gauges = dict[str, list[tuple[list[str], int]]]
    # ... summed over the workers: by the labels, as a tuple
    GaugeSums = dict[str, dict[tuple[str, ...], int]]
    # a worker's snapshot as another worker decodes it (JSON, as ``Metrics.snapshot`` writes it)
    Snapshot = dict[str, Any]

OVERHEAD_BUCKETS = (0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                    0.01, 0.025, 0.05, 0.1)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0, 120.0)


class Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds):
        # type: (tuple[float, ...]) -> None
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, v):
        # type: (float) -> None
        self.counts[bisect_left(self.bounds, v)] += 1
        self.sum += v

    def dump(self):
        # type: () -> list[list[int] | float]
        return [self.counts, self.sum]

    def add(self, dumped):
        # type: (Sequence[Any]) -> None
        counts, total = dumped
        mine = self.counts
        for i, c in enumerate(counts[:len(mine)]):
            mine[i] += c
        self.sum += total


class Metrics:
    def __init__(self):
        # type: () -> None
        self.requests = {}  # type: dict[tuple[str, int], int]  # (model, status) -> count
        self.in_flight = 0
        self.overhead = Histogram(OVERHEAD_BUCKETS)
        self.upstream_latency = {}  # type: dict[str, Histogram]  # provider -> Histogram (request sent -> response head)
        self.stream_relay = Histogram(LATENCY_BUCKETS)  # response head -> end of stream
        self.upstream_errors = {}  # type: dict[tuple[str, str], int]  # (provider, kind) -> count
        self.upstream_connects = {}  # type: dict[str, int]  # provider -> count
        self.client_disconnects = 0  # client gone before its response was complete
        self.connections_refused = 0  # over max_client_connections
        self.tokens = {}  # type: dict[tuple[str, str], int]  # (key, kind) -> count
        self.changes = 0            # bumped on every request, to skip idle snapshots
        self.retries = {}  # type: dict[str, int]  # failure class -> retries made
        self.retry_budget_exhausted = 0  # retries refused by the retry budget
        self.fallbacks = {}  # type: dict[tuple[str, str], int]  # (from model, to model) -> count
        self.ejections = {}  # type: dict[tuple[str, str], int]  # (model, provider) -> deployments ejected
        self.retries_in_flight = 0  # requests waiting (backoff, Retry-After) before another attempt

    def count_request(self, model, status):
        # type: (str, int) -> None
        k = (model, status)
        r = self.requests
        r[k] = r.get(k, 0) + 1
        self.changes += 1

    def upstream_error(self, provider, kind):
        # type: (str, str) -> None
        k = (provider, kind)
        self.upstream_errors[k] = self.upstream_errors.get(k, 0) + 1

    def latency_hist(self, provider):
        # type: (str) -> Histogram
        h = self.upstream_latency.get(provider)
        if h is None:
            h = self.upstream_latency[provider] = Histogram(LATENCY_BUCKETS)
        return h

    # -- snapshots for the other workers --
    def snapshot(self, gauges):
        # type: (Gauges) -> bytes
        return orjson.dumps({
            "requests": [[m, s, n] for (m, s), n in self.requests.items()],
            "in_flight": self.in_flight,
            "overhead": self.overhead.dump(),
            "upstream_latency": {p: h.dump() for p, h in self.upstream_latency.items()},
            "stream_relay": self.stream_relay.dump(),
            "upstream_errors": [[p, k, n] for (p, k), n in self.upstream_errors.items()],
            "upstream_connects": self.upstream_connects,
            "client_disconnects": self.client_disconnects,
            "connections_refused": self.connections_refused,
            "tokens": [[k, kind, n] for (k, kind), n in self.tokens.items()],
            "retries": self.retries,
            "retry_budget_exhausted": self.retry_budget_exhausted,
            "fallbacks": [[a, b, n] for (a, b), n in self.fallbacks.items()],
            "ejections": [[a, b, n] for (a, b), n in self.ejections.items()],
            "retries_in_flight": self.retries_in_flight,
            "gauges": gauges,
        })

    @staticmethod
    def merged(live, live_gauges, snapshots):
        # type: (Metrics, Gauges, Sequence[Snapshot]) -> tuple[Metrics, GaugeSums]
        """A fresh Metrics (plus gauges) summing ``live`` and decoded snapshots."""
        m = Metrics()
        gauges = {}  # type: GaugeSums
        sources = [(live_snapshot_dict(live), live_gauges)]  # type: list[tuple[Snapshot, Gauges]]
        for s in snapshots:
            sources.append((s, s.get("gauges", {})))
        for s, g in sources:
            for model, status, n in s["requests"]:
                m.requests[(model, status)] = m.requests.get((model, status), 0) + n
            m.in_flight += s["in_flight"]
            m.overhead.add(s["overhead"])
            for p, h in s["upstream_latency"].items():
                m.latency_hist(p).add(h)
            m.stream_relay.add(s["stream_relay"])
            for p, k, n in s["upstream_errors"]:
                m.upstream_errors[(p, k)] = m.upstream_errors.get((p, k), 0) + n
            for p, n in s["upstream_connects"].items():
                m.upstream_connects[p] = m.upstream_connects.get(p, 0) + n
            m.client_disconnects += s["client_disconnects"]
            m.connections_refused += s.get("connections_refused", 0)
            for k, kind, n in s["tokens"]:
                m.tokens[(k, kind)] = m.tokens.get((k, kind), 0) + n
            for k, n in s.get("retries", {}).items():
                m.retries[k] = m.retries.get(k, 0) + n
            m.retry_budget_exhausted += s.get("retry_budget_exhausted", 0)
            m.retries_in_flight += s.get("retries_in_flight", 0)
            for a, b, n in s.get("fallbacks", []):
                m.fallbacks[(a, b)] = m.fallbacks.get((a, b), 0) + n
            for a, b, n in s.get("ejections", []):
                m.ejections[(a, b)] = m.ejections.get((a, b), 0) + n
            for name, series in g.items():
                dst = gauges.setdefault(name, {})
                for labels, v in series:
                    key = tuple(labels)
                    dst[key] = dst.get(key, 0) + v
        return m, gauges


def live_snapshot_dict(m):
    # type: (Metrics) -> Snapshot
    return orjson.loads(m.snapshot({}))  # type: ignore[no-any-return]  # the JSON snapshot() writes


def _esc(v):
    # type: (object) -> str
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _hist_lines(out, name, h, labels=""):
    # type: (list[str], str, Histogram, str) -> None
    cum = 0
    sep = "," if labels else ""
    for bound, c in zip(h.bounds, h.counts):
        cum += c
        out.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {cum}')
    cum += h.counts[-1]
    out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {cum}')
    lb = "{" + labels + "}" if labels else ""
    out.append(f"{name}_sum{lb} {h.sum:.9g}")
    out.append(f"{name}_count{lb} {cum}")


GAUGE_HELP = {
    "sluice_client_connections": "Open client connections.",
    "sluice_upstream_connections": "Upstream connections by provider and state (idle, busy, connecting).",
    "sluice_asyncio_tasks": "asyncio tasks alive (only upstream connects use tasks).",
    "sluice_workers": "Worker processes reporting.",
    "sluice_resident_memory_bytes": "Resident memory summed over the reporting workers.",
    "sluice_request_body_bytes_held": ("Request body bytes held (arriving, queued, in flight) and provider "
                                       "answers buffered to be translated, summed over the reporting workers."),
    "sluice_key_tokens_reserved": "Tokens reserved by in-flight requests, by virtual key.",
    "sluice_key_tokens_spent": "Tokens spent in the current budget period, by virtual key.",
    "sluice_ejected_deployments": "Deployments ejected by passive health now (1) or admitted (0), by model and provider.",
    "sluice_requests_held": "Requests held through an outage of their model's providers (waiting for a probe to succeed, or to be released), by model.",
}


HELP = {  # the metrics every scrape has: name -> (type, help text)
    "sluice_requests_total": ("counter", "Requests answered, by model and HTTP status."),
    "sluice_requests_in_flight": ("gauge", "Chat requests being served."),
    "sluice_overhead_seconds": ("histogram",
        "Time Sluice added before the response head (its own work, not time waiting on the provider)."),
    "sluice_upstream_latency_seconds": ("histogram", "Provider time from request sent to response head."),
    "sluice_stream_relay_seconds": ("histogram", "Streaming responses: response head to last byte relayed."),
    "sluice_upstream_errors_total": ("counter", "Provider failures by kind."),
    "sluice_upstream_connects_total": ("counter", "New connections opened to each provider."),
    "sluice_client_disconnects_total": ("counter", "Clients gone before their response was complete."),
    "sluice_client_connections_refused_total": ("counter",
        "Connections refused (503) over max_client_connections."),
    "sluice_tokens_total": ("counter", "Tokens used, by virtual key and kind (from provider usage)."),
    "sluice_retries_total": ("counter", "Retries of failed provider attempts, by failure class."),
    "sluice_retry_budget_exhausted_total": ("counter",
        "Retries not made because the retry budget was used up."),
    "sluice_retries_in_flight": ("gauge", "Requests waiting (backoff or Retry-After) before another attempt; they hold no retry budget."),
    "sluice_fallbacks_total": ("counter",
        "Requests sent on to a fallback model, by the model that failed and the fallback."),
    "sluice_ejections_total": ("counter", "Deployments ejected by passive health, by model and provider."),
}


def _header(out, name):
    # type: (list[str], str) -> None
    kind, text = HELP[name] if name in HELP else ("gauge", GAUGE_HELP.get(name, name))
    out.append(f"# HELP {name} {text}")
    out.append(f"# TYPE {name} {kind}")


def _labeled(out, name, series, *label_names):
    # type: (list[str], str, dict[Any, int], *str) -> None
    """A metric with one line per labelled value of ``series`` (sorted); with one label, its
    keys are the label's values."""
    _header(out, name)
    for key, n in sorted(series.items()):
        values = key if len(label_names) > 1 else (key,)
        labels = ",".join(f'{label}="{_esc(v)}"' for label, v in zip(label_names, values))
        out.append(f"{name}{{{labels}}} {n}")


def _single(out, name, value):
    # type: (list[str], str, int) -> None
    _header(out, name)
    out.append(f"{name} {value}")


def render(m, gauges):
    # type: (Metrics, GaugeSums) -> bytes
    out = []  # type: list[str]
    _header(out, "sluice_requests_total")
    for (model, status), n in sorted(m.requests.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        out.append(f'sluice_requests_total{{model="{_esc(model)}",status="{status}"}} {n}')
    _single(out, "sluice_requests_in_flight", m.in_flight)
    _header(out, "sluice_overhead_seconds")
    _hist_lines(out, "sluice_overhead_seconds", m.overhead)
    _header(out, "sluice_upstream_latency_seconds")
    for p, h in sorted(m.upstream_latency.items()):
        _hist_lines(out, "sluice_upstream_latency_seconds", h, f'provider="{_esc(p)}"')
    _header(out, "sluice_stream_relay_seconds")
    _hist_lines(out, "sluice_stream_relay_seconds", m.stream_relay)
    _labeled(out, "sluice_upstream_errors_total", m.upstream_errors, "provider", "kind")
    _labeled(out, "sluice_upstream_connects_total", m.upstream_connects, "provider")
    _single(out, "sluice_client_disconnects_total", m.client_disconnects)
    _single(out, "sluice_client_connections_refused_total", m.connections_refused)
    _labeled(out, "sluice_tokens_total", m.tokens, "key", "kind")
    _labeled(out, "sluice_retries_total", m.retries, "reason")
    _single(out, "sluice_retry_budget_exhausted_total", m.retry_budget_exhausted)
    _single(out, "sluice_retries_in_flight", m.retries_in_flight)
    _labeled(out, "sluice_fallbacks_total", m.fallbacks, "from", "to")
    _labeled(out, "sluice_ejections_total", m.ejections, "model", "provider")
    for name, series in sorted(gauges.items()):
        _header(out, name)
        for labels, v in sorted(series.items()):
            if labels:
                lab = ",".join(f'{labels[i]}="{_esc(labels[i + 1])}"' for i in range(0, len(labels), 2))
                out.append(f"{name}{{{lab}}} {v}")
            else:
                out.append(f"{name} {v}")
    out.append("")
    return "\n".join(out).encode()
