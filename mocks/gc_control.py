"""The worker's garbage-collector control (``--gc``, see ``GC_MODES``).

Importing this module starts nothing and does not import aiohttp.

By default each worker freezes its startup heap and runs Python's cyclic collector on its
own timer (small young passes every 20 ms, a full one only after its memory grew) rather
than inside whichever request crossed a threshold; ``--gc default`` leaves Python's
collector as it is, for an A/B.  Every collection's generation, pause and freed objects are
in the stats (``gc``), in every mode.

Named ``gc_control``, not ``gc``: the stdlib module it drives is ``gc``.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import sys
import time

from mocks.worker_stats import WorkerStats

_mono = time.monotonic_ns

# Python's cyclic GC runs whenever allocations cross its threshold, i.e. inside whichever
# request made them; at 1,000 connections its passes, when they ran, held the loop for 3-85 ms
# (few in a steady hold, more while connections open). A pass costs about the live objects of
# the generations it walks, and with keep-alive clients each idle connection keeps its last
# request's objects (~26) alive until its next request, so even a young pass each second walks
# ~26,000 objects (~10 ms here). "lean" (the default) therefore freezes the startup heap (never
# scanned again) and collects the young generations on the mock's own timer in small steps
# (every 20 ms: ~0.2 ms, p99 0.4 ms at 1,000 connections here), promoting what survives; the
# full pass over everything (~35 ms at 1,000 connections) runs only once the mock's peak RSS
# grew by GC_FULL_AFTER_GROWTH_MIB since the last one, or after GC_FULL_EVERY_S. It buys
# bounded pauses, not less work: ~12 ms of passes a second at ~940 req/s (about 1% of a core),
# where Python's thresholds spent 0-8 ms. Not gc.disable(): objects without cycles are freed by
# reference counting as always, cyclic garbage found young waits at most 20 ms, garbage in the
# old generation is bounded by that growth, and a burst of more than GC_BACKSTOP_OBJECTS new
# objects between two passes still gets Python's own young pass (counted as not timed).
# "freeze" is how the mock ran before (startup heap frozen, Python's thresholds); "default"
# leaves the collector as Python sets it. Every pass's pause is in the stats (gc.callbacks) in
# every mode, so they compare.
GC_MODES = ("lean", "freeze", "default")
GC_YOUNG_EVERY_S = 0.02
GC_FULL_AFTER_GROWTH_MIB = 64
GC_FULL_EVERY_S = 600.0
GC_BACKSTOP_OBJECTS = 100_000
_GC_NEVER = 1_000_000_000  # generation 1 and 2 thresholds: only the timer collects them


class GcWatch:
    """Times every collection into the worker's stats (a gc.callbacks hook); ``collect``
    runs one pass on the mock's own timer, marked as timed."""

    __slots__ = ("stats", "pass_start_ns", "timed")

    def __init__(self, stats: WorkerStats):
        self.stats = stats
        self.pass_start_ns = 0
        self.timed = False

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.pass_start_ns = _mono()
        else:
            self.stats.record_gc(info["generation"], _mono() - self.pass_start_ns, info["collected"],
                                 self.timed)

    def collect(self, generation: int) -> int:
        self.timed = True
        try:
            return gc.collect(generation)
        finally:
            self.timed = False


def start_gc_control(mode: str, stats: WorkerStats) -> GcWatch:
    """Set the collector up for ``mode`` once startup is done (see GC_MODES)."""
    if mode != "default":
        gc.collect()
        gc.freeze()  # startup objects (modules, the app, its tables) need no more scanning
    if mode == "lean":
        gc.set_threshold(GC_BACKSTOP_OBJECTS, _GC_NEVER, _GC_NEVER)
    watch = GcWatch(stats)
    gc.callbacks.append(watch)
    return watch


def _peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux; one syscall


async def gc_timer(watch: GcWatch) -> None:
    """Lean mode's passes: young every GC_YOUNG_EVERY_S; full once the peak RSS grew by
    GC_FULL_AFTER_GROWTH_MIB or GC_FULL_EVERY_S passed (each full one also logged to stderr)."""
    last_full = time.monotonic()
    peak_after_full = _peak_rss_kib()
    while True:
        await asyncio.sleep(GC_YOUNG_EVERY_S)
        grown_kib = _peak_rss_kib() - peak_after_full
        if grown_kib < GC_FULL_AFTER_GROWTH_MIB * 1024 and time.monotonic() - last_full < GC_FULL_EVERY_S:
            watch.collect(1)
            continue
        started_ns = _mono()
        freed = watch.collect(2)
        print(f"sluice-mock: gc full pass {(_mono() - started_ns) / 1e6:.2f} ms, {freed} objects freed "
              f"(peak RSS +{grown_kib / 1024:.0f} MiB since the last one)", file=sys.stderr, flush=True)
        last_full = time.monotonic()
        peak_after_full = _peak_rss_kib()
