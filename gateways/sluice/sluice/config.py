"""Configuration: a TOML file read with tomllib and checked up front.

Kept free of heavy imports: the supervising process loads it before anything else.
See README.md for the reference of every key. The checks every table uses are in
config_checks.py, the [server] table in config_server.py.
"""
from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Collection

from sluice.config_checks import DIALECTS, Table, _bool, _check_keys, _check_table, _extra_headers, _from_env, _has_ctl, _num, _str  # noqa: F401
from sluice.config_checks import ConfigError as ConfigError  # what load() raises: named here too
from sluice.config_server import ServerConfig, parse_listen  # noqa: F401


def _shown(url: str) -> str:
    """``url`` as a message may show it: what precedes an "@" in its authority (credentials) hidden."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return scheme + sep + authority + slash + path


def split_url(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port or None, path) of an http(s) URL; no urllib import (memory)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "", "", None, ""
    hostport, slash, path = rest.partition("/")
    path = slash + path
    for cut in ("?", "#"):
        path = path.split(cut, 1)[0]
    if "@" in hostport:
        raise ConfigError(f"credentials in a provider URL are not supported (give the provider's key "
                          f"with api_key_env): {_shown(url)!r}")
    digits = None
    if hostport.startswith("["):
        host, _, tail = hostport[1:].partition("]")
        if tail.startswith(":"):
            digits = tail[1:]
    else:
        host, _, digits = hostport.partition(":")
        digits = digits or None
    port = None
    if digits is not None:
        if not digits.isdigit() or not 0 < int(digits) < 65536:
            raise ConfigError(f"invalid port in URL {_shown(url)!r}")
        port = int(digits)
    return scheme.lower(), host, port, path


class ProviderConfig:
    KEYS = ("base_url", "dialect", "api_key_env", "api_key", "max_connections", "max_waiters",
            "connect_timeout_s", "response_timeout_s", "stream_idle_timeout_s",
            "pool_idle_timeout_s", "tls_verify", "ca_file", "anthropic_version", "headers")

    def __init__(self, name: str, table: object) -> None:
        w = f"[providers.{name}]"
        t = _check_table(table, self.KEYS, w)
        self.name = name
        self.base_url = _str(t, "base_url", "", w)
        try:
            scheme, host, port, path = split_url(self.base_url)
        except ConfigError as e:
            raise ConfigError(f"{w}.base_url: {e}") from None
        if scheme not in ("http", "https") or not host:
            raise ConfigError(f"{w}.base_url must be an http:// or https:// URL, got "
                              f"{_shown(self.base_url)!r}")
        self.scheme = scheme
        self.host = host
        default_port = 443 if scheme == "https" else 80
        self.port = port or default_port
        host_for_header = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host_for_header if self.port == default_port else f"{host_for_header}:{self.port}"
        self.path_prefix = path.rstrip("/")
        if _has_ctl(path) or " " in path:
            raise ConfigError(f"{w}.base_url: the path must not contain spaces or control characters")
        if _has_ctl(host) or " " in host:
            raise ConfigError(f"{w}.base_url: invalid host {host!r}")
        self.dialect = _str(t, "dialect", "openai", w)
        if self.dialect not in DIALECTS:
            raise ConfigError(f"{w}.dialect must be one of {DIALECTS}, got {self.dialect!r}")
        self.api_key_env = _str(t, "api_key_env", "", w)
        self.api_key = _from_env(t, "api_key_env", w) if self.api_key_env else _str(t, "api_key", "", w)
        if _has_ctl(self.api_key):
            raise ConfigError(f"{w}: the API key must not contain control characters (CR, LF...)")
        # each open request to this provider holds one connection (HTTP/1.1): sized for 10,000+
        self.max_connections = _num(t, "max_connections", 16384, w, 1, integer=True, maximum=1000000)
        # requests waiting for one of them once all are busy; more get 503 at once
        self.max_waiters = _num(t, "max_waiters", 4096, w, 0, integer=True, maximum=1000000)
        self.connect_timeout_s = float(_num(t, "connect_timeout_s", 5.0, w, 0.001))
        self.response_timeout_s = float(_num(t, "response_timeout_s", 120.0, w, 0.001))
        self.stream_idle_timeout_s = float(_num(t, "stream_idle_timeout_s", 120.0, w, 0.001))
        self.pool_idle_timeout_s = float(_num(t, "pool_idle_timeout_s", 60.0, w, 0.001))
        self.tls_verify = _bool(t, "tls_verify", True, w)
        self.ca_file = _str(t, "ca_file", "", w)
        self.anthropic_version = _str(t, "anthropic_version", "2023-06-01", w)
        if _has_ctl(self.anthropic_version):
            raise ConfigError(f"{w}.anthropic_version must not contain control characters")
        self.headers = _extra_headers(t, "headers", w)

    @property
    def chat_path(self) -> str:
        return self.path_prefix + ("/messages" if self.dialect == "anthropic" else "/chat/completions")


# Failure classes that retries and fallbacks act on. "timeout" (no response head within
# response_timeout_s) and "reset" (connection closed after the request was sent, before any
# response) may have reached a provider that acted on it: they count only with retry_after_send.
RETRY_CLASSES = ("5xx", "429", "overloaded", "connect", "timeout", "reset")
DEFAULT_RETRY_ON = ("5xx", "429", "overloaded", "connect")


def _classes(table: Table, key: str, default: Collection[str], where: str) -> frozenset[str]:
    value = table.get(key, default)
    if not isinstance(value, (list, tuple)) or not all(v in RETRY_CLASSES for v in value):
        raise ConfigError(f"{where}.{key} must be a list of {', '.join(RETRY_CLASSES)}")
    return frozenset(value)


class RetryConfig:
    KEYS = ("max_attempts", "on", "backoff_base_ms", "backoff_max_ms", "honour_retry_after",
            "retry_after_max_ms", "retry_after_send", "deadline_s", "overload_backoff_min_ms",
            "overload_backoff_max_ms")

    def __init__(self, table: object, where: str) -> None:
        w = where + ".retry"
        t = _check_table(table, self.KEYS, w)
        # attempts end with deadline_s and the retry budget; this optional cap on a model's
        # attempts is 0 (none) by default
        self.max_attempts = _num(t, "max_attempts", 0, w, 0, integer=True, maximum=100)
        self.on = _classes(t, "on", DEFAULT_RETRY_ON, w)
        self.backoff_base_s = _num(t, "backoff_base_ms", 25, w, 0) / 1000
        self.backoff_max_s = _num(t, "backoff_max_ms", 1000, w, 0) / 1000
        self.honour_retry_after = _bool(t, "honour_retry_after", True, w)
        self.retry_after_max_s = _num(t, "retry_after_max_ms", 2000, w, 0) / 1000
        self.retry_after_send = _bool(t, "retry_after_send", False, w)
        # no wait (backoff, Retry-After) past this many seconds from the request's arrival
        self.deadline_s = float(_num(t, "deadline_s", 10.0, w, 0.1, maximum=3600))
        # an overloaded deployment (503, 529) is never retried at once: a full-jitter backoff
        # between these, doubling its ceiling with each attempt
        self.overload_backoff_min_s = _num(t, "overload_backoff_min_ms", 250, w, 1,
                                           maximum=60000) / 1000
        self.overload_backoff_max_s = _num(t, "overload_backoff_max_ms", 2000, w, 1,
                                           maximum=60000) / 1000
        if self.overload_backoff_min_s > self.overload_backoff_max_s:
            raise ConfigError(f"{w}.overload_backoff_min_ms must be <= overload_backoff_max_ms")


class OutlierConfig:
    """Ejection of relative outliers: a deployment whose recent failure share exceeds its
    admitted peers' by ``failure_margin``, over at least ``min_requests`` recent attempts."""
    KEYS = ("min_requests", "failure_margin", "window_s", "max_ejection_percent", "ejection_s",
            "max_ejection_s", "probe_share")

    def __init__(self, table: object, where: str) -> None:
        w = where + ".outlier"
        t = _check_table(table, self.KEYS, w)
        self.min_requests = _num(t, "min_requests", 10, w, 0, integer=True,
                                 maximum=1000000)  # 0 = never eject
        self.failure_margin = float(_num(t, "failure_margin", 0.3, w, 0.01, maximum=1))
        self.window_s = float(_num(t, "window_s", 10.0, w, 0.1, maximum=3600))
        self.max_ejection_percent = float(_num(t, "max_ejection_percent", 50, w, 0, maximum=100))
        self.ejection_s = float(_num(t, "ejection_s", 10.0, w, 0.01, maximum=86400))
        # Envoy's rule: the k-th ejection in a row lasts k x ejection_s, at most max_ejection_s
        self.max_ejection_s = float(_num(t, "max_ejection_s", 300.0, w, 0.01, maximum=86400))
        if self.max_ejection_s < self.ejection_s:
            raise ConfigError(f"{w}.max_ejection_s must be >= ejection_s")
        # back from an ejection, a deployment takes this share of what its weight would give it
        # until it has stayed healthy for ejection_s: a provider still failing gets a trickle
        self.probe_share = float(_num(t, "probe_share", 0.1, w, 0.001, maximum=1))


