"""A provider over a raw socket whose answer is a script: a function given the connection and the
request, that writes what it likes, when it likes. It records whether Sluice closed the
connection under it, so a test can see a provider connection discarded."""
import re
import socket
import threading
import time


class RawListener:
    """A provider's listening socket on loopback; each connection is served by ``_serve`` in a
    thread of its own. A subclass sets its attributes before calling ``__init__`` (the accept
    thread starts there)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def close(self):
        self.sock.close()

    def _requests(self, c):
        """Each request read from connection ``c`` (head, body), recorded in ``self.requests``,
        until it closes."""
        c.settimeout(30)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                piece = c.recv(65536)
                if not piece:
                    return
                buf += piece
            head, _, buf = buf.partition(b"\r\n\r\n")
            n = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))
            while len(buf) < n:
                buf += c.recv(65536)
            self.requests.append((head, buf[:n]))
            yield head, buf[:n]
            buf = buf[n:]


class ScriptedProvider(RawListener):
    def __init__(self, script):
        self.script = script          # script(provider, conn, head, body); may be replaced between requests
        self.requests = []
        self.closed_by_sluice = 0     # connections Sluice closed while the script was writing or waiting
        self.stopped = threading.Event()
        super().__init__()

    def _serve(self, c):
        try:
            for head, body in self._requests(c):  # one request a connection
                self.script(self, c, head, body)
                break
        except OSError:
            self.closed_by_sluice += 1
        finally:
            c.close()

    def hold(self, c, seconds):
        """Keep ``c`` open, silent, for up to ``seconds``; True when Sluice closed it first."""
        c.settimeout(0.1)
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.stopped.is_set():
            try:
                if c.recv(4096) == b"":
                    self.closed_by_sluice += 1
                    return True
            except socket.timeout:
                continue
            except OSError:
                self.closed_by_sluice += 1
                return True
        return False

    def close(self):
        self.stopped.set()
        super().close()


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def read_until_closed(s, seconds):
    """What ``s`` receives until the peer closes it, and whether it did within ``seconds``."""
    s.settimeout(0.5)
    buf = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            piece = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return buf, True
        if not piece:
            return buf, True
        buf += piece
    return buf, False
