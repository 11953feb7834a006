"""The documentation the code cites lives in the repository: every ``docs/<page>.md`` (and
``#section``) a comment, docstring or page names exists, and nothing cites files outside the
project (the product specification, measurement notes or source articles it was built from)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("operators", "actors", "topology", "tests", "benchmarks", "examples",
                       "docs") for p in (REPO / d).rglob("*") if p.suffix in (".py", ".md")]
SOURCES += [REPO / "README.md"]
CITATION = re.compile(r"docs/([a-z0-9_-]+\.md)(#[a-z0-9-]+)?")
OUTSIDE = re.compile(r"SPEC §|NOTES\.md|seeds/|\b00[0-4]_\*\.txt")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    heads = [line.lstrip("#").strip() for line in page.read_text().splitlines()
             if line.startswith("#")]
    return {"#" + re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_cited_doc_page_and_section_exists():
    cited = {(m.group(1), m.group(2)) for p in SOURCES for m in CITATION.finditer(p.read_text())}
    assert len(cited) >= 6, cited  # the code does point at its docs
    for page, anchor in sorted(cited, key=str):
        path = REPO / "docs" / page
        assert path.exists(), f"docs/{page} is cited but does not exist"
        if anchor:
            assert anchor in _anchors(path), f"docs/{page}{anchor}: no such section"


def test_the_docs_index_lists_every_page():
    index = (REPO / "docs" / "README.md").read_text()
    for page in (REPO / "docs").glob("*.md"):
        if page.name != "README.md":
            assert f"({page.name})" in index, f"docs/README.md does not list {page.name}"


def test_nothing_cites_files_outside_the_repository():
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in SOURCES if p.name != "test_docs.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if OUTSIDE.search(line)]
    assert offenders == []


# -- the pictures of docs/windows.md, drawn by cedar from traced queries -----------------------
PICTURES = REPO / "docs" / "pictures"
#: per picture: the SVG element ids it must hold (events, windows, CTIs, struck-through parts)
ELEMENTS = {
    "hopping.svg": {"event-in-2", "event-out-4", "window-4", "cti-in-0"},
    "snapshot.svg": {"event-in-2", "event-out-3", "window-3"},
    "speculative.svg": {"retracted-out-0", "strike-out-0", "retracted-in-1", "cti-in-3"},
    # the two sessions' rows struck through when the late d bridges them, the merged row
    "session.svg": {"event-in-3", "retracted-out-1", "strike-out-1", "event-out-2", "window-2"},
}


def _ids(svg: str) -> set[str]:
    return set(re.findall(r'id="([a-z]+-(?:in|out)?-?\d+)"', svg))


def test_the_window_pictures_are_cited_and_show_what_the_page_says():
    page = (REPO / "docs" / "windows.md").read_text()
    for name, needed in ELEMENTS.items():
        assert f"(pictures/{name})" in page, f"docs/windows.md does not show {name}"
        assert needed <= _ids((PICTURES / name).read_text()), name


def test_the_window_pictures_are_what_the_engine_draws_today(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_pictures", PICTURES / "make.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    drawn = {Path(p).name: _ids(Path(p).read_text()) for p in make.make(str(tmp_path))}
    assert drawn.keys() == ELEMENTS.keys()
    for name, ids in drawn.items():
        assert ELEMENTS[name] <= ids, name
        # the committed picture shows the same elements (regenerate: python docs/pictures/make.py)
        assert ids == _ids((PICTURES / name).read_text()), name