class RetryBudgetConfig:
    """A token bucket per worker: a retry (or fallback) attempt withdraws one token when it is
    sent, a successful attempt deposits ``deposit_per_success``, ``min_retries_per_s`` tokens
    flow in every second; at most ``capacity`` tokens (it starts full)."""
    KEYS = ("capacity", "deposit_per_success", "min_retries_per_s", "fallbacks")

    def __init__(self, table: object) -> None:
        w = "[retry_budget]"
        t = _check_table(table, self.KEYS, w)
        self.capacity = float(_num(t, "capacity", 100, w, 1, maximum=1e6))
        self.deposit_per_success = float(_num(t, "deposit_per_success", 0.5, w, 0.0, maximum=10))
        self.min_retries_per_s = float(_num(t, "min_retries_per_s", 10, w, 0.0, maximum=1e6))
        # fallback attempts take tokens too (set false when fallbacks are spare capacity)
        self.fallbacks = _bool(t, "fallbacks", True, w)


class OutageConfig:
    """Riding out an outage: while every deployment of a model refuses connections (or is
    ejected), its requests are held, up to ``max_held_requests`` a worker and each until its
    retry deadline, while one probe at a time per deployment (the oldest held request itself)
    tests the provider, ``probe_backoff_min_ms`` apart at first, the gap doubling up to
    ``probe_backoff_max_ms``. Once a probe is answered the held requests go, ``release_rate_per_s``
    a second at first, the rate doubling every ``release_doubling_ms``."""
    KEYS = ("max_held_requests", "probe_backoff_min_ms", "probe_backoff_max_ms",
            "release_rate_per_s", "release_doubling_ms")

    def __init__(self, table: object) -> None:
        w = "[outage]"
        t = _check_table(table, self.KEYS, w)
        self.max_held_requests = _num(t, "max_held_requests", 1000, w, 0, integer=True,
                                      maximum=1_000_000)  # 0: nothing is held
        self.probe_backoff_min_s = _num(t, "probe_backoff_min_ms", 100, w, 1, maximum=60000) / 1000
        self.probe_backoff_max_s = _num(t, "probe_backoff_max_ms", 2000, w, 1, maximum=600000) / 1000
        if self.probe_backoff_min_s > self.probe_backoff_max_s:
            raise ConfigError(f"{w}.probe_backoff_min_ms must be <= probe_backoff_max_ms")
        self.release_rate_per_s = float(_num(t, "release_rate_per_s", 10, w, 1, maximum=1e6))
        self.release_doubling_s = _num(t, "release_doubling_ms", 100, w, 1, maximum=60000) / 1000


