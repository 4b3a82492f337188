"""Every bound the operator's manual documents is the code's: the configuration reference's
tables (default and bounds of each key) and the Limits table (each configurable limit's
default, and bounds where a row gives them) are read from docs/sluice/ and compared with what
the configuration itself declares, recorded by loading a configuration through its own checks."""
import math
import os
import re

import pytest
from sluice_helpers import SLUICE_DIR

from sluice import config, config_server

DOCS = os.path.join(SLUICE_DIR, "..", "..", "docs", "sluice")

# A configuration that reaches every table (and so every declared key)
TABLE = {
    "server": {},
    "providers": {"p": {"base_url": "http://127.0.0.1:9/v1"}},
    "models": {"m": {"deployments": [{"provider": "p"}], "retry": {}, "outlier": {}}},
    "keys": {"k": {"key": "sk-k"}},
    "retry_budget": {}, "prompt_estimate": {}, "token_weights": {},
}

# keys whose documented default is prose (another key's value, a condition): the bounds still count
PROSE_DEFAULTS = {"request_timeout_s@model", "max_in_flight", "metrics_per_key", "require_auth",
                  "key", "key_env", "key_sha256", "api_key", "api_key_env", "base_url", "provider",
                  "upstream_model"}


def _declared():
    """{key: {table: (kind, default, minimum, maximum)}} as the configuration checks them."""
    seen = {}
    modules = (config, config_server)
    saved = {m: (m._num, m._bool, m._str) for m in modules}

    def table_of(where):
        return re.sub(r"\.(NAME|p|m|k)\b", "", re.sub(r"\[(\w+)\.\w+\]", r"[\1]", where))

    def num(t, key, default, where, minimum=0.0, integer=False, maximum=None):
        seen.setdefault(key, {})[table_of(where)] = ("num", default, minimum, maximum)
        return saved[config][0](t, key, default, where, minimum, integer=integer, maximum=maximum)

    def boolean(t, key, default, where):
        seen.setdefault(key, {})[table_of(where)] = ("bool", default, None, None)
        return saved[config][1](t, key, default, where)

    def string(t, key, default, where):
        seen.setdefault(key, {})[table_of(where)] = ("str", default, None, None)
        return saved[config][2](t, key, default, where)

    try:
        for m in modules:
            m._num, m._bool, m._str = num, boolean, string
        config.Config(TABLE)
    finally:
        for m in modules:
            m._num, m._bool, m._str = saved[m]
    return seen


DECLARED = _declared()
ALL_KEYS = {k for cls in (config_server.ServerConfig, config.ProviderConfig, config.ModelConfig,
                          config.DeploymentConfig, config.RetryConfig, config.OutlierConfig,
                          config.KeyConfig, config.RetryBudgetConfig, config.PromptEstimateConfig,
                          config.TokenWeightsConfig) for k in cls.KEYS}
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
NUMBER = r"(\d[\d,]*(?:\.\d+)?)(?:\s*(KiB|MiB|GiB))?"


def _numbers(text):
    """The numbers of ``text`` (thousands commas and binary units read)."""
    return [float(n.replace(",", "")) * UNITS.get(u, 1) for n, u in re.findall(NUMBER, text)]


def _bounds(text):
    """(minimum, maximum) a bounds cell says, each None when it says none; None when it says
    no numeric bound at all ("a configured provider", or a bound that is another key)."""
    text = text.replace("`", "")
    m = re.match(rf"{NUMBER}\s+to\s+{NUMBER}", text)
    if m:
        return _numbers(m.group(0))[0], _numbers(m.group(0))[1]
    m = re.match(rf"≥\s*{NUMBER}(?:,\s*to\s+{NUMBER})?", text)
    if m:
        nums = _numbers(m.group(0))
        return nums[0], nums[1] if len(nums) > 1 else None
    m = re.match(r"≥\s*[a-z_]+,\s*to\s+" + NUMBER, text)   # "≥ ejection_s, to 86400": only a maximum
    if m:
        return "key", _numbers(m.group(0))[0]
    return None


def _rows(page):
    """(section, [cells]) of every table row of ``page`` but headers and rules; the section is the
    last heading, or lead-in line naming a table (`` `[models.NAME.retry]` ...``), before it."""
    section = ""
    with open(os.path.join(DOCS, page)) as f:
        for line in f:
            if line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if cells[0] in ("key", "limit") or set(cells[0]) <= set("-: "):
                    continue
                yield section, cells
            elif line.startswith(("#", "`[")):
                section = line.strip()


def _code(key, table):
    """What the configuration declares for ``key`` in ``table`` (None: not there); with no table,
    in whichever declares it, when every table that does declares it alike."""
    tables = DECLARED.get(key)
    if not tables:
        return None
    if table:
        return tables.get(table)
    if len(set(tables.values())) == 1:
        return next(iter(tables.values()))
    raise AssertionError(f"`{key}` is declared differently in {sorted(tables)}: say which table")


def _table(section):
    """The table a reference section is about, as ``_declared`` names it."""
    m = re.search(r"`\[(\w+)(?:\.NAME)?(\.retry)?\]( outlier| deployments)?", section)
    if m is None:
        return ""
    return f"[{m.group(1)}]" + (".retry" if m.group(2) else "." + m.group(3).strip() if m.group(3) else "")


