"""The statistics of a study, computed from the raw artifacts only (artifacts/README.md).

Everything here is a pure function over the Parquet rows, the samples and the manifests of one
study directory: no Locust summary, no rounding before the end. The run is the unit: each figure
is computed per run, then summarised across the runs of a system, then compared with a reference
system.

Definitions (the report's methodology prints the same text, from ``DEFINITIONS``):

* measured window: ``[hold_start, hold_end)`` from the run manifest's ``phases``; a request belongs
  to it when its ``start_t_unix_s`` falls inside (the same rows as ``phase == "hold"``);
* latency percentiles: over the window's successful requests (``error_kind == ""``), numpy's
  default linear interpolation;
* throughput: successful requests started in the window / the window's length;
* overhead vs mock: a latency percentile minus the mock's set latency;
* overhead vs floor: a latency percentile minus the same percentile of the floor system (the
  one whose gateway.toml role is "floor"; mean over its completed runs) at the same user count
  (bins of ``bin_users``);
* CPU-ms per request: the ``system`` role's ``cpu_seconds_total`` difference over the window
  (linearly interpolated at the window's edges) × 1000 / requests started in the window;
* memory (``system`` role, tree-summed RSS): idle = median before the load starts, peak = max over
  the run, steady = median during the window, recovered = the last sample after the load ended.
"""
# The public names, for ``from harness import stats`` in notebooks and tests; code in the
# repository imports from the module that defines a name.
from harness.files.readers import ArtifactError, IntegrityError  # noqa: F401
from harness.stats.across import (  # noqa: F401
    Verdict,
    compare,
    describe,
    ratio_with_sd,
    roles,
    system_labels,
    system_summary,
    verdict,
)
from harness.stats.definitions import DEFINITIONS, ERROR_KINDS, PERCENTILES  # noqa: F401
from harness.stats.feature_cost import feature_cost, feature_runs  # noqa: F401
from harness.stats.loading import Study, load_study, system_order  # noqa: F401
from harness.stats.open_loop import (  # noqa: F401
    OPEN_LOOP_DEFINITIONS,
    is_open_loop,
    open_loop_capacity,
    open_loop_steps,
)
from harness.stats.outcomes import Basis, Label, Outcome  # noqa: F401
from harness.stats.ramp import ramp_curve, rss_timeline  # noqa: F401
from harness.stats.runs import classify, other_cpu, run_summary, window_rows  # noqa: F401
from harness.stats.streaming import stream_summary  # noqa: F401