MAX_PART_TOKENS = 10_000_000  # a weight above any provider's context window is a typo


class PromptEstimateConfig:
    """What a key's reservation counts for a content part the provider counts apart from its
    bytes, by kind (the part's "type"): tokens per part, on top of the body's bytes / 4."""
    KEYS = ("image_tokens", "document_tokens", "audio_tokens")

    def __init__(self, table: object) -> None:
        w = "[prompt_estimate]"
        t = _check_table(table, self.KEYS, w)
        # Anthropic: an image is scaled to at most ~1.15 megapixels, about 1,600 tokens
        # (width x height / 750); OpenAI gpt-4o, high detail: 85 + 170 per 512 px tile, at most 1,445
        image = _num(t, "image_tokens", 1600, w, 0, integer=True, maximum=MAX_PART_TOKENS)
        # Anthropic PDFs: 1,500 to 3,000 tokens of text a page, and each page an image too: one
        # page at the top of both (a longer document is charged what the provider counts)
        document = _num(t, "document_tokens", 4600, w, 0, integer=True, maximum=MAX_PART_TOKENS)
        # OpenAI input_audio carries its audio in the body (base64 wav or mp3): its bytes are
        # counted already, mp3 at 8 kbit/s (its least) as about 333 tokens a second
        audio = _num(t, "audio_tokens", 0, w, 0, integer=True, maximum=MAX_PART_TOKENS)
        # the kinds as the two dialects name them (OpenAI image_url, file, input_audio;
        # Anthropic image, document)
        self.part_tokens = {b"image_url": image, b"image": image, b"file": document,
                            b"document": document, b"input_audio": audio}


