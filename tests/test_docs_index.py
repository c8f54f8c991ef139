"""The documentation's front door: every page in docs/ is listed in docs/index.md, every link in the README and the
docs reaches a file (and a heading, when it names one), and the README stays short enough to read first."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
README = ROOT / "README.md"
README_MAX_LINES = 120

# [text](target): the target up to the first space or closing parenthesis; images (![...]) are links too.
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks, with inline code spans removed."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def _links(path: Path) -> list[str]:
    return [target for line in _prose_lines(path) for target in _LINK.findall(line)]


def _is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) is not None


def _anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


# Runbooks are also served by the dashboard (controlplane/alerts/runbooks.py), so they link to each other by its
# address, /runbooks/<slug>/, which is the file docs/runbooks/<slug>.md.
_DASHBOARD_RUNBOOK = re.compile(r"^/runbooks/([a-z0-9-]+)/?$")


def _destination(document: Path, path_part: str) -> Path | None:
    """The file a link's path names; None for another dashboard address, which no file backs."""
    if not path_part:
        return document
    if path_part.startswith("/"):
        runbook = _DASHBOARD_RUNBOOK.match(path_part)
        return DOCS / "runbooks" / f"{runbook.group(1)}.md" if runbook else None
    return (document.parent / path_part).resolve()


def _documents() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_every_docs_page_is_linked_from_the_index():
    linked = {(INDEX.parent / target.split("#")[0]).resolve() for target in _links(INDEX) if not _is_external(target)}
    pages = {page.resolve() for page in DOCS.rglob("*.md") if page != INDEX}
    missing = sorted(str(page.relative_to(ROOT)) for page in pages - linked)
    assert not missing, f"pages not linked from docs/index.md: {missing}"


def test_every_link_in_the_readme_and_docs_reaches_a_file_and_heading():
    broken = []
    for document in _documents():
        for target in _links(document):
            if _is_external(target):
                continue
            path_part, _, anchor = target.partition("#")
            destination = _destination(document, path_part)
            where = f"{document.relative_to(ROOT)} -> {target}"
            if destination is None:
                continue
            if not destination.exists():
                broken.append(f"{where}: no such file")
            elif anchor and destination.suffix == ".md" and anchor.lower() not in _anchors(destination):
                broken.append(f"{where}: no such heading")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_is_a_front_door_not_a_manual():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    assert "make run" in "\n".join(lines[:60]), "README.md: `make run` belongs near the top"
