"""Every request carries its own id: the x-request-id header (first of ours, so it sits in the
first bytes a capture keeps) and `[rid:<id>]` in the body's slot (for systems that drop headers).
Ids are `<run>-<pid>-<salt>-<seq>`, 1-64 chars of [A-Za-z0-9._:-]: the pid and a random salt keep
processes apart."""
from __future__ import annotations

import os
import re

from harness.files import producers
from harness.model.load_settings import LoadSettings

# The run id's first this many chars begin every id (the rest: pid, salt, sequence).
RUN_ID_MAX_CHARS = 32
SALT_BYTES = 2


class RequestIds:
    """The run's body and headers, each request's id put in."""

    def __init__(self, settings: LoadSettings):
        self.run = re.sub(r"[^A-Za-z0-9._:-]", ".", settings.run_id)[:RUN_ID_MAX_CHARS]
        body = producers.read_body(settings.body_file)
        head, _, tail = body.partition(settings.rid_slot.encode())
        self.body_head, self.body_tail = head + b"[rid:", b"] " + tail
        self.headers = {"Content-Type": "application/json", **settings.headers}
        self.prefix = None
        self.seq = 0

    def begin(self) -> None:
        """This process's prefix; taken at Locust's init, after --processes has forked (a prefix
        taken on import would be the same in every forked process)."""
        self.prefix = "%s-%d-%s-" % (self.run, os.getpid(), os.urandom(SALT_BYTES).hex())
        self.seq = 0

    def next(self) -> tuple[str, dict, bytes]:
        """(request id, headers, body) of the next request."""
        if self.prefix is None:
            self.begin()
        self.seq += 1
        rid = self.prefix + str(self.seq)
        return rid, {"x-request-id": rid, **self.headers}, self.body_head + rid.encode() + self.body_tail
