"""No two monark modules import each other.

Every import counts, wherever it is written: at module level, inside a function (it still
runs, and still ties the two modules together), and under ``TYPE_CHECKING`` (the two
modules still cannot be read, or moved, one without the other). A pair that needs each
other is one concept cut in two, or a third module both should import.
"""

from __future__ import annotations

import grimp

# Pairs being taken apart elsewhere. Each entry must still be a cycle (the second test
# fails once it is gone, so the entry is deleted with it): the list only ever shrinks.
KNOWN: set[frozenset[str]] = set()


def mutual_imports() -> dict[frozenset[str], list[str]]:
    """Each pair of monark modules that import each other, with the lines that do it."""
    graph = grimp.build_graph("monark", cache_dir=None)
    pairs: dict[frozenset[str], list[str]] = {}
    for module in sorted(graph.modules):
        for other in graph.find_modules_directly_imported_by(module):
            if module < other and module in graph.find_modules_directly_imported_by(other):
                lines = [
                    f"{d['importer']}:{d['line_number']}: {d['line_contents']}"
                    for a, b in ((module, other), (other, module))
                    for d in graph.get_import_details(importer=a, imported=b)
                ]
                pairs[frozenset({module, other})] = lines
    return pairs


def test_no_two_modules_import_each_other():
    found = {pair: lines for pair, lines in mutual_imports().items() if pair not in KNOWN}
    assert found == {}, "\n".join(line for lines in found.values() for line in lines)


def test_the_known_pairs_are_still_pairs():
    """A pair taken apart leaves this list with it."""
    assert KNOWN - set(mutual_imports()) == set()
