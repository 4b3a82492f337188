"""The lines in which a system names one of its limits ([limits] in its gateway.toml), looked for
in its logs in the run directory after the run: per declared pattern, how many lines match and
the first of them (with its time when it carries one). Bounded: each log is read line by line,
never more than LOG_BYTES of it."""
from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from harness.model.manifests import LimitLine

# The process's own output (stdout and stderr), read after the declared logs.
SYSTEM_LOG = "system.log"
# Bytes read of each log, from its start: the first occurrences are what is asked for, and a log
# flooded by one message (nginx logs every connection it cannot serve) must not hold up the run.
LOG_BYTES = 64 * 1024 * 1024
# Characters of a matching line kept in the manifest (around the match).
LINE_CHARS = 240
# A longer line is read in pieces of this many bytes, each matched alone.
_PIECE_BYTES = 64 * 1024
# Terminal colours (tracing's and uvicorn's), left out of what is matched and kept.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A timestamp near a line's start: ISO 8601 (2026-12-01T21:31:12.5Z, a space for the T, an offset
# or none), gunicorn's [2026-12-01 21:31:12 +0000], nginx's 2026/12/01 21:31:12. Without an
# offset it is the machine's local time (as nginx writes it).
_TIME = re.compile(r"(\d{4})[-/](\d{2})[-/](\d{2})[T ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                   r" ?(Z|[+-]\d{2}:?\d{2})?")
_TIME_WITHIN = 64              # characters from the line's start where the timestamp may begin
ELLIPSIS = "…"


def scan(run_dir: Path, logs: tuple[str, ...], patterns: tuple[str, ...]) -> tuple[LimitLine, ...]:
    """One LimitLine per pattern, in declared order: the lines of ``logs``, then system.log, that
    match it (re.search), counted, and the first one (in that order of files). A log that is not
    there has no lines."""
    if not patterns:
        return ()
    compiled = [re.compile(p) for p in patterns]
    counts = [0] * len(patterns)
    first: list[tuple[str, str, re.Match] | None] = [None] * len(patterns)
    partial = False
    for name in dict.fromkeys((*logs, SYSTEM_LOG)):
        path = run_dir / name
        if not path.is_file():
            continue
        partial = partial or path.stat().st_size > LOG_BYTES
        for line in _lines(path):
            for i, rx in enumerate(compiled):
                match = rx.search(line)
                if match:
                    counts[i] += 1
                    if first[i] is None:
                        first[i] = (name, line, match)
    return tuple(_limit_line(p, c, f, partial) for p, c, f in zip(patterns, counts, first))


def _limit_line(pattern: str, count: int, first, partial: bool) -> LimitLine:
    if first is None:
        return LimitLine(pattern=pattern, count=count, partial=partial)
    log, line, match = first
    return LimitLine(pattern=pattern, count=count, log=log,
                     line=excerpt(line, match.start(), match.end(), LINE_CHARS),
                     t_unix_s=line_time(line), partial=partial)


def _lines(path: Path) -> Iterator[str]:
    """The file's lines (without colours), up to LOG_BYTES of it."""
    read = 0
    with path.open("rb") as f:
        while read < LOG_BYTES:
            raw = f.readline(min(_PIECE_BYTES, LOG_BYTES - read))
            if not raw:
                return
            read += len(raw)
            yield _ANSI.sub("", raw.decode("utf-8", "replace").rstrip("\r\n"))


def line_time(line: str) -> float | None:
    """The Unix time of the timestamp near the line's start; None without one that parses."""
    m = _TIME.search(line, 0, _TIME_WITHIN + 40)   # 40: the longest timestamp, with room
    if m is None or m.start() > _TIME_WITHIN:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    zone = m.group(8)
    try:
        tz = None
        if zone == "Z":
            tz = timezone.utc
        elif zone:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        t = datetime(year, month, day, hour, minute, second, tzinfo=tz).timestamp()
    except (ValueError, OverflowError):
        return None
    return t + float(m.group(7) or 0.0)


def excerpt(line: str, start: int, end: int, chars: int) -> str:
    """``line`` cut to about ``chars`` characters around [start, end) (a match), an ellipsis
    where it was cut."""
    if len(line) <= chars:
        return line
    begin = max(0, min(start - chars // 4, len(line) - chars))
    if end - begin > chars:  # a match longer than the room: its start is kept
        begin = start
    cut = line[begin:begin + chars]
    return (ELLIPSIS if begin > 0 else "") + cut + (ELLIPSIS if begin + chars < len(line) else "")
