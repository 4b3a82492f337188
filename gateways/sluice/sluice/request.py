"""The request model: one client request, the route its model resolves to, and the digest of
its headers (what Sluice consumes, what it forwards)."""
from typing import TYPE_CHECKING

from sluice.dialects import SAME_DIALECT

if TYPE_CHECKING:
    from collections.abc import Sequence  # noqa: F401 (type comments)

    from sluice.config import ModelConfig  # noqa: F401 (type comments)
    from sluice.keys import KeyRecord  # noqa: F401 (type comments)
    from sluice.pool import Provider  # noqa: F401 (type comments)
    from sluice.resilience import Deployment, Policy, RetryState  # noqa: F401 (type comments)

# request headers Sluice consumes instead of forwarding
(H_DROP, H_AUTHORIZATION, H_X_API_KEY, H_EXPECT, H_ANTHROPIC_VERSION, H_CONTENT_LENGTH,
 H_UPGRADE, H_TRANSFER_ENCODING, H_CONNECTION) = range(9)
CONSUMED_HEADERS = {
    b"host": H_DROP, b"connection": H_CONNECTION, b"keep-alive": H_DROP, b"transfer-encoding": H_TRANSFER_ENCODING,
    b"te": H_DROP, b"trailer": H_DROP, b"upgrade": H_UPGRADE, b"proxy-authorization": H_DROP,
    b"proxy-connection": H_DROP, b"accept-encoding": H_DROP, b"x-forwarded-for": H_DROP,
    b"authorization": H_AUTHORIZATION, b"x-api-key": H_X_API_KEY, b"expect": H_EXPECT,
    b"anthropic-version": H_ANTHROPIC_VERSION, b"content-length": H_CONTENT_LENGTH,
}


class Request:
    """One client request."""
    __slots__ = (
        "t0", "method", "url", "token", "forward_headers", "has_anthropic_version", "http11",
        "keep_alive", "content_length", "body", "body_left", "body_pieces", "body_received",
        "upgrade", "own_time", "t_resume", "overhead_us", "translation", "stream", "include_usage",
        "strip_usage",
        "key", "reserved", "route", "model_label", "dialect", "payload", "client_model",
        "deployment", "retry_state", "body_bytes", "held", "sent", "lost_attempts",
        "discard_body",
    )

    def __init__(self, t0):
        # type: (float) -> None
        self.t0 = t0
        self.method = b""
        self.url = b""
        self.token = None  # type: bytes | None
        self.forward_headers = b""   # the client's header lines that go to the provider
        self.has_anthropic_version = False
        self.http11 = True
        self.keep_alive = True
        self.content_length = -1
        self.body = b""
        self.body_left = -1          # Content-Length body bytes still to come
        self.body_pieces = None  # type: list[bytes] | None  # body pieces of earlier reads (a body longer than one read)
        self.body_received = 0       # body bytes received so far
        self.body_bytes = 0          # the body's length once admitted (the body may be dropped then)
        self.held = 0                # body bytes counted as held by the worker (ClientConn.hold)
        self.discard_body = False    # no answer reads the body: dropped as it arrives, never held
        self.upgrade = False
        self.own_time = 0.0          # seconds of our own work before waiting on the provider
        self.t_resume = t0
        self.overhead_us = 0.0       # microseconds, as reported in the overhead header
        self.translation = SAME_DIALECT
        self.stream = False
        self.include_usage = False
        # a budget's streamed OpenAI request whose client did not ask for usage: Sluice asks
        # a same-dialect provider for it and takes its usage chunk out of the client's stream
        self.strip_usage = False
        self.key = None  # type: KeyRecord | None
        self.reserved = 0            # tokens reserved from the key's budget
        self.route = None  # type: Route  # type: ignore[assignment]  # set by admission before it is read
        self.model_label = "-"
        self.dialect = "openai"
        self.payload = None  # type: bytes | None  # set when the request goes towards a provider (counted in flight)
        self.client_model = None  # type: str  # type: ignore[assignment]  # set by admission before it is read
        self.deployment = None  # type: Deployment | None  # the deployment answering, when the model has a resilience Policy
        self.retry_state = None  # type: RetryState | None  # attempts so far (resilience.RetryState), made at the first failure
        # the attempt under way was written to a provider that has not said (by an error status)
        # that it did not act on it: given up on, it may have been billed
        self.sent = False
        self.lost_attempts = 0       # earlier attempts given up on after they were sent

    def with_head(self, t0):
        # type: (float) -> Request
        """A new request, at ``t0``, with what this one's head said (but its Content-Length)."""
        r = Request(t0)
        r.method = self.method
        r.url = self.url
        r.token = self.token
        r.forward_headers = self.forward_headers
        r.has_anthropic_version = self.has_anthropic_version
        r.http11 = self.http11
        r.keep_alive = self.keep_alive
        return r

    def add_body_piece(self, parts, max_body):
        # type: (list[bytes], int) -> bool
        """The body pieces ``parts`` of one read (emptied), kept as one piece: a body longer than
        one read. False when the body is now over ``max_body`` bytes (the piece is not kept)."""
        piece = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self.body_received += len(piece)
        if self.body_received > max_body:
            return False
        if self.body_pieces is None:
            self.body_pieces = [piece]
        else:
            self.body_pieces.append(piece)
        return True

    def take_body(self, parts):
        # type: (list[bytes]) -> None
        """The complete body: the pieces of earlier reads and ``parts``, this read's (emptied)."""
        if self.body_pieces is not None:
            self.body = b"".join(self.body_pieces + parts) if parts else b"".join(self.body_pieces)
            self.body_pieces = None
        elif not parts:
            self.body = b""
        else:
            self.body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()


