"""No new import cycle in healer/ and chaos/, function-local imports included (issue 35).

The graph is grimp's (the library import-linter runs on, so `make lint` and this test read the same imports):
every `import` statement in the source, at module level or inside a function, under `if TYPE_CHECKING:` too.
A cycle is a strongly connected component of that graph (modules that reach each other). The ones that exist
today are listed in KNOWN with why they are there; the test is a ratchet:
- a component not in KNOWN (a new cycle, or a known one that drew in another module) fails it;
- a known one that shrank, split or went away fails it too, asking you to update KNOWN, so the list only shrinks.
"""

from __future__ import annotations

import grimp
import networkx as nx

from tests.spine.conftest import REPO

# each known cycle: its modules, and why the circle is there (what would break it). Broken so far (issue 35):
# errors <-> git <-> store.corrupt, fleet.container_runtime <-> fleet.images (healer/fleet/docker_client.py), notify <-> notify.outbox
# (healer/notify/identity.py), store.outage <-> store.postgres, cli.common <-> cli.runbook; the chaos knot (fault
# injectors typed against chaos/faults/world.py's World, engines importing chaos/engine/base.py, the fault registry a
# leaf); healer.ctk.run <-> chaos.report_ctk (a journal's verdict in healer/ctk/journal.py).
KNOWN: dict[frozenset[str], str] = {
    frozenset({"healer.cli", "healer.cli.board", "healer.cli.misc", "healer.demo"}):
        "the CLI registers board/misc, which reach back for the app; `healer demo` prints with board/misc's views",
    frozenset({"healer.fleet.ports", "healer.fleet.snapshot", "healer.remedy.actions", "healer.repair.diagnose",
               "healer.repair.launcher", "healer.repair.server"}):
        "the ports launch the repair agent, whose tool server runs remedies, which gather snapshots through the ports",
}


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


def ratchet(found: list[frozenset[str]], known: dict[frozenset[str], str], graph: nx.DiGraph | None = None) -> list[str]:
    """What is wrong between the cycles found and the known ones: one line each."""
    problems = []
    for c in sorted(found, key=sorted):
        if c in known:
            continue
        where = f": {_path(graph, c)}" if graph is not None else ""
        if any(c < k for k in known):
            problems.append(f"a known cycle shrank to {sorted(c)}: update KNOWN{where}")
        else:
            problems.append(f"new import cycle {sorted(c)}{where}")
    for k in sorted(known, key=sorted):
        if k not in found and not any(c < k for c in found):
            problems.append(f"known cycle {sorted(k)} is gone: drop it from KNOWN")
        elif k not in found and not any(k < c for c in found):
            problems.append(f"known cycle {sorted(k)} shrank or split: update KNOWN")
    return problems


def test_the_graph_is_this_checkout_with_function_local_imports():
    g = grimp.build_graph("healer", cache_dir=None)
    assert "healer.cli.misc" in g.modules
    import healer

    assert healer.__file__.startswith(str(REPO))
    # `healer demo` imports healer.demo inside its command function: a function-local import is an edge
    details = g.get_import_details(importer="healer.cli.misc", imported="healer.demo")
    lines = (REPO / "healer" / "cli" / "misc.py").read_text().splitlines()
    assert details and all(lines[d["line_number"] - 1].startswith(" ") for d in details)  # indented: in a function


def test_no_new_import_cycle():
    graph = import_graph()
    problems = ratchet(cycles(graph), KNOWN, graph)
    assert not problems, "\n".join(problems)


def test_the_ratchet_fails_a_new_cycle_and_asks_to_drop_a_broken_one():
    graph = nx.DiGraph([("a", "b"), ("b", "a"), ("c", "d"), ("d", "e"), ("e", "c"), ("x", "y")])
    graph.edges["a", "b"]["lines"] = graph.edges["b", "a"]["lines"] = [1]
    found = cycles(graph)
    abc, cde = frozenset("ab"), frozenset("cde")
    assert ratchet(found, {abc: "why", cde: "why"}) == []
    assert ratchet(found, {cde: "why"}, graph) == ["new import cycle ['a', 'b']: a -> b (l.1); b -> a (l.1)"]
    # a known cycle that drew in another module is a new one
    assert ratchet(found, {frozenset("a"): "", cde: ""})[0].startswith("new import cycle ['a', 'b']")
    # one broken: the list must shrink with it
    assert ratchet(found, {abc: "", cde: "", frozenset("xy"): ""}) == ["known cycle ['x', 'y'] is gone: drop it from KNOWN"]
    assert ratchet(found, {frozenset("abz"): "", cde: ""}) == ["a known cycle shrank to ['a', 'b']: update KNOWN",
                                                               "known cycle ['a', 'b', 'z'] shrank or split: update KNOWN"]
