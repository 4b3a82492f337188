"""The resilience tables of Sluice's config: every bad value a startup error naming its key,
every default as the README states it. No process is started."""
import pytest

from sluice.config import Config, ConfigError


def test_config_errors():
    base = {"providers": {"p": {"base_url": "http://127.0.0.1:1/v1"}}}
    bad = [
        {"m": {"provider": "p", "retry": {"on": ["teapot"]}}},
        {"m": {"provider": "p", "retry": {"max_attempts": -1}}},
        {"m": {"provider": "p", "retry": {"max_attempts": 101}}},
        {"m": {"provider": "p", "fallbacks": ["nope"]}},
        {"m": {"provider": "p", "fallbacks": ["m"]}},
        {"m": {"provider": "p", "deployments": [{"provider": "p"}]}},
        {"m": {"deployments": [{"provider": "p", "weight": 0}]}},
        {"m": {"deployments": [{"provider": "x"}]}},
        {"m": {"provider": "p", "outlier": {"ejection_s": 0}}},
        {"m": {"provider": "p", "outlier": {"ejection_s": 10, "max_ejection_s": 5}}},
        {"m": {"provider": "p", "outlier": {"probe_share": 0}}},
        {"m": {"provider": "p", "outlier": {"consecutive_failures": 5}}},
        {"m": {"provider": "p", "outlier": {"failure_margin": 0}}},
        {"m": {"provider": "p", "outlier": {"failure_margin": 1.5}}},
        {"m": {"provider": "p", "outlier": {"max_ejection_percent": 101}}},
        {"m": {"provider": "p", "outlier": {"window_s": 0}}},
        {"m": {"provider": "p", "outlier": {"min_requests": -1}}},
    ]
    for models in bad:
        with pytest.raises(ConfigError):
            Config(dict(base, models=models))
    for budget, key in [({"share": 0.2}, "share"), ({"capacity": 0}, "capacity"),
                        ({"capacity": 2e6}, "capacity"), ({"deposit_per_success": -1}, "deposit_per_success"),
                        ({"deposit_per_success": 11}, "deposit_per_success"),
                        ({"min_retries_per_s": "x"}, "min_retries_per_s")]:
        with pytest.raises(ConfigError, match=key):
            Config(dict(base, models={"m": {"provider": "p"}}, retry_budget=budget))
    for retry, key in [({"deadline_s": 0}, "deadline_s"), ({"deadline_s": 4000}, "deadline_s"),
                       ({"overload_backoff_min_ms": 0}, "overload_backoff_min_ms"),
                       ({"overload_backoff_max_ms": 70000}, "overload_backoff_max_ms"),
                       ({"overload_backoff_min_ms": 500, "overload_backoff_max_ms": 400},
                        "overload_backoff_min_ms")]:
        with pytest.raises(ConfigError, match=key):
            Config(dict(base, models={"m": {"provider": "p", "retry": retry}}))
    c = Config(dict(base, models={"m": {"provider": "p", "retry": {}}}))
    assert c.models["m"].retry.deadline_s == 10.0 and c.models["m"].retry.max_attempts == 0
    c = Config(dict(base, models={"m": {"provider": "p"}}))
    assert c.models["m"].retry is None and not c.models["m"].resilient
    b = c.retry_budget
    assert (b.capacity, b.deposit_per_success, b.min_retries_per_s) == (100, 0.5, 10)