class TokenWeightsConfig:
    """What one token of each kind of a provider's usage costs a key's token budget."""
    KEYS = ("prompt", "completion", "cache_write", "cache_read")

    def __init__(self, table: object) -> None:
        w = "[token_weights]"
        t = _check_table(table, self.KEYS, w)
        # (prompt, completion, cache_write, cache_read) in thousandths, as usage.weighed takes them
        self.weights = tuple(round(_num(t, k, 1.0, w, 0.0, maximum=1000) * 1000) for k in self.KEYS)


class DeploymentConfig:
    KEYS = ("provider", "weight", "upstream_model")

    def __init__(self, t: object, where: str, providers: Collection[str], upstream_model: str) -> None:
        if not isinstance(t, dict):
            raise ConfigError(f"{where}.deployments entries must be tables")
        _check_keys(t, self.KEYS, where + ".deployments")
        self.provider = _str(t, "provider", "", where + ".deployments")
        if self.provider not in providers:
            raise ConfigError(f"{where}.deployments: provider {self.provider!r} is not a configured provider")
        self.weight = float(_num(t, "weight", 1, where + ".deployments", 0))
        self.upstream_model = _str(t, "upstream_model", upstream_model, where + ".deployments") or upstream_model
        _check_upstream(self.upstream_model, where + ".deployments")


def _check_upstream(name: str, where: str) -> None:
    # patched into JSON bodies as bytes: nothing that needs escaping
    if _has_ctl(name) or '"' in name or "\\" in name:
        raise ConfigError(f"{where}.upstream_model must not contain quotes, backslashes or control characters")


