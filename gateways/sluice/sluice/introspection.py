"""What a worker tells about itself: gauges, the Prometheus text of /metrics (summed over the
workers' snapshots) and the JSON of /debug/state. Called at most once a second and per scrape,
never per request."""
from __future__ import annotations

import asyncio
import os
from time import perf_counter
from typing import TYPE_CHECKING

from orjson import JSONDecodeError, loads

from sluice.metrics import Metrics, render

if TYPE_CHECKING:
    from sluice.metrics import Gauges, Snapshot
    from sluice.server import App


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def gauges(app: App) -> Gauges:
    g: Gauges = {
        "sluice_client_connections": [([], len(app.clients))],
        "sluice_asyncio_tasks": [([], len(asyncio.all_tasks(app.loop)))],
        "sluice_workers": [([], 1)],
        "sluice_resident_memory_bytes": [([], _rss())],
        "sluice_request_body_bytes_held": [([], app.body_bytes_held)],
    }
    conns: list[tuple[list[str], int]] = []
    for name, p in app.providers.items():
        idle, busy, connecting = p.pool.counts()
        conns += [(["provider", name, "state", "idle"], idle), (["provider", name, "state", "busy"], busy),
                  (["provider", name, "state", "connecting"], connecting)]
    g["sluice_upstream_connections"] = conns
    if app.policies:
        now = perf_counter()
        g["sluice_ejected_deployments"] = [
            (["model", policy.name, "provider", d.name], 1 if d.ejected_until > now else 0)
            for policy in app.policies if policy.single is None for d in policy.deployments]
        g["sluice_requests_held"] = [(["model", policy.name], len(policy.held))
                                     for policy in app.policies if policy.holds]
    if app.metrics_per_key and (app.n_workers == 1 or app.worker == 0):
        reserved: list[tuple[list[str], int]] = []
        spent: list[tuple[list[str], int]] = []
        for rec in app.keys.records:
            if rec.budget:
                s, rv = app.keys.budget_state(rec)
                spent.append((["key", rec.name], s))
                reserved.append((["key", rec.name], rv))
        if reserved:
            g["sluice_key_tokens_reserved"] = reserved
            g["sluice_key_tokens_spent"] = spent
    return g


def sync_tokens(app: App) -> None:
    """Token counts are kept on the key records (cheaper per request); metrics read them here."""
    t = app.metrics.tokens
    for rec in app.keys.records:
        if rec.prompt_tokens or rec.completion_tokens:
            t[(rec.name, "prompt")] = rec.prompt_tokens
            t[(rec.name, "completion")] = rec.completion_tokens


def render_metrics(app: App) -> bytes:
    sync_tokens(app)
    live = gauges(app)
    if app.n_workers > 1:
        snaps: list[Snapshot] = []
        for w in range(app.n_workers):
            if w == app.worker:
                continue
            data = app.shared.read_snapshot(w)
            if data:
                try:
                    snaps.append(loads(data))
                except JSONDecodeError:
                    pass
        m, merged_gauges = Metrics.merged(app.metrics, live,
                                          [s for s in snaps if type(s) is dict and "requests" in s])
    else:
        m, merged_gauges = Metrics.merged(app.metrics, live, [])
    if not app.metrics_per_key:  # key names and spend only for the holder of metrics_token
        m.tokens = {}
    return render(m, merged_gauges)


def debug_state(app: App) -> dict[str, object]:
    up: dict[str, dict[str, int]] = {}
    for name, p in app.providers.items():
        idle, busy, connecting = p.pool.counts()
        up[name] = {"idle": idle, "busy": busy, "connecting": connecting,
                    "waiters": len(p.pool.waiters), "connect_tasks": len(p.pool.tasks)}
    return {"pid": os.getpid(), "worker": app.worker, "workers": app.n_workers,
            "in_flight": app.metrics.in_flight, "client_connections": len(app.clients),
            "body_bytes_held": app.body_bytes_held,
            "busy_clients": sum(1 for c in app.clients if c.busy),
            "tasks": len(asyncio.all_tasks(app.loop)), "upstream": up,
            "requests": sum(app.metrics.requests.values()),
            "client_disconnects": app.metrics.client_disconnects,
            "keys": {rec.name: app.keys.state(rec) for rec in app.keys.records}}
