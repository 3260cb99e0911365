"""The README is a short front page: the two quick-start commands, unchanged, and working links."""

from __future__ import annotations

import re

import yaml

from tests.docs.markdown import DOCS, README, ROOT, blocks, markdown_files

QUICK_START = [
    "pip install . && memstore demo\n",
    "pip install -e '.[dev]' && pytest\n",
]


def test_readme_shows_exactly_the_two_quick_start_commands() -> None:
    shell = [block.source for block in blocks(README) if block.lang == "bash"]
    assert shell == QUICK_START


def test_readme_is_a_short_front_page() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_relative_links_of_the_readme_and_docs_point_at_files() -> None:
    for path in markdown_files():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)}: broken {target}"


def _nav_pages(node: object) -> set[str]:
    if isinstance(node, str):
        return {node}
    if isinstance(node, list):
        return set().union(*(_nav_pages(item) for item in node))
    if isinstance(node, dict):
        return set().union(*(_nav_pages(value) for value in node.values()))
    return set()


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert pages == _nav_pages(config["nav"])
