"""The documentation's relative links lead somewhere, and the search reference stays a reference.

Docs move (issue 47 split docs/search-strategy.md into a reference and dated records under
docs/experiments/); a link left pointing at a moved file or a renamed heading fails here, not in a
reader's browser.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.*)$", path.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken_links(files: list[Path], root: Path = ROOT) -> list[str]:
    broken = []
    for source in files:
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:: not checked offline
                continue
            path, _, anchor = target.partition("#")
            dest = (source.parent / path).resolve() if path else source
            if not dest.exists():
                broken.append(f"{source.relative_to(root)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{source.relative_to(root)}: {target} (no such heading)")
    return broken


def test_every_relative_link_in_the_readme_and_docs_resolves():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert len(files) > 10  # the records under docs/experiments/ are among them
    assert broken_links(files) == []


def test_a_broken_link_or_heading_is_reported(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n[ok](page.md#title) [gone](missing.md) [nohead](page.md#other) [web](https://x.org)\n")
    found = [line.split(": ", 1)[1] for line in broken_links([page], tmp_path)]
    assert found == ["missing.md (no such file)", "page.md#other (no such heading)"]


def test_the_search_reference_stays_under_300_lines():
    """Dated measurements belong in docs/experiments/, one file per session; the reference keeps the
    defaults, every option, the current figures and how to reproduce them."""
    assert len((ROOT / "docs" / "search-strategy.md").read_text().splitlines()) < 300
