"""The in-flight lane's abandon wave, in each load-generating process: the streams its users are
reading now, and, when the shape's message says a step's abandon phase has begun, a share of them
closed by the client mid-stream (chosen by the run's seed, the step and the process). The socket
is closed here, at once: its user wakes with the stream gone, records its row as abandoned with
this close time, and waits for the next step before it sends again."""
from __future__ import annotations

import os
import random
import time

MESSAGE = "abandon"


class Streams:
    """The open streams of this process's users: user -> its response while it reads it."""

    def __init__(self, seed: int):
        self.seed = seed
        self.reading: dict = {}        # user -> the response it is reading
        self.left: dict = {}           # user -> (close time, resume time) of its abandoned stream

    def open(self, user, response) -> None:
        self.reading[user] = response

    def close(self, user) -> tuple[float, float] | None:
        """The user stopped reading; (close time, resume time) when the client left it."""
        self.reading.pop(user, None)
        return self.left.pop(user, None)

    def on_message(self, environment=None, msg=None, **kwargs) -> None:
        """Locust's custom message (the master's, or the local runner's own)."""
        self.abandon(int(msg.data["step"]), float(msg.data["share"]), float(msg.data["resume_t"]))

    def abandon(self, step: int, share: float, resume_t: float) -> int:
        """Close ``share`` of the streams open now; how many were closed. Runs without yielding
        to another greenlet: every stream it sees is still being read."""
        users = list(self.reading)  # in the order their streams opened
        draws = random.Random(f"{self.seed}-{step}-{os.getpid()}")
        chosen = draws.sample(users, round(share * len(users)))
        for user in chosen:
            response = self.reading.pop(user)
            raw = getattr(response, "_response", None)
            sock, pool = (getattr(raw, "_sock", None), getattr(raw, "_pool", None))
            if sock is None:
                continue
            # taken from the response first, so nothing returns the closed socket to its pool
            raw._sock = raw._pool = None
            self.left[user] = (time.time(), resume_t)
            if pool is not None:
                pool.release_socket(sock)  # closes it and frees the pool's slot
            else:
                sock.close()
        return len(chosen)
