"""Correctness before load (as TechEmpower verifies before it benchmarks) and counts after it."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.run.bodies import chat_body
from mocks.stats import read_stats


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict
    body: bytes
    error: str


def send_chat(base_url: str, chat_path: str, model: str, headers: dict, stream: bool = False,
              timeout_s: float = 30.0, dialect: str = "openai", request_bytes: int = 0) -> Reply:
    body = chat_body(dialect, model, 16, stream, request_bytes)
    request = urllib.request.Request(
        base_url.rstrip("/") + chat_path, data=body, method="POST",
        headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read(), "")
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read(),
                     f"HTTP {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        return Reply(0, {}, b"", f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")


# The check before the load asks the mock for no hold (its per-request override headers), so it
# costs no run its hold (10 s in the in-flight lane); a system that does not forward a client's
# headers gets the run's hold, as before. (The warm-up keeps the hold: held at once, its requests
# reach every worker of a multi-worker system.)
NO_HOLD_HEADERS = {"x-mock-latency-ms": "0", "x-mock-chunk-delay-ms": "0"}


def warm_up(base_url: str, chat_path: str, model: str, headers: dict, count: int,
            dialect: str = "openai", timeout_s: float = 30.0) -> None:
    """``count`` unmeasured chat requests, sent at once, so that each worker of a multi-worker
    system has loaded and served before a run's load: the mock holds each as long as the run's
    requests, so one after another they would take ``count`` holds (200 s for LiteLLM's 20 in
    the in-flight lane's 10-s holds)."""
    if count <= 0:
        return
    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(lambda _: send_chat(base_url, chat_path, model, headers, dialect=dialect,
                                          timeout_s=timeout_s), range(count)))


def reply_problem(reply: Reply, stream: bool, dialect: str = "openai") -> str:
    """'' when the reply is a well-formed chat completion (or stream), else what is wrong."""
    if reply.error:
        return f"{reply.error}: {reply.body[:300].decode(errors='replace')}"
    if reply.status != 200:
        return f"HTTP {reply.status}"
    if dialect == "anthropic":
        return _anthropic_problem(reply.body, stream)
    if stream:
        if b"data: [DONE]" not in reply.body or b"chat.completion.chunk" not in reply.body:
            return f"not an OpenAI SSE stream: {reply.body[:200]!r}"
        return ""
    try:
        choices = json.loads(reply.body)["choices"]
        if not choices or "message" not in choices[0]:
            return "no message in choices"
    except (ValueError, KeyError, TypeError):
        return f"not a chat completion: {reply.body[:200]!r}"
    return ""


def _anthropic_problem(body: bytes, stream: bool) -> str:
    if stream:
        if b"message_stop" not in body or b"content_block_delta" not in body:
            return f"not an Anthropic SSE stream: {body[:200]!r}"
        return ""
    try:
        message = json.loads(body)
        if message["type"] != "message" or not any(b.get("type") == "text" for b in message["content"]):
            return "no text block in the message"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"not an Anthropic message: {body[:200]!r}"
    return ""


def mock_snapshot(stats_dir: Path, timeout_s: float = 3.0) -> dict:
    """The mock's merged stats, no older than now (every worker has flushed since)."""
    return read_stats(stats_dir, fresher_than_t_unix_s=time.time(), timeout_s=timeout_s)


def pre_request(base_url: str, chat_path: str, model: str, headers: dict, stats_dir: Path,
              timeout_s: float, dialect: str = "openai", request_bytes: int = 0,
              standby_stats_dir: Path | None = None) -> dict:
    """One request through the system, as the load will send it (dialect, body size), must come
    back well-formed and must reach the mock (or the standby provider, when there is one: a
    system may spread its requests over both). ``_snapshot``: the mock's stats after it."""
    dirs = [stats_dir, *([standby_stats_dir] if standby_stats_dir is not None else [])]
    before = [mock_snapshot(d) for d in dirs]
    reply = send_chat(base_url, chat_path, model, {**headers, **NO_HOLD_HEADERS},
                      timeout_s=timeout_s, dialect=dialect, request_bytes=request_bytes)
    after = [mock_snapshot(d) for d in dirs]
    seen = sum(a["count"] - b["count"] for a, b in zip(after, before))
    return {"status": reply.status, "problem": reply_problem(reply, stream=False, dialect=dialect),
            "mock_request_id": reply.headers.get("x-mock-request-id", ""),
            "mock_saw_it": seen >= 1, "mock_count_delta": seen, "_snapshot": after[0]}
