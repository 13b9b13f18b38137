"""No import cycle in healer/ and chaos/, function-local imports included (issue 35).

The graph is grimp's (the library import-linter runs on, so `make lint` and this test read the same imports):
every `import` statement in the source, at module level or inside a function, under `if TYPE_CHECKING:` too.
A cycle is a strongly connected component of that graph (modules that reach each other). There is none: the last
ones were broken by moving the shared piece below both sides (errors <-> git <-> store.corrupt,
fleet.container_runtime <-> fleet.images: healer/containers/client.py; notify <-> notify.outbox:
healer/notify/identity.py; the chaos knot: chaos/faults/world.py and chaos/engine/base.py; healer.ctk.run <->
chaos.report_ctk: chaos/ctk_journal.py; the CLI and `healer demo`: the state flag in healer/cli/common.py, the
board's table in healer/views.py, `healer init`'s work in healer/init.py; the ports, the snapshot and the repair
agent: busy_map in healer/fleet/busy.py, the tool names in healer/repair/tools.py). Because there is none, a
function-local import can move to module level without a circle in this graph; a circle through a package's
`__init__` (which grimp does not count as an import) shows only at run time: test_imports_alone.py imports every
module first on its own to catch it.
"""

from __future__ import annotations

import grimp
import networkx as nx

from tests.spine.conftest import REPO


def import_graph() -> nx.DiGraph:
    g = grimp.build_graph("healer", "chaos", cache_dir=None)  # no cache folder left behind
    graph = nx.DiGraph()
    for m in g.modules:
        graph.add_node(m)
        for t in g.find_modules_directly_imported_by(m):
            graph.add_edge(m, t, lines=[d["line_number"] for d in g.get_import_details(importer=m, imported=t)])
    return graph


def cycles(graph: nx.DiGraph) -> list[frozenset[str]]:
    return [frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def _path(graph: nx.DiGraph, component: frozenset[str]) -> str:
    """One circle through the component, with the line of each import: where to start breaking it."""
    loop = nx.find_cycle(graph.subgraph(component), source=min(component))
    return "; ".join(f"{a} -> {b} (l.{','.join(map(str, graph.edges[a, b]['lines']))})" for a, b in loop)


def problems(graph: nx.DiGraph) -> list[str]:
    """One line per cycle, with one circle through it and the line of each import: where to start breaking it."""
    return [f"import cycle {sorted(c)}: {_path(graph, c)}" for c in sorted(cycles(graph), key=sorted)]


def test_the_graph_is_this_checkout_with_function_local_imports():
    g = grimp.build_graph("healer", cache_dir=None)
    assert "healer.cli.misc" in g.modules
    import healer

    assert healer.__file__.startswith(str(REPO))
    # `healer demo` imports healer.demo inside its command function: a function-local import is an edge
    details = g.get_import_details(importer="healer.cli.misc", imported="healer.demo")
    lines = (REPO / "healer" / "cli" / "misc.py").read_text().splitlines()
    assert details and all(lines[d["line_number"] - 1].startswith(" ") for d in details)  # indented: in a function


def test_no_import_cycle():
    graph = import_graph()
    found = problems(graph)
    assert not found, "\n".join(found)


def test_a_cycle_is_reported_with_the_lines_to_break():
    graph = nx.DiGraph([("a", "b"), ("b", "a"), ("c", "d"), ("d", "e"), ("e", "c"), ("x", "y")])
    for a, b in graph.edges:
        graph.edges[a, b]["lines"] = [1]
    assert set(cycles(graph)) == {frozenset("ab"), frozenset("cde")}
    assert problems(graph) == ["import cycle ['a', 'b']: a -> b (l.1); b -> a (l.1)",
                               "import cycle ['c', 'd', 'e']: c -> d (l.1); d -> e (l.1); e -> c (l.1)"]
    assert problems(nx.DiGraph([("x", "y"), ("y", "z")])) == []
