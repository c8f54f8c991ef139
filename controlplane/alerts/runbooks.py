"""Runbooks: Markdown files in docs/runbooks/, rendered safely (escape first, then a small Markdown subset).

The subset: `#`-`###` headings, paragraphs, `-`/`*` and `1.` lists, fenced code blocks, inline `code`,
**bold**, and [links](/relative/or/https://...). Everything else stays literal text; no raw HTML ever passes.
"""

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

RUNBOOK_DIR = Path(settings.BASE_DIR) / "docs" / "runbooks"
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


@dataclass(frozen=True)
class Runbook:
    slug: str
    title: str
    text: str

    @property
    def html(self) -> SafeString:
        return render_markdown(self.text)


def runbook_slugs() -> list[str]:
    return sorted(p.stem for p in RUNBOOK_DIR.glob("*.md") if _SLUG.fullmatch(p.stem))


def runbook_exists(slug: str) -> bool:
    return bool(_SLUG.fullmatch(slug or "")) and (RUNBOOK_DIR / f"{slug}.md").is_file()


def runbook_get(slug: str) -> Runbook | None:
    if not runbook_exists(slug):
        return None
    path = RUNBOOK_DIR / f"{slug}.md"
    return _load(str(path), path.stat().st_mtime)


@lru_cache(maxsize=64)
def _load(path: str, mtime: float) -> Runbook:
    text = Path(path).read_text(encoding="utf-8")
    first = next((line for line in text.splitlines() if line.startswith("# ")), "")
    return Runbook(slug=Path(path).stem, title=first[2:].strip() or Path(path).stem, text=text)


def runbook_list() -> list[Runbook]:
    return [r for r in (runbook_get(slug) for slug in runbook_slugs()) if r is not None]


def runbook_url(slug: str) -> str:
    """Absolute link for notifications and exported rules (CONTROLPLANE_EXTERNAL_URL)."""
    return f"{settings.CONTROLPLANE_EXTERNAL_URL}/runbooks/{slug}/"


_LIST_ITEM = re.compile(r"^(\s*)([-*]|\d+\.)\s+(.*)$")
_HEADING = re.compile(r"^(#{1,3})\s+(.*)$")


def render_markdown(text: str) -> SafeString:
    """The subset above as HTML; every piece of source text is escaped before any tag is added."""
    out: list[str] = []
    paragraph: list[str] = []
    list_tag: str | None = None
    in_code = False
    code: list[str] = []

    def close_paragraph():
        if paragraph:
            out.append("<p>" + " ".join(_inline(line) for line in paragraph) + "</p>")
            paragraph.clear()

    def close_list():
        nonlocal list_tag
        if list_tag:
            out.append(f"</{list_tag}>")
            list_tag = None

    for line in text.splitlines():
        if line.strip().startswith("```"):
            if in_code:
                out.append("<pre><code>" + escape("\n".join(code)) + "</code></pre>")
                code.clear()
                in_code = False
            else:
                close_paragraph()
                close_list()
                in_code = True
            continue
        if in_code:
            code.append(line)
            continue
        if not line.strip():
            close_paragraph()
            close_list()
            continue
        heading = _HEADING.match(line)
        if heading:
            close_paragraph()
            close_list()
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
            continue
        item = _LIST_ITEM.match(line)
        if item:
            close_paragraph()
            tag = "ol" if item.group(2)[0].isdigit() else "ul"
            if list_tag != tag:
                close_list()
                out.append(f"<{tag}>")
                list_tag = tag
            out.append(f"<li>{_inline(item.group(3))}</li>")
            continue
        if list_tag and line.startswith("  "):
            # A continuation line of the previous list item.
            out[-1] = out[-1][: -len("</li>")] + " " + _inline(line.strip()) + "</li>"
            continue
        close_list()
        paragraph.append(line.strip())
    if in_code:
        out.append("<pre><code>" + escape("\n".join(code)) + "</code></pre>")
    close_paragraph()
    close_list()
    return mark_safe("\n".join(out))  # noqa: S308 - built only from escaped text and fixed tags


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _inline(text: str) -> str:
    """Escape, then add code, bold and links; code spans are cut out first so nothing inside them is formatted."""
    pieces = _CODE.split(text)
    html = []
    for i, piece in enumerate(pieces):
        if i % 2:
            html.append(f"<code>{escape(piece)}</code>")
            continue
        piece = escape(piece)
        piece = _BOLD.sub(r"<strong>\1</strong>", piece)
        piece = _LINK.sub(_link, piece)
        html.append(piece)
    return "".join(html)


def _link(match: re.Match) -> str:
    label, href = match.group(1), match.group(2)
    # The href is already escaped; only relative links and http(s) may become anchors (no javascript:).
    if href.startswith("/") or href.startswith("https://") or href.startswith("http://"):
        return f'<a href="{href}">{label}</a>'
    return match.group(0)
