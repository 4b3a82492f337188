"""The hostile side of soak_hostile.py: raw-socket attacks on Sluice, the kinds the hostile tests
send one at a time (gateways/sluice/tests/test_sluice_hostile_*.py), and a lying provider.

Each attack opens one connection, does its harm, and waits for Sluice to answer or close,
at most its deadline plus ``overrun_cap_s``. It returns an ``Outcome``: the status of the
first answer (if any), whether Sluice closed the connection, and how long past its deadline
the connection stayed open or unanswered. An attack's deadline is the Sluice limit that
should end it: the head, body or idle timeout, or ``prompt_s`` for limits answered on
arrival (431, 414, 413, 400)."""
import asyncio
import json
import socket
import struct
import time

TCP_CLOSE_WAIT = 8   # Linux tcp_info state: the peer sent its FIN
TCP_CLOSE = 7        # the peer reset the connection
CHAT_PATH = b"/v1/chat/completions"


class Outcome:
    __slots__ = ("status", "closed", "overrun_s", "error")

    def __init__(self, status=None, closed=False, overrun_s=0.0, error=None):
        self.status = status        # the first answer's status code, or None
        self.closed = closed        # Sluice closed (or reset) the connection
        self.overrun_s = overrun_s  # open or unanswered past the deadline, in seconds
        self.error = error          # what failed on the attacker's side (connect refused, ...)


class Limits:
    """The deadlines the attacks are held to (Sluice's configured ones)."""

    def __init__(self, header_s, body_s, idle_s, prompt_s, provider_s, overrun_cap_s):
        self.header_s = header_s
        self.body_s = body_s
        self.idle_s = idle_s
        self.prompt_s = prompt_s          # answered on arrival (a size limit, a bad body)
        self.provider_s = provider_s      # the lying provider's response and stream timeouts
        self.overrun_cap_s = overrun_cap_s


def chat_request(key, model, body=None, headers=b""):
    body = body if body is not None else json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}).encode()
    return (b"POST " + CHAT_PATH + b" HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + key.encode()
            + b"\r\ncontent-type: application/json\r\n" + headers
            + b"content-length: %d\r\n\r\n" % len(body) + body)


def _status(buf):
    if buf.startswith(b"HTTP/1.") and len(buf) >= 12:
        try:
            return int(buf[9:12])
        except ValueError:
            return None
    return None