class ModelConfig:
    KEYS = ("provider", "upstream_model", "aliases", "max_output_tokens", "deployments", "retry",
            "fallbacks", "fallback_on", "outlier", "request_timeout_s")

    def __init__(self, name: str, table: object, providers: Collection[str], request_timeout_s: float = 600.0) -> None:
        w = f"[models.{name}]"
        t = _check_table(table, self.KEYS, w)
        self.name = name
        self.upstream_model = _str(t, "upstream_model", name, w) or name
        _check_upstream(self.upstream_model, w)
        deps = t.get("deployments")
        if deps is None:
            self.provider = _str(t, "provider", "", w)
            if self.provider not in providers:
                raise ConfigError(f"{w}.provider {self.provider!r} is not a configured provider")
            self.deployments = [DeploymentConfig({"provider": self.provider}, w, providers,
                                                 self.upstream_model)]
        else:
            if "provider" in t:
                raise ConfigError(f"{w}: give either provider or deployments, not both")
            if not isinstance(deps, list) or not deps:
                raise ConfigError(f"{w}.deployments must be a non-empty list of tables")
            self.deployments = [DeploymentConfig(d, w, providers, self.upstream_model) for d in deps]
            if not any(d.weight > 0 for d in self.deployments):
                raise ConfigError(f"{w}.deployments: at least one weight must be > 0")
            self.provider = next(d.provider for d in self.deployments if d.weight > 0)
        self.retry = RetryConfig(t["retry"], w) if "retry" in t else None
        fallbacks = t.get("fallbacks", [])
        if not isinstance(fallbacks, list) or not all(isinstance(f, str) and f for f in fallbacks):
            raise ConfigError(f"{w}.fallbacks must be a list of model names")
        if name in fallbacks:
            raise ConfigError(f"{w}.fallbacks must not name the model itself")
        self.fallbacks: list[str] = fallbacks
        self.fallback_on = _classes(t, "fallback_on", DEFAULT_RETRY_ON, w)
        self.outlier = OutlierConfig(t.get("outlier", {}), w)
        # the resilience machinery runs for a model only when it asks for some of it
        self.resilient = bool(self.retry or fallbacks or len(self.deployments) > 1 or "outlier" in t)
        aliases = t.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
            raise ConfigError(f"{w}.aliases must be a list of non-empty strings")
        self.aliases: list[str] = aliases
        self.max_output_tokens = _num(t, "max_output_tokens", 4096, w, 1, integer=True)
        self.request_timeout_s = float(_num(t, "request_timeout_s", request_timeout_s, w, 0.1,
                                            maximum=86400))


class KeyConfig:
    KEYS = ("key", "key_env", "key_sha256", "models", "rpm", "token_budget", "budget_period_s",
            "max_in_flight")

    def __init__(self, name: str, table: object, default_max_in_flight: int = 0) -> None:
        w = f"[keys.{name}]"
        t = _check_table(table, self.KEYS, w)
        self.name = name
        given = [k for k in ("key", "key_env", "key_sha256") if k in t]
        if len(given) != 1:
            raise ConfigError(f"{w} needs exactly one of key, key_env, key_sha256")
        self.key: str | None = None
        self.key_sha256: str | None = None
        if "key" in t:
            self.key = _str(t, "key", "", w)
        elif "key_env" in t:
            self.key = _from_env(t, "key_env", w)
        else:
            digest = _str(t, "key_sha256", "", w).lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ConfigError(f"{w}.key_sha256 must be 64 hex digits")
            self.key_sha256 = digest
        if self.key is not None and (not self.key or any(c in self.key for c in " \r\n\t")):
            raise ConfigError(f"{w}: the key must be non-empty and contain no whitespace")
        models = t.get("models", ["*"])
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise ConfigError(f"{w}.models must be a list of model names")
        self.models: list[str] = models
        self.rpm = _num(t, "rpm", 0, w, 0, integer=True)
        self.token_budget = _num(t, "token_budget", 0, w, 0, integer=True)
        self.budget_period_s = _num(t, "budget_period_s", 0, w, 0, integer=True)
        # rpm bounds a rate, not how many long requests a key holds open at once over all workers
        self.max_in_flight = _num(t, "max_in_flight", default_max_in_flight, w, 0, integer=True,
                                  maximum=1000000)

    def digest(self) -> str:
        if self.key_sha256:
            return self.key_sha256
        import hashlib  # only when some key is given as a digest (keeps workers small)
        assert self.key is not None  # exactly one of the two is given (__init__)
        return hashlib.sha256(self.key.encode()).hexdigest()


