"""The house rules of the layout, read from the source with `ast`: no import circles, the collector's package
order, what the app may import, and no module over 600 lines (a signal to think about its concerns, not a
reason to cut one concern in two).

Every import counts, at the top of a module or inside a function (a lazy import still ties the two modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("collector", "app", "trainer", "data", "scripts", "runwatch")
# The collector's packages, lower to higher: a module imports from its own package or lower ones only.
ORDER = ("core", "formats", "store", "ingest", "detect", "settings", "advice", "runs", "api", "daemon", "cli")
# The app draws what the API returns: it reaches the collector through the client, and finds the running
# collector's marker file with core.runtime (the app starts a collector when none runs).
# The answers' types (collector.api.models, pydantic only) are the app's too: it reads the typed objects.
# The names a browser may use (collector.core.hosts) are one rule for the API and the dashboard; a long name
# shortened in its middle (collector.core.printable.middle) reads the same in the CLI and the dashboard.
APP_MAY_IMPORT = {
    "collector.api.client",
    "collector.api.models",
    "collector.core.hosts",
    "collector.core.printable",
    "collector.core.runtime",
}
# A signal to think, not a reason to cut one concern in two: a module past it is asked whether it holds more
# than one concern; one that does not may ask for a higher cap here, with why.
MAX_LINES = 600
# Modules over the limit whose split is in flight (owner in the comment); the test fails once one is under
# the limit (remove it here) and for any module over the limit that is not listed.
WAITING_FOR_SPLIT: dict[str, str] = {}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages (data/build excluded)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("data", "build"):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its body, each named as precisely as it exists."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


MODULES = module_files()
GRAPH = {name: imports_of(name, path, set(MODULES)) for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first repeated last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def collector_rank(module: str) -> int | None:
    """The place of a collector module in ORDER (cli and __main__ at the top; the package itself lowest)."""
    parts = module.split(".")
    if parts[0] != "collector":
        return None
    if len(parts) == 1:
        return 0
    return (
        ORDER.index("cli")
        if parts[1] in ("cli", "cli_check", "cli_tables", "__main__")
        else ORDER.index(parts[1])
    )


def test_the_graph_sees_imports_at_the_top_and_inside_functions():
    # guards the checks below against an empty or blind graph
    assert len(MODULES) > 60
    assert "collector.core.model" in GRAPH["collector.formats.jsonl"]
    assert "trainer.verl_seam" in GRAPH["trainer.verl_plugin"]  # imported inside a function there


def test_find_cycle_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_collector_modules_import_only_their_own_package_or_lower():
    wrong = []
    for module, targets in GRAPH.items():
        rank = collector_rank(module)
        if rank is None:
            continue
        for target in sorted(targets):
            target_rank = collector_rank(target)
            if target_rank is None:
                wrong.append(f"{module} imports {target} (the collector imports no app, trainer or script)")
            elif target_rank > rank:
                wrong.append(
                    f"{module} ({ORDER[rank]}) imports {target} ({ORDER[target_rank]}), a higher package"
                )
    assert not wrong, "\n".join(wrong)


def test_the_daemon_does_not_import_the_api():
    # The daemon's detection and sinks ask the run service (collector.runs) for advice and actions, as the API
    # does; the API app it serves is handed to it by the CLI (`run_daemon(settings, create_app)`).
    wrong = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.startswith("collector.daemon")
        for target in sorted(targets)
        if target == "collector.api" or target.startswith("collector.api.")
    ]
    assert not wrong, "the daemon sits beside the API, on the run service:\n" + "\n".join(wrong)


def test_the_app_reaches_the_collector_only_through_the_client_and_runtime():
    wrong = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.split(".")[0] == "app"
        for target in sorted(targets)
        if target.startswith("collector") and target not in APP_MAY_IMPORT
    ]
    assert not wrong, "the app draws what the API returns:\n" + "\n".join(wrong)


def test_no_module_over_600_lines():
    files = dict(MODULES)
    files.update({f"bench.{p.stem}": p for p in sorted((ROOT / "bench").glob("*.py"))})
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in files.values()}
    over = {path: n for path, n in sizes.items() if n > MAX_LINES and path not in WAITING_FOR_SPLIT}
    done = [path for path in WAITING_FOR_SPLIT if sizes.get(path, 0) <= MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines (split by concern): {over}"
    assert not done, f"split now (remove from WAITING_FOR_SPLIT): {done}"