def _peer_closed(sock):
    """Whether the peer closed or reset ``sock``, without reading from it (Linux tcp_info)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return True
    return struct.unpack("B", info[:1])[0] in (TCP_CLOSE_WAIT, TCP_CLOSE)


class Attack:
    """One connection's attack: ``harm`` sends, then the outcome is awaited."""

    def __init__(self, port, limits, key, model):
        self.port = port
        self.limits = limits
        self.key = key
        self.model = model

    async def run(self, name):
        t0 = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
        except (OSError, asyncio.TimeoutError) as e:
            return Outcome(error=f"connect: {e!r}")
        try:
            return await getattr(self, name)(reader, writer, t0)
        except (OSError, asyncio.IncompleteReadError) as e:
            return Outcome(closed=True, error=None if isinstance(e, ConnectionError) else repr(e))
        finally:
            writer.transport.abort()

    # -- waiting for Sluice
    async def _answer_or_close(self, reader, t0, deadline_s, until_close):
        """Read until the first status line (and EOF when ``until_close``); the outcome."""
        buf = b""
        give_up = t0 + deadline_s + self.limits.overrun_cap_s
        status = None
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                return Outcome(status, False, self.limits.overrun_cap_s)
            try:
                data = await asyncio.wait_for(reader.read(65536), left)
            except asyncio.TimeoutError:
                continue
            except ConnectionError:
                data = b""
            if not data:
                return Outcome(status, True, max(0.0, time.monotonic() - t0 - deadline_s))
            if status is None:
                buf += data
                status = _status(buf)
                if status is not None and not until_close:
                    return Outcome(status, False, max(0.0, time.monotonic() - t0 - deadline_s))

    async def _closed_unread(self, writer, t0, deadline_s):
        """Wait, reading nothing, until Sluice closes the connection; the outcome."""
        sock = writer.get_extra_info("socket")
        give_up = t0 + deadline_s + self.limits.overrun_cap_s
        while time.monotonic() < give_up:
            if _peer_closed(sock):
                return Outcome(None, True, max(0.0, time.monotonic() - t0 - deadline_s))
            await asyncio.sleep(0.1)
        return Outcome(None, False, self.limits.overrun_cap_s)

    async def _trickle(self, reader, writer, t0, prefix, byte, deadline_s):
        """``prefix``, then ``byte`` every 0.2 s until Sluice answers and closes."""
        writer.write(prefix)
        give_up = t0 + deadline_s + self.limits.overrun_cap_s
        while time.monotonic() < give_up:
            try:
                data = await asyncio.wait_for(reader.read(65536), 0.2)
            except asyncio.TimeoutError:
                writer.write(byte)
                continue
            if not data:
                return Outcome(None, True, max(0.0, time.monotonic() - t0 - deadline_s))
            return await self._answer_after(reader, t0, deadline_s, data)
        return Outcome(None, False, self.limits.overrun_cap_s)

    async def _answer_after(self, reader, t0, deadline_s, first):
        outcome = await self._answer_or_close(reader, t0, deadline_s, until_close=True)
        outcome.status = _status(first)
        return outcome

    async def _flood(self, writer, piece, total):
        """Send ``piece`` until ``total`` bytes went out or Sluice stops taking them."""
        sent = 0
        while sent < total:
            writer.write(piece)
            sent += len(piece)
            try:
                await asyncio.wait_for(writer.drain(), 2.0)
            except (asyncio.TimeoutError, ConnectionError):
                return

    # -- the attacks: each is (reader, writer, t0) -> Outcome
    async def slowloris_head(self, reader, writer, t0):
        return await self._trickle(reader, writer, t0, b"GET /health HTTP/1.1\r\nHo", b"s",
                                   self.limits.header_s)

    async def slow_body(self, reader, writer, t0):
        """A head declaring 100 kB, then the body a byte every 0.2 s."""
        head = (b"POST " + CHAT_PATH + b" HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                + self.key.encode() + b"\r\ncontent-length: 100000\r\n\r\n")
        return await self._trickle(reader, writer, t0, head + b'{"model": "', b" ", self.limits.body_s)

    async def idle_connection(self, reader, writer, t0):
        return await self._closed_unread(writer, t0, self.limits.idle_s)

    async def huge_head(self, reader, writer, t0):
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nx-big: ")
        await self._flood(writer, b"a" * 65536, 1 << 20)
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=True)

    async def too_many_headers(self, reader, writer, t0):
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n"
                     + b"".join(b"x-h%d: 1\r\n" % i for i in range(150)) + b"\r\n")
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=True)

    async def long_url(self, reader, writer, t0):
        writer.write(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=True)

    async def oversized_body(self, reader, writer, t0):
        writer.write(b"POST " + CHAT_PATH + b" HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                     + self.key.encode() + b"\r\ncontent-length: 100000000\r\n\r\n")
        await self._flood(writer, b"x" * 65536, 4 << 20)
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=True)

    async def oversized_chunked_body(self, reader, writer, t0):
        writer.write(b"POST " + CHAT_PATH + b" HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                     + self.key.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n")
        await self._flood(writer, b"10000\r\n" + b"x" * 65536 + b"\r\n", 8 << 20)  # twice the 4 MiB default
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=True)

    async def endless_trailers(self, reader, writer, t0):
        """A complete chunked body, then trailer lines that never end."""
        body = chat_request(self.key, self.model).partition(b"\r\n\r\n")[2]
        head = (b"POST " + CHAT_PATH + b" HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                + self.key.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n")
        return await self._trickle(reader, writer, t0, head + b"%x\r\n%s\r\n0\r\n" % (len(body), body),
                                   b"x-trailer: 1\r\n", self.limits.body_s)

    async def pipelined_flood(self, reader, writer, t0):
        """20,000 pipelined requests, never read: Sluice must stop reading and, once its answers
        stop moving, close (client_send_timeout_s, set to the idle timeout), not pile answers up."""
        writer.write(b"GET /n HTTP/1.1\r\n\r\n" * 20000)
        return await self._closed_unread(writer, t0, self.limits.idle_s)

    async def never_reads(self, reader, writer, t0):
        """16 pipelined chat requests (provider work, as many as Sluice queues by default), never
        read: once answered the connection is idle, and the idle timeout must close it."""
        writer.write(chat_request(self.key, self.model) * 16)
        return await self._closed_unread(writer, t0, self.limits.idle_s + self.limits.prompt_s)

    async def abrupt_reset(self, reader, writer, t0):
        """A chat request, then a reset before its answer: no deadline (the client ends it)."""
        writer.write(chat_request(self.key, self.model))
        await writer.drain()
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                   struct.pack("ii", 1, 0))
        return Outcome()

    async def invalid_json(self, reader, writer, t0):
        writer.write(chat_request(self.key, self.model, body=b'{"model": "' + self.model.encode()
                                  + b'", "messages": [{"role": '))
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=False)

    async def duplicate_model_keys(self, reader, writer, t0):
        body = (b'{"model": "not-allowed", "model": "' + self.model.encode()
                + b'", "messages": [{"role": "user", "content": "x"}]}')
        writer.write(chat_request(self.key, self.model, body=body))
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=False)

    async def smuggled_length(self, reader, writer, t0):
        """Content-Length and Transfer-Encoding together (request smuggling)."""
        writer.write(b"POST " + CHAT_PATH + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
                     b"transfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\n\r\n")
        return await self._answer_or_close(reader, t0, self.limits.prompt_s, until_close=True)

    async def lying_provider(self, reader, writer, t0):
        """A chat request routed to the lying provider: answered (whatever the status) or closed
        within the provider's timeouts."""
        writer.write(chat_request(self.key, "lying-model"))
        return await self._answer_or_close(reader, t0, self.limits.provider_s + self.limits.prompt_s,
                                           until_close=False)