def _reference_rows():
    """(page, table, keys, default cell, bounds cell) of the configuration reference's tables."""
    for page in ("configuration.md", "resilience.md"):
        for section, cells in _rows(page):
            if len(cells) != 4:
                continue
            keys = re.findall(r"`([^`]+)`", cells[0])
            table = _table(section)
            for key in keys:
                prefix = re.match(r"\[(\w+)\]\s*", key)
                if prefix:
                    table = f"[{prefix.group(1)}]"
            yield page, table, [re.sub(r"^\[\w+\]\s*", "", k) for k in keys], cells[1], cells[2]


def test_the_configuration_reference_has_every_key_and_its_default_and_bounds():
    checked = documented = 0
    problems = []
    prose = set()
    for page, table, keys, default_cell, bounds_cell in _reference_rows():
        defaults = _numbers(default_cell.split("(")[0])
        for i, key in enumerate(keys):
            declared = _code(key, table)
            if declared is None:
                if key not in ALL_KEYS:
                    problems.append(f"{page}: `{key}` is documented but the configuration has no such key")
                continue  # a table, a list, a key given instead of another: not a scalar declared here
            documented += 1
            kind, default, minimum, maximum = declared
            label = key + ("@model" if table == "[models]" and key == "request_timeout_s" else "")
            if kind == "bool":
                said = re.match(r"`(true|false)`$", default_cell)
                if said is None:
                    prose.add(label)
                elif (said.group(1) == "true") != default:
                    problems.append(f"{page}: `{key}` default documented {default_cell}, declared {default}")
                else:
                    checked += 1
                continue
            if kind == "str":
                said = re.match(r'`"(.*)"`$', default_cell)
                if said is None:
                    prose.add(label)
                elif said.group(1) != default:
                    problems.append(f"{page}: `{key}` default documented {default_cell}, declared {default!r}")
                else:
                    checked += 1
                continue
            if not defaults or not re.match(r"\d", default_cell):
                prose.add(label)
            else:
                said = defaults[i] if len(defaults) == len(keys) else defaults[0]
                if not math.isclose(said, default):
                    problems.append(f"{page}: `{key}` default documented {default_cell}, declared {default}")
                checked += 1
            bounds = _bounds(bounds_cell)
            if bounds is None:
                if re.search(r"\d", bounds_cell) and "`" not in bounds_cell:
                    problems.append(f"{page}: `{key}` bounds {bounds_cell!r} not read")
                continue
            low, high = bounds
            if low != "key" and not math.isclose(low, minimum):
                problems.append(f"{page}: `{key}` minimum documented {bounds_cell!r}, declared {minimum}")
            if (high is None) != (maximum is None) or (high is not None and not math.isclose(high, maximum)):
                problems.append(f"{page}: `{key}` maximum documented {bounds_cell!r}, declared {maximum}")
    assert not problems, "\n".join(problems)
    assert prose == PROSE_DEFAULTS & prose and prose <= PROSE_DEFAULTS, sorted(prose - PROSE_DEFAULTS)
    # every numeric, boolean and string key the checks declare is documented
    undocumented = sorted(ALL_KEYS - {k for *_, keys, _d, _b in _reference_rows() for k in keys})
    assert not undocumented, undocumented
    assert checked >= 60 and documented >= len(DECLARED), (checked, documented, len(DECLARED))


def _limit_keys(cell):
    """The configuration keys a Limits row names: the backticked names of a parenthesis that
    opens with one, up to its first ";" (``retry.max_attempts`` is ``max_attempts``; another
    system's name, "nginx's `send_timeout`", is not one)."""
    names = []
    for group in re.findall(r"\((`[^);]*)", cell):
        for before, name in re.findall(r"(\S*\s?)`([^`]+)`", group):
            name = re.sub(r"^\[[^\]]+\]\s*", "", name).split(".")[-1]
            if not before.endswith("'s ") and re.fullmatch(r"[a-z][a-z0-9_]*", name):
                names.append(name)
    return names


def test_the_limits_table_says_each_configurable_limit_as_the_code_declares_it():
    problems = []
    checked = 0
    for _section, cells in _rows("limits.md"):
        if len(cells) != 3:
            continue
        limit, default_cell, _answer = cells
        said = _numbers(default_cell)
        for key in _limit_keys(limit):
            declared = _code(key, "")
            if declared is None:
                if key in ("retry", "outlier", "fallbacks", "on", "require_auth"):
                    continue  # tables, lists, a switch
                problems.append(f"limits.md: `{key}` is not a configuration key ({limit[:60]}...)")
                continue
            kind, default, minimum, maximum = declared
            if kind != "num":
                continue
            if not any(math.isclose(n, default) for n in said):
                problems.append(f"limits.md: `{key}` default {default} not in {default_cell!r}")
            checked += 1
            # bounds the row gives beside the key ("`retry.max_attempts`, 0 to 100")
            for m in re.finditer(rf"{NUMBER}\s+to\s+{NUMBER}", limit.replace("`", "")):
                low, high = _bounds(m.group(0))
                if not (math.isclose(low, minimum) and maximum is not None and math.isclose(high, maximum)):
                    problems.append(f"limits.md: `{key}` bounds {low:g} to {high:g}, declared "
                                    f"{minimum} to {maximum}")
    assert not problems, "\n".join(problems)
    assert checked >= 30, checked


@pytest.mark.parametrize("text, bounds", [
    ("≥ 0.01", (0.01, None)), ("1 to 1000000", (1, 1000000)), ("1 KiB to 64 MiB", (1024, 64 << 20)),
    ("≥ `ejection_s`, to 86400", ("key", 86400)), ("0 to 1000, in steps of 0.001", (0, 1000)),
    ("a configured provider", None)])
def test_the_bounds_reader_reads_what_the_pages_write(text, bounds):
    assert _bounds(text) == bounds