class Route:
    """A model name or alias as clients say it, resolved to a provider model."""
    __slots__ = ("name", "model_cfg", "provider", "upstream", "upstream_bytes", "max_output",
                 "policy")

    def __init__(self, model_cfg, provider, upstream=None):
        # type: (ModelConfig, Provider, str | None) -> None
        self.name = model_cfg.name
        self.model_cfg = model_cfg
        self.provider = provider
        self.upstream = model_cfg.upstream_model if upstream is None else upstream
        self.upstream_bytes = self.upstream.encode()
        self.max_output = model_cfg.max_output_tokens
        self.policy = None  # type: Policy | None  # a resilience.Policy when the model configures retries, fallbacks...


class HeaderPolicy:
    """Which client headers go to providers: the configured names and name prefixes."""

    def __init__(self, names):
        # type: (Sequence[str]) -> None
        self.names = frozenset(n.encode() for n in names if not n.endswith("*"))
        self.prefixes = tuple(n[:-1].encode() for n in names if n.endswith("*"))

    def allows(self, low):
        # type: (bytes) -> bool
        # (pure Python answers a falsy () when no prefix is configured: callers read its truth)
        return low in self.names or (self.prefixes and low.startswith(self.prefixes))  # type: ignore[return-value]


class HeaderDigest:
    """What a request's headers say, as far as Sluice is concerned."""
    __slots__ = ("token", "forward_headers", "expect_continue", "has_anthropic_version",
                 "odd_content_length", "upgrade", "transfer_encoding")

    def __init__(self):
        # type: () -> None
        self.token = None  # type: bytes | None  # the key presented (Bearer or x-api-key), b"" when malformed
        self.forward_headers = b""        # the header lines the policy lets through
        self.expect_continue = False
        self.has_anthropic_version = False
        self.odd_content_length = None  # type: bytes | None  # a Content-Length spelled in an unusual case
        self.upgrade = False              # an Upgrade header
        self.transfer_encoding = None  # type: bytes | None  # its value (the values of each spelling, joined by commas)


def digest_headers(headers, policy):
    # type: (dict[bytes, bytes], HeaderPolicy) -> HeaderDigest
    """Digest a request's headers (a dict of name to value, as the client spelled them). A name
    the policy lets through is forwarded once, with its last value, however it is spelled; none
    that Connection names (hop-by-hop, RFC 9110 7.6.1)."""
    d = HeaderDigest()
    forward = {}  # type: dict[bytes, bytes]
    named = None  # type: bytes | None
    for name, value in headers.items():
        low = name.lower()
        h = CONSUMED_HEADERS.get(low)
        if h is None:
            if policy.allows(low):
                forward[low] = name + b": " + value + b"\r\n"
        elif h == H_AUTHORIZATION:
            d.token = value[7:].strip() if value[:7].lower() == b"bearer " else b""
        elif h == H_X_API_KEY:
            if d.token is None:
                d.token = value.strip()
        elif h == H_EXPECT:
            d.expect_continue = value.lower() == b"100-continue"
        elif h == H_ANTHROPIC_VERSION:
            d.has_anthropic_version = True
            if policy.allows(low):
                forward[low] = name + b": " + value + b"\r\n"
        elif h == H_CONTENT_LENGTH:
            d.odd_content_length = value
        elif h == H_UPGRADE:
            d.upgrade = True
        elif h == H_TRANSFER_ENCODING:
            te = d.transfer_encoding
            d.transfer_encoding = value if te is None else te + b"," + value
        elif h == H_CONNECTION:
            named = value if named is None else named + b"," + value
    if named is not None:
        named = named.lower()
        if named != b"keep-alive" and named != b"close":  # the common values name no field
            for option in named.split(b","):
                forward.pop(option.strip(), None)
    d.forward_headers = b"".join([line for line in forward.values()])  # (a view joins slower)
    return d
