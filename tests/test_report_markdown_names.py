"""Module and layer names in ``report.md`` survive a Markdown renderer that passes raw HTML.

s17 trial AF #8: the "Not covered" row ``| <root> | ViT | 576 | … |`` rendered with an empty
module cell on GitHub: ``<root>`` is taken for an unknown HTML tag and dropped.
"""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser

import pytest

from neuromanifold import read
from neuromanifold.cells import planted_mlp
from neuromanifold.report.markdown import code_span, reading_markdown, table
from neuromanifold.singular.reading import NotCovered

markdown_it = pytest.importorskip("markdown_it")  # rich's Markdown parser, a dependency

# names a renderer could swallow or split: an HTML-like tag, a backtick, a table pipe
NAMES = ["<root>", "blocks.0.<b>fc1</b>", "odd`name", "x|y"]


class _Visible(HTMLParser):
    """The text a browser shows for each heading and table cell; tags, known or unknown, show
    nothing (as ``<root>`` on GitHub)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.headings: list[str] = []
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("td", "th"):
            self._into = self.cells
            self.cells.append("")
        elif tag in ("h2", "h3", "h4"):
            self._into = self.headings
            self.headings.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th", "h2", "h3", "h4"):
            self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self._into[-1] += data


def _visible(markdown: str) -> _Visible:
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    parser = _Visible()
    parser.feed(html)
    return parser


@pytest.mark.parametrize("name", NAMES)
def test_code_span_in_a_table_renders_the_name_verbatim(name: str) -> None:
    assert _visible(table(["module"], [[code_span(name)]])).cells == ["module", name]


def test_not_covered_names_and_layer_headings_are_shown() -> None:
    planted = planted_mlp()
    reading = read(planted.model, planted.data, planted.family)
    assert reading.directions
    first = reading.directions[0]
    renamed = [dataclasses.replace(first, layer=name, layers=(name,)) for name in NAMES]
    reading = dataclasses.replace(
        reading,
        directions=tuple(renamed),
        not_covered=tuple(NotCovered(name, "ViT", 576, "no detector") for name in NAMES),
    )
    shown = _visible(reading_markdown(reading))
    for name in NAMES:
        assert name in shown.cells, (name, shown.cells)  # the "Not covered" module column
        assert name in shown.headings, (name, shown.headings)  # one table per layer