class Config:
    def __init__(self, data: object, path: str | None = None, raw: bytes | None = None) -> None:
        self.raw = raw  # the file's bytes: workers are given these, never the file again
        if not isinstance(data, dict):
            raise ConfigError("config must be a TOML table")
        _check_keys(data, ("server", "providers", "models", "keys", "retry_budget", "outage",
                           "prompt_estimate", "token_weights"),
                    "the top level")
        self.path = path
        self.server = ServerConfig(data.get("server", {}))
        providers = data.get("providers", {})
        if not providers:
            raise ConfigError("at least one [providers.NAME] table is required")
        self.providers: dict[str, ProviderConfig] = {n: ProviderConfig(n, t) for n, t in providers.items()}
        models = data.get("models", {})
        if not models:
            raise ConfigError("at least one [models.NAME] table is required")
        self.models: dict[str, ModelConfig] = {
            n: ModelConfig(n, t, self.providers, self.server.request_timeout_s) for n, t in models.items()}
        seen: dict[str, str] = {}  # model name or alias -> its model
        for m in self.models.values():
            for alias in [m.name] + m.aliases:
                if alias in seen and seen[alias] != m.name:
                    raise ConfigError(f"model name or alias {alias!r} is used by both "
                                      f"{seen[alias]!r} and {m.name!r}")
                seen[alias] = m.name
        for m in self.models.values():
            for f in m.fallbacks:
                if f not in self.models:
                    raise ConfigError(f"[models.{m.name}].fallbacks: unknown model {f!r}")
        self.retry_budget = RetryBudgetConfig(data.get("retry_budget", {}))
        self.outage = OutageConfig(data.get("outage", {}))
        self.prompt_estimate = PromptEstimateConfig(data.get("prompt_estimate", {}))
        self.token_weights = TokenWeightsConfig(data.get("token_weights", {})).weights
        self.keys: dict[str, KeyConfig] = {n: KeyConfig(n, t, self.server.key_max_in_flight)
                                           for n, t in data.get("keys", {}).items()}
        digests: dict[str | None, str] = {}  # secret -> its key
        any_digest = any(k.key_sha256 for k in self.keys.values())
        for k in self.keys.values():
            d = k.digest() if any_digest else k.key
            if d in digests:
                raise ConfigError(f"keys {digests[d]!r} and {k.name!r} have the same secret")
            digests[d] = k.name
            for model in k.models:
                if model != "*" and model not in seen:
                    raise ConfigError(f"[keys.{k.name}].models: unknown model {model!r}")
        self.warnings = list(self.server.warnings)
        if self.server.require_auth is False and self.keys:
            self.warnings.append(
                f"[server].require_auth = false with {len(self.keys)} key(s) configured: a request "
                f"that leaves its key out skips every key's rpm, token_budget and models checks")
        if self.server.require_auth is None:
            self.server.require_auth = bool(self.keys)
        if self.server.require_auth and not self.keys:
            raise ConfigError("[server].require_auth = true but no [keys.NAME] is configured")


def load(path: str, fd: int | None = None) -> Config:
    """The config at ``path``; from ``fd`` instead when given (a worker reads the bytes its
    supervisor loaded, so an edited file cannot change one worker's view of the layout)."""
    try:
        if fd is None:
            with open(path, "rb") as f:
                raw = f.read()
        else:
            raw = b""
            while True:
                piece = os.pread(fd, 1 << 20, len(raw))
                if not piece:
                    break
                raw += piece
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"invalid TOML in {path}: {e}") from None
    cfg = Config(data, path, raw)
    if fd is None:  # the process the operator started (workers read the same bytes from fd)
        for warning in cfg.warnings:
            sys.stderr.write(f"sluice[{os.getpid()}]: warning: {warning}\n")
    return cfg
