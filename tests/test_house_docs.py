"""The docs a user and a successor find: the field reference is what the registry says, the README stays
short and links to pages that exist, and no Markdown table is glued to a paragraph (it would render as text)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "tests" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]


def test_field_reference_is_generated_from_the_registry():
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_fields_doc

    assert (ROOT / "docs" / "fields.md").read_text() == gen_fields_doc.render(), (
        "docs/fields.md is stale: run .venv/bin/python tools/gen_fields_doc.py"
    )


def test_every_listed_name_is_a_field_filters_accept():
    names = re.findall(r"^\| `([^`]+)` \|", (ROOT / "docs" / "fields.md").read_text(), re.M)
    assert {"bth.p_key", "lrh.dlid", "mad.attributeid", "frame.number", "icrc.status"} <= set(names)
    ibwire = Path(sys.executable).parent / "ibwire"
    r = subprocess.run(
        [ibwire, "decode", ROOT / "captures" / "sm-sweep.pcap", "-c", "1", "-Y", " || ".join(names)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-500:]


def test_readme_is_short_and_links_to_pages_that_exist():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    links = re.findall(r"\]\(((?:docs|tests|captures)/[^)#]+)", text)
    assert len(links) >= 10
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_no_table_row_follows_a_paragraph_line():
    for page in PAGES:
        lines, fence = page.read_text().splitlines(), False
        for i, line in enumerate(lines):
            fence ^= line.startswith("```")
            if not fence and line.startswith("|") and i and lines[i - 1].strip() and not lines[i - 1].startswith("|"):
                raise AssertionError(f"{page.relative_to(ROOT)}:{i + 1}: a table row right after a paragraph line")


def test_relative_links_between_pages_resolve():
    broken = []
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / link).exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}")
    assert broken == []
