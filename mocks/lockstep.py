"""The mock provider in lockstep, for counting a gateway's work per request (harness/run/count_system.py).

The timed mock (``mocks.server``) answers on its own clock; this one answers only when its caller
says so, in the caller's thread, on blocking sockets: it accepts the gateway's connections, hands
over each complete request, and sends an answer, or a streamed answer one frame at a time, when
told. The counting driver sends a frame only after its client has received the previous one, so
every frame reaches the gateway as a read of its own and every request wakes the gateway's loop
the same way each time: the count per request does not depend on the machine's timing.

Bodies are the timed mock's (``mocks.bodies``), in the dialect the request's path names.
"""
from __future__ import annotations

import selectors
import socket
from dataclasses import dataclass

import orjson
from httptools import HttpParserError, HttpRequestParser

from mocks.bodies import Renderer, prompt_tokens

ANTHROPIC_PATH = b"/v1/messages"
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
               b"transfer-encoding: chunked\r\n\r\n")
READ_BYTES = 65536


@dataclass
class ProviderRequest:
    conn: socket.socket
    path: bytes
    body: bytes

    @property
    def dialect(self) -> str:
        return "anthropic" if self.path.split(b"?", 1)[0] == ANTHROPIC_PATH else "openai"

    def json(self) -> dict:
        try:
            doc = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return {}
        return doc if isinstance(doc, dict) else {}


class _Connection:
    """One gateway connection: its parser and the requests it has completed."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.parser = HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.done: list[ProviderRequest] = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done.append(ProviderRequest(self.sock, self.url, b"".join(self.body)))
        self.url, self.body = b"", []


class LockstepProvider:
    """Listens on 127.0.0.1; a send blocks at most ``timeout_s``. Not thread-safe: one driver."""

    def __init__(self, response_tokens: int = 10, stream_chunks: int = 10, timeout_s: float = 60.0,
                 port: int = 0):
        self.response_tokens = response_tokens
        self.stream_chunks = stream_chunks
        self.timeout_s = timeout_s
        self.renderer = Renderer()
        self.listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.connections: dict[int, _Connection] = {}
        self.accepted = 0
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        for c in list(self.connections.values()):
            c.sock.close()
        self.connections.clear()
        self.selector.close()
        self.listener.close()

    def poll(self, timeout_s: float, on_other=None) -> list[ProviderRequest]:
        """Wait up to timeout_s for the sockets: accept the gateway's connections, read its
        requests, and call ``on_other()`` for a socket the caller registered on ``selector``.
        The requests completed so far, oldest first ([] when none)."""
        for key, _ in self.selector.select(timeout_s):
            if key.fileobj is self.listener:
                self._accept()
            elif key.fd in self.connections:
                self._read(self.connections[key.fd])
            elif on_other is not None:
                on_other()
        done = []
        for c in self.connections.values():
            done += c.done
            c.done = []
        self.requests += len(done)
        return done

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(True)
        sock.settimeout(self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections[sock.fileno()] = _Connection(sock)
        self.selector.register(sock, selectors.EVENT_READ)
        self.accepted += 1

    def _read(self, c: _Connection) -> None:
        try:
            data = c.sock.recv(READ_BYTES)
        except OSError:
            data = b""
        if data:
            try:
                c.parser.feed_data(data)
                return
            except HttpParserError:
                pass
        self.selector.unregister(c.sock)
        del self.connections[c.sock.fileno()]
        c.sock.close()

    # ------------------------------------------------------------------ answers
    def _tokens(self, req: ProviderRequest) -> tuple[str, int]:
        doc = req.json()
        messages = doc.get("messages")
        return (str(doc.get("model") or "mock-model"),
                prompt_tokens(messages if isinstance(messages, list) else [], doc.get("system")))

    def answer(self, req: ProviderRequest, rid: bytes) -> None:
        """A whole unary answer in the request's dialect."""
        model, in_tokens = self._tokens(req)
        if req.dialect == "anthropic":
            body = self.renderer.anthropic_unary(rid, model, self.response_tokens, in_tokens)
        else:
            body = self.renderer.openai_unary(rid, model, self.response_tokens, in_tokens)
        req.conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)

    def stream_parts(self, req: ProviderRequest, rid: bytes) -> list[bytes]:
        """The streamed answer's writes: the head with the first frame, one per content piece,
        and the end with the chunked terminator; the caller sends them one by one."""
        model, in_tokens = self._tokens(req)
        if req.dialect == "anthropic":
            first, middle, last = self.renderer.anthropic_stream(
                rid, model, self.response_tokens, self.stream_chunks, in_tokens)
        else:
            first, middle, last = self.renderer.openai_stream(
                rid, model, self.response_tokens, self.stream_chunks, in_tokens, False)
        return ([STREAM_HEAD + _chunk(first)] + [_chunk(m) for m in middle]
                + [_chunk(last) + b"0\r\n\r\n"])


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
