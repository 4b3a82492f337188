"""Relaying a same-dialect response: its head rebuilt for the client (the allowed provider
headers, the overhead header, the framing), and sent together with the body bytes of the read
that completed it, nothing past the response's end."""
from sluice.http import chunked_end, content_length_at, drop_lines


def relay_head(u, req, head, low, length_at, rest, reframe, now):
    """The head of ``u``'s response as the client gets it. RAW: kept until the read is parsed
    (``u.pending_head``, see ``write_head``); re-framed: written now."""
    app = u.app
    keep = req.keep_alive and not app.stopping
    # only the allowed provider headers reach the client (hop-by-hop ones never do)
    m = u.provider.response_filter.search(low)
    if m is not None:
        head = drop_lines(head, low, u.provider.response_filter, m)
    if reframe:  # a close-delimited body, or an HTTP/1.0 client: the framing is Sluice's own
        u.chunked_to_client = req.http11
        if not req.http11:
            keep = False
        head = b"\r\n".join([ln for ln in head.split(b"\r\n")
                             if not ln.lower().startswith((b"transfer-encoding:", b"content-length:"))])
        if u.chunked_to_client:
            head += b"transfer-encoding: chunked\r\n"
    req.keep_alive = keep
    extra = b"" if keep else b"connection: close\r\n"
    us = req.overhead_us = (req.own_time + (now - u.t_rx)) * 1e6
    if app.overhead_header:
        extra = b"x-gateway-overhead-us: %d\r\n" % us + extra
    if not reframe:
        u.pending_head = (head, extra, rest, low, length_at)  # written once the read is parsed
        return
    if length_at >= 0:
        u.body_left = content_length_at(low, length_at) - len(rest)
    u.client_head_sent = True
    u.client.write(b"".join((head, extra, b"\r\n")))


def write_head(u, client, past_end):
    """The relayed head and the body bytes of its read, written once the read is parsed (one
    send for both): nothing past the response's end goes out. True when the exchange failed
    instead."""
    head, extra, rest, low, length_at = u.pending_head
    u.pending_head = None
    if u.response_open:  # the body goes on in later reads
        u.body_left = content_length_at(low, length_at) - len(rest) if length_at >= 0 else -1
    elif past_end:
        u.no_reuse = True
        end = content_length_at(low, length_at) if length_at >= 0 else chunked_end(rest)
        if end < 0:
            u.app.metrics.upstream_error(u.provider.name, "bad_response")
            u.fail(502, f"provider {u.provider.name} sent bytes after its response")
            return True
        rest = rest[:end]
    if u.usage_scan is not None and rest:
        u.usage_scan.feed(rest)
    u.client_head_sent = True
    client.write(b"".join((head, extra, b"\r\n", rest)))
    return False
