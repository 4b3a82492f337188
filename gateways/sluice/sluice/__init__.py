"""Sluice: an in-house LLM API gateway (asyncio Protocols on uvloop, httptools, orjson)."""

__version__ = "0.1.0"
