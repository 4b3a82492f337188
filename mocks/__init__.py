"""Sluice's mock LLM provider (OpenAI and Anthropic dialects).

Run it with ``python -m mocks.server --port N``; read its merged statistics with
``mocks.stats.read_stats(stats_dir)``.
"""

__version__ = "1.2.0"
