"""Sluice's mock LLM provider (OpenAI and Anthropic dialects).

Run it with ``python -m mocks.server --port N`` (its modules, one job each: the
``mocks.server`` docstring); read its merged statistics with
``mocks.stats.read_stats(stats_dir)`` and its per-request log with
``mocks.request_log.read_request_log(stats_dir)``.  Nothing here imports ``harness`` or
``report``.
"""

__version__ = "1.3.0"