ATTACKS = ("slowloris_head", "slow_body", "idle_connection", "huge_head", "too_many_headers",
           "long_url", "oversized_body", "oversized_chunked_body", "endless_trailers",
           "pipelined_flood", "never_reads", "abrupt_reset", "invalid_json",
           "duplicate_model_keys", "smuggled_length")


# ------------------------------------------------------------------ the lying provider
LIES = ("trailing_bytes", "absurd_usage", "short_body", "silent_head", "bad_content_length")
_ANSWER = json.dumps({"id": "chatcmpl-liar", "object": "chat.completion", "created": 1,
                      "model": "lying-model", "choices": [{"index": 0, "message": {
                          "role": "assistant", "content": "trust me"}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}).encode()


def _lie(kind):
    """(the bytes a lying provider answers with, whether it then closes the connection)."""
    ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    if kind == "trailing_bytes":   # a second, unasked-for response after the answer
        return ok % len(_ANSWER) + _ANSWER + b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nextra", False
    if kind == "absurd_usage":
        body = _ANSWER.replace(b'"prompt_tokens": 9', b'"prompt_tokens": 1000000000000000')
        return ok % len(body) + body, False
    if kind == "short_body":       # fewer bytes than its Content-Length, then a close
        return ok % (len(_ANSWER) + 500) + _ANSWER, True
    if kind == "silent_head":      # a head, then nothing: the stream idle timeout ends it
        return ok % len(_ANSWER), False
    return b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n", True


def serve_lying_provider(port, latency_ms):
    """A provider that lies in turn (``LIES``), one lie per request, on keep-alive connections,
    after ``latency_ms`` (as the honest provider: its clients' share of requests is their share
    of the clients)."""
    turn = [0]

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                low = head.lower()
                i = low.find(b"content-length:")
                n = int(low[i + 15:low.find(b"\r\n", i)]) if i >= 0 else 0
                await reader.readexactly(n)
                await asyncio.sleep(latency_ms / 1000)
                kind = LIES[turn[0] % len(LIES)]
                turn[0] += 1
                data, close = _lie(kind)
                writer.write(data)
                await writer.drain()
                if close:
                    break
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
