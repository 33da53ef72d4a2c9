"""Markdown excerpts (methods/README.md) → safe HTML, with markdown-it-py.

Raw HTML in the source is escaped, never passed through (``html: False``); markdown-it's link
validation drops ``javascript:``, ``vbscript:``, ``file:`` and ``data:`` links. Links relative to
the README (``baselines.py``) point into the repository when its URL is known, and become plain text
otherwise, so the site never links to a page it does not have.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any
from urllib.parse import quote, urlparse

from markdown_it import MarkdownIt
from markupsafe import Markup

_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})


def _fix_links(tokens: list, base: str | None, source_dir: str) -> None:
    for tok in tokens:
        if tok.children:
            _fix_links(tok.children, base, source_dir)
        if tok.type != "link_open":
            continue
        href = tok.attrGet("href") or ""
        parsed = urlparse(href)
        if parsed.scheme in ("http", "https") and parsed.netloc:
            tok.attrSet("rel", "noopener noreferrer")
            continue
        if parsed.scheme or parsed.netloc or not base:
            tok.attrs.pop("href", None)  # rendered as <a> without href: plain text, no broken link
            continue
        path = posixpath.normpath(posixpath.join(source_dir, parsed.path)).lstrip("/")
        tok.attrSet(
            "href", f"{base}/{quote(path)}" + (f"#{parsed.fragment}" if parsed.fragment else "")
        )
        tok.attrSet("rel", "noopener noreferrer")


# a line break inside a Markdown table cell, the way GitHub writes one (methods/README.md joins a
# method's deviations with it): the one piece of HTML a cell may hold
_CELL_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def inline(text: str, *, blob_base: str | None = None, source_dir: str = "") -> Markup:
    """One Markdown line (a table cell) as inline HTML. ``blob_base``: the repository's file URL
    prefix at the site's commit (e.g. ``https://host/owner/repo/blob/<sha>``); ``source_dir``: the
    folder of the Markdown file, which relative links start from. A ``<br>`` in the cell is a line
    break; any other HTML is escaped."""
    return Markup("<br>").join(
        _inline_part(part, blob_base, source_dir) for part in _CELL_BREAK.split(text)
    )


def _inline_part(text: str, blob_base: str | None, source_dir: str) -> Markup:
    env: dict = {}
    tokens = _MD.parseInline(text, env)
    _fix_links(tokens, blob_base, source_dir)
    return Markup(_MD.renderer.render(tokens, _MD.options, env))


def block(text: str, *, blob_base: str | None = None, source_dir: str = "") -> Markup:
    """A whole Markdown document (docs/adding-a-method.md on the "Submit your method" page) as HTML,
    with the same safety rules and link handling as :func:`inline`. Headings get GitHub's anchors
    (:func:`heading_anchor`); every table sits in a ``div.scroll`` of its own, so that a wide table
    scrolls inside its box and never widens the page."""
    env: dict = {}
    tokens = _MD_DOC.parse(text, env)
    _fix_links(tokens, blob_base, source_dir)
    seen: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and i + 1 < len(tokens):
            anchor = heading_anchor(tokens[i + 1].content)
            seen[anchor] = seen.get(anchor, -1) + 1
            tok.attrSet("id", anchor if not seen[anchor] else f"{anchor}-{seen[anchor]}")
    return Markup(_MD_DOC.renderer.render(tokens, _MD_DOC.options, env))


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every heading of a Markdown document, in order."""
    tokens = _MD_DOC.parse(text, {})
    return [
        (int(tok.tag[1:]), tokens[i + 1].content)
        for i, tok in enumerate(tokens)
        if tok.type == "heading_open" and i + 1 < len(tokens)
    ]


def heading_anchor(text: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens
    (``4. Conformance: `check-method` `` → ``4-conformance-check-method``)."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _scroll_open(renderer: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
    # a box that scrolls is focusable and named, so a keyboard can scroll it (axe-core's
    # scrollable-region-focusable)
    env["tables"] = env.get("tables", 0) + 1
    label = f"table {env['tables']} (scrolls sideways)"
    return (
        f'<div class="scroll" tabindex="0" role="region" aria-label="{label}">\n'
        + renderer.renderToken(tokens, idx, options, env)
    )


def _scroll_close(renderer: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
    return renderer.renderToken(tokens, idx, options, env) + "</div>\n"


_MD_DOC = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_MD_DOC.enable("table")
_MD_DOC.add_render_rule("table_open", _scroll_open)
_MD_DOC.add_render_rule("table_close", _scroll_close)
_CODE_RULES = {k: _MD_DOC.renderer.rules[k] for k in ("fence", "code_block")}


def _code_box(kind: str) -> Any:
    """A code block, focusable and named like a table's box: a long line scrolls it sideways."""

    def render(renderer: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
        env["code"] = env.get("code", 0) + 1
        label = f"code block {env['code']} (scrolls sideways)"
        html = _CODE_RULES[kind](tokens, idx, options, env)
        return html.replace("<pre>", f'<pre tabindex="0" role="region" aria-label="{label}">', 1)

    return render


for _kind in _CODE_RULES:
    _MD_DOC.add_render_rule(_kind, _code_box(_kind))
