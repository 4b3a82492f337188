"""Memory shared by the worker processes (a memfd mapped by each of them).

Layout: one 10-int64 slot per (virtual key, worker) for rate-limit windows, token budgets and
requests in flight (fields in keys.py), then one snapshot area per worker for /metrics aggregation,
then one float64 per (model deployment, worker): until when (perf_counter, a clock every process on
the host shares) the deployment asked, by Retry-After, not to be retried (resilience.py). Every
worker writes only its own slots, so no lock is needed; readers sum (or take the latest) over
workers (see keys.py for the small overshoot this allows). With several workers the supervisor owns
the memfd, so the memory outlives any worker.
"""
from __future__ import annotations

import mmap
import os
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.config import Config

SLOT_FIELDS = 10
SNAPSHOT_BYTES = 256 * 1024
_HDR = struct.Struct("<QQ")  # sequence, length


def snapshot_bytes(cfg: Config) -> int:
    """Room for one worker's snapshot: it grows with the labels the config allows (models with
    every status, providers with every error kind, keys with their token counts)."""
    # a model label can carry every status a provider may relay (about 500, 40 bytes each)
    size = SNAPSHOT_BYTES + 24 * 1024 * len(cfg.models) + 1024 * (len(cfg.providers) + len(cfg.keys))
    return (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


def deployment_slots(cfg: Config) -> int:
    """The model deployments of ``cfg``, each with its row of Retry-After deadlines."""
    return sum(len(m.deployments) for m in cfg.models.values())


def _size(n_keys: int, n_workers: int, snap: int, n_deployments: int) -> tuple[int, int]:
    key_bytes = max(1, n_keys) * n_workers * SLOT_FIELDS * 8
    key_bytes = (key_bytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
    return key_bytes, key_bytes + n_workers * snap + max(1, n_deployments) * n_workers * 8


class Shared:
    def __init__(self, n_keys: int, n_workers: int, snap: int = SNAPSHOT_BYTES, fd: int | None = None,
                 n_deployments: int = 0) -> None:
        self.n_workers = n_workers
        self.snap = snap
        self.key_bytes, size = _size(n_keys, n_workers, snap, n_deployments)
        self.fd = fd
        if fd is None and n_workers > 1:
            self.fd = fd = os.memfd_create("sluice-shared", 0)
            os.ftruncate(fd, size)
        if fd is None:
            self.mm = mmap.mmap(-1, size)
        else:
            self.mm = mmap.mmap(fd, size)
        self.q = memoryview(self.mm)[:self.key_bytes].cast("q")
        # Retry-After deadlines: row d, column worker (see resilience.share_retry_after)
        self.retry_after = memoryview(self.mm)[self.key_bytes + n_workers * snap:size].cast("d")

    # -- per-worker metrics snapshots (seqlock) --
    def write_snapshot(self, worker: int, data: bytes) -> None:
        off = self.key_bytes + worker * self.snap
        if len(data) > self.snap - _HDR.size:
            data = b""  # too large to publish (readers skip it); its counters stay in this worker
        seq, _ = _HDR.unpack_from(self.mm, off)
        _HDR.pack_into(self.mm, off, seq + 1, 0)
        self.mm[off + 16:off + 16 + len(data)] = data
        _HDR.pack_into(self.mm, off, seq + 2, len(data))

    def read_snapshot(self, worker: int) -> bytes | None:
        off = self.key_bytes + worker * self.snap
        for _ in range(5):
            seq, length = _HDR.unpack_from(self.mm, off)
            if seq & 1:
                continue
            data = self.mm[off + 16:off + 16 + length]
            seq2, _ = _HDR.unpack_from(self.mm, off)
            if seq == seq2:
                return data if length else None
        return None

    def clear_snapshot(self, worker: int) -> None:
        off = self.key_bytes + worker * self.snap
        seq, _ = _HDR.unpack_from(self.mm, off)
        _HDR.pack_into(self.mm, off, seq + (2 if seq % 2 == 0 else 1), 0)
