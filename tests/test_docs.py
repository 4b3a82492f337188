"""The docs: the pages written from the code are current, every page is in the site's
navigation, the README stays short, and no document cites what a reader cannot open."""
from __future__ import annotations

import re

import yaml

from harness.model.config import REPO_DIR
from scripts import gen_docs

DOCS = REPO_DIR / "docs"
README_MAX_BYTES = 6 * 1024
RESULTS_BLOCK = re.compile(r"<!-- results:start -->.*?<!-- results:end -->", re.S)
# An issue by its number, a pull request or issue as "#34", a closing note, a working session.
CITATIONS = re.compile(
    r"\bissues?\s+#?\d+|(?<![\w/&])#\d+\b|\bclosing\s+notes?\b"
    r"|\bsessions?\s+#?\d+\b|\b(?:this|that|the|previous|last|earlier|later|next|lead's|helper's)\s+session\b",
    re.I)
URL = re.compile(r"https?://\S+")


def documents() -> list:
    roots = [REPO_DIR / "README.md", REPO_DIR / "CHANGELOG.md", REPO_DIR / "CONTRIBUTING.md"]
    return roots + sorted(DOCS.rglob("*.md")) + sorted((REPO_DIR / "gateways").rglob("*.md"))


def citations(text: str) -> list[str]:
    """What `text` cites that a reader cannot open; a public source by its address is fine."""
    return [m.group(0) for m in CITATIONS.finditer(URL.sub("", text))]


def test_the_generated_pages_are_current():
    stale = [path for path, text in gen_docs.pages().items()
             if not (REPO_DIR / path).is_file() or (REPO_DIR / path).read_text(encoding="utf-8") != text]
    assert stale == [], "stale: run python scripts/gen_docs.py"


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    return [p for value in node.values() for p in _nav_pages(value)]


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((REPO_DIR / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == pages
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_the_readme_is_short():
    text = (REPO_DIR / "README.md").read_text(encoding="utf-8")
    assert RESULTS_BLOCK.search(text), "README.md: the results block's markers are gone"
    assert len(RESULTS_BLOCK.sub("", text).encode()) <= README_MAX_BYTES


def test_no_document_cites_what_a_reader_cannot_open():
    found = {str(p.relative_to(REPO_DIR)): c for p in documents()
             if (c := citations(p.read_text(encoding="utf-8")))}
    assert found == {}


def test_the_citation_rule_can_fail():
    assert citations("as issue 12 said, see #34 and the closing note of this session") == [
        "issue 12", "#34", "closing note", "this session"]
    assert citations("https://github.com/BerriAI/litellm/issues/123 and aiohttp.ClientSession, "
                     "the proxy's shared session, docs/page.md#section-2, &#39;") == []
