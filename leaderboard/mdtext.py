"""Markdown excerpts (methods/README.md) → safe HTML, with markdown-it-py.

Raw HTML in the source is escaped, never passed through (``html: False``); markdown-it's link
validation drops ``javascript:``, ``vbscript:``, ``file:`` and ``data:`` links. Links relative to
the README (``baselines.py``) point into the repository when its URL is known, and become plain text
otherwise, so the site never links to a page it does not have.
"""

from __future__ import annotations

import posixpath
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


def inline(text: str, *, blob_base: str | None = None, source_dir: str = "") -> Markup:
    """One Markdown line (a table cell) as inline HTML. ``blob_base``: the repository's file URL
    prefix at the site's commit (e.g. ``https://host/owner/repo/blob/<sha>``); ``source_dir``: the
    folder of the Markdown file, which relative links start from."""
    env: dict = {}
    tokens = _MD.parseInline(text, env)
    _fix_links(tokens, blob_base, source_dir)
    return Markup(_MD.renderer.render(tokens, _MD.options, env))


def block(text: str, *, blob_base: str | None = None, source_dir: str = "") -> Markup:
    """A whole Markdown document (docs/adding-a-method.md on the "Submit your method" page) as HTML,
    with the same safety rules and link handling as :func:`inline`."""
    env: dict = {}
    tokens = _MD_DOC.parse(text, env)
    _fix_links(tokens, blob_base, source_dir)
    return Markup(_MD_DOC.renderer.render(tokens, _MD_DOC.options, env))


_MD_DOC = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_MD_DOC.enable("table")
