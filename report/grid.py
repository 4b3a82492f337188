"""What a table of the report is: headings and rows of cells, each cell a few pieces of text with
their CSS classes. Every table of the reports is one of these, drawn by one Jinja macro
(templates/table.html.j2); ``frame()`` gives the same texts as a DataFrame for notebooks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import pandas as pd


@dataclass(frozen=True)
class Part:
    text: str
    cls: str = ""            # wrapped in <span class=...> when set
    strong: bool = False
    small: bool = False
    br: bool = False         # a line break before it
    href: str = ""           # a link (relative, to a file of the study)


@dataclass(frozen=True)
class Cell:
    parts: tuple[Part, ...]
    cls: str = ""            # the <td>'s classes ("n": a right-aligned number)
    header: bool = False     # a row heading (<th>)
    title: str = ""          # a tooltip: the detail a narrow cell leaves out

    @property
    def text(self) -> str:
        return "".join(("\n" if p.br else "") + p.text for p in self.parts)

    @property
    def main_text(self) -> str:
        """The text without its small print (a system's kind and version under its name)."""
        return "".join(("\n" if p.br else "") + p.text for p in self.parts if not p.small)


def cell(text: object = "", cls: str = "", span: str = "", header: bool = False,
         strong: bool = False) -> Cell:
    return Cell((Part(str(text), span, strong=strong),), cls, header)


def number(text: object, span: str = "") -> Cell:
    """A number, right-aligned."""
    return cell(text, "n", span)


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    cls: str = ""
    id: str = ""             # an anchor the summary links to


@dataclass(frozen=True)
class Table:
    columns: tuple[Cell, ...]   # empty: no heading row (a table of row headings and values)
    rows: tuple[Row, ...]
    id: str = ""
    wide: bool = False          # many columns: a smaller font (every table scrolls sideways in its
                                # own box, never the page)

    def frame(self) -> pd.DataFrame:
        names = [c.main_text for c in self.columns]
        return pd.DataFrame([[c.main_text for c in r.cells] for r in self.rows],
                            columns=names or None)

    @property
    def empty(self) -> bool:
        return not self.rows


def table(columns: Sequence[str | Cell], rows: Iterable[Sequence[object] | Row], id: str = "",
          wide: bool = False, numeric: Iterable[str] = ()) -> Table:
    """A Table from headings and rows of values; a value that is not a Cell becomes one, right-
    aligned when its column is in ``numeric``."""
    cols = tuple(c if isinstance(c, Cell) else cell(c) for c in columns)
    right = {i for i, c in enumerate(cols) if c.text in set(numeric)}
    out = []
    for r in rows:
        if isinstance(r, Row):
            out.append(r)
            continue
        out.append(Row(tuple(v if isinstance(v, Cell) else cell(v, "n" if i in right else "")
                             for i, v in enumerate(r))))
    return Table(cols, tuple(out), id, wide)


def from_frame(frame: pd.DataFrame, id: str = "", wide: bool = False,
               numeric: Iterable[str] = ()) -> Table:
    """A Table of a DataFrame's values as text (its columns as headings)."""
    return table(list(frame.columns), frame.astype(str).itertuples(index=False), id, wide, numeric)


def rows_of(pairs: Iterable[tuple[str, object]], id: str = "") -> Table:
    """A table of (heading, value) rows."""
    return Table((), tuple(Row((cell(k, header=True), cell(v))) for k, v in pairs), id)
