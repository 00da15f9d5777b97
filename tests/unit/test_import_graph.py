"""The package's import graph: no module-level import cycle, and the core stays host-free.

What counts (read from the source with `ast`, nothing is imported to build the graph):
- an edge A -> B for every `import B` / `from B import x` / `from . import B` in A that names a module of
  this package (`from pkg.m import name` also adds pkg.m.name when that is a submodule);
- *module-level* edges are the imports executed when A itself is imported: statements at the top of the
  file, including those inside module-level `if` / `try` / `with` blocks and class bodies, but not
  `if TYPE_CHECKING:` blocks (never executed);
- *function-level* edges are imports inside a function or method body: they run on first call, after
  every module involved finished importing, so they cannot fail with a half-initialised module.
A cycle of module-level edges is the failure (a partially initialised module is then observable, and
which import wins depends on who is imported first). Function-level edges are reported separately; a
cycle that needs one of them is a layering smell, not a crash (two modules that each need the other
are one concept, or a third module is missing); `function_level_cycles` lists them and a second test
keeps them at zero.

The core (config, placement, copy_plan, transport, copy_scheduler, prefetcher, runtime, memory,
models, perf, ...) imports neither `dwdp_trtllm.engine` nor `dwdp_trtllm.integration`: checked in a
fresh interpreter per module, since an import inside a function can still pull the host in at import
time of something else.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = "dwdp_trtllm"
ROOT = Path(__file__).resolve().parents[2] / PKG

#: the core: modules that any host (embedded engine, TensorRT-LLM) uses and that use no host
CORE = ["dwdp_trtllm.spec.config", "dwdp_trtllm.spec.schema", "dwdp_trtllm.spec.yaml_safe", "dwdp_trtllm.spec.models",
        "dwdp_trtllm.spec.hf_config", "dwdp_trtllm.spec.json_values", "dwdp_trtllm.core.placement", "dwdp_trtllm.core.copy_plan", "dwdp_trtllm.core.expert_buffers",
        "dwdp_trtllm.core.transport", "dwdp_trtllm.core.transport.shm", "dwdp_trtllm.core.transport.cuda_ipc",
        "dwdp_trtllm.core.transport.vmm", "dwdp_trtllm.core.copy_scheduler", "dwdp_trtllm.core.prefetcher",
        "dwdp_trtllm.errors", "dwdp_trtllm.core.runtime", "dwdp_trtllm.deploy.memory", "dwdp_trtllm.core.composite_slots",
        "dwdp_trtllm.core.memcpy", "dwdp_trtllm.spec.batching", "dwdp_trtllm.perf"]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, in_function: bool = False):
    """Yield (node, in_function) for every import statement; TYPE_CHECKING blocks skipped."""
    def walk(node, in_fn):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    yield from walk_one(sub, in_fn)
                continue
            yield from walk_one(child, in_fn)

    def walk_one(child, in_fn):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_fn
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from walk(child, True)
        else:
            yield from walk(child, in_fn)

    yield from walk(tree, in_function)


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level edges, function-level edges) between this package's modules."""
    mods = _modules()
    module_level: dict[str, set[str]] = {m: set() for m in mods}
    function_level: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node, in_fn in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem] if node.module else []
                targets += [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in mods]
            edges = function_level if in_fn else module_level
            for t in targets:
                while t and t not in mods and "." in t:  # `import a.b.c` where c is a name: its module
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    edges[mod].add(t)
    return module_level, function_level


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


def function_level_cycles() -> list[list[str]]:
    """Cycles of the graph with function-level imports counted too (for reading, see the module docstring)."""
    mod_edges, fn_edges = import_graph()
    both = {m: mod_edges[m] | fn_edges[m] for m in mod_edges}
    return cycles(both)


def test_graph_sees_known_edges():
    """The parser finds edges it must find (a broken parser would pass the cycle test vacuously)."""
    mod_edges, fn_edges = import_graph()
    assert "dwdp_trtllm.core.placement" in mod_edges["dwdp_trtllm.core.copy_plan"]
    assert "dwdp_trtllm.spec.config" in mod_edges["dwdp_trtllm"]
    assert "dwdp_trtllm.core.copy_scheduler" in fn_edges["dwdp_trtllm.core.runtime"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_level_import_cycle():
    mod_edges, _ = import_graph()
    found = cycles(mod_edges)
    assert found == [], f"module-level import cycles: {found}"


def test_no_import_cycle_even_through_function_imports():
    """The circles issue 23 listed closed only through function-level imports (the TensorRT-LLM host's
    boot / activation / layout / patches / runtime circle included); none may come back."""
    found = function_level_cycles()
    assert found == [], f"import cycles (function-level imports counted): {found}"


#: the package's layers, bottom up: a module may import its own folder and any folder of a lower layer, never one of a
#: higher layer (module-level and function-level imports alike). The tree is the architecture: see docs/ARCHITECTURE.md.
LAYERS = {
    "errors": 0, "byte_units": 0,              # the root's utilities
    "env": 0.5,                                # every environment variable read (its bad values raise errors.py's errors)
    "spec": 1,                                 # what the user configures and what a model is
    "core": 2, "ops": 2,                       # DWDP itself; the grouped-GEMM op
    "deploy": 3,                               # memory per rank, node layout, this machine's resources, output paths
    "perf": 4, "engine": 4,                    # the planner; the embedded engine
    "bench": 5, "integration": 5,              # the engine's benchmark; the TensorRT-LLM host
    "sizing": 5,                               # `dwdp size`: a disaggregated deployment simulated for traffic and SLOs
    "calibrate": 6,                            # `dwdp calibrate`: times the core's copies and bench's floor kernels
    "commands": 7, "cli": 7, "__main__": 8, "": 8,   # the `dwdp` front door and the package's own __init__
}
#: the front door's two halves call each other (cli dispatches to commands/, commands/published parses plan lines)
FRONT_DOOR = {"commands", "cli"}
#: what may sit at the package root: the utilities above, the front door and the folders
ROOT_FILES = {"__init__.py", "__main__.py", "cli.py", "env.py", "errors.py", "byte_units.py"}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_package_root_holds_only_utilities_and_folders():
    """The modules of DWDP itself, the user's configuration and the deployment facts live in folders (core/, spec/,
    deploy/): 27 modules once sat flat at the root."""
    flat = sorted(p.name for p in ROOT.glob("*.py"))
    assert set(flat) <= ROOT_FILES, sorted(set(flat) - ROOT_FILES)
    folders = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())
    assert set(folders) <= set(LAYERS), sorted(set(folders) - set(LAYERS))


def test_every_import_points_down_the_layers():
    """An edge from one folder to another goes to a lower layer (LAYERS): no folder imports one above it, at module
    level or inside a function."""
    mod, fn = import_graph()
    up = []
    for graph in (mod, fn):
        for a, bs in graph.items():
            for b in bs:
                fa, fb = _folder(a), _folder(b)
                if fa != fb and LAYERS[fa] <= LAYERS[fb] and not {fa, fb} <= FRONT_DOOR:
                    up.append(f"{a} -> {b}")
    assert not up, up


def test_core_imports_no_host_statically():
    """No core module names engine/ or integration/ in an import, at module level or inside a function."""
    mod_edges, fn_edges = import_graph()
    core = {m for m in mod_edges if any(m == c or m.startswith(c + ".") for c in CORE)}
    host = (f"{PKG}.engine", f"{PKG}.integration")
    assert sorted((m, t) for m in core for t in mod_edges[m] if t.startswith(host)) == []
    assert sorted((m, t) for m in core for t in fn_edges[m] if t.startswith(host)) == []


def test_rebuilding_a_bench_run_imports_no_host():
    """`dwdp validate-plan` and the floor calibration rebuild a bench run's batches (perf/bench_work.rebuild) with the
    chunked-prefill scheduler, which is the core's (batching.py): calling it, in a fresh interpreter, leaves
    engine/ and integration/ unimported (it imported engine.scheduler, and through bench/workload.py
    engine.records)."""
    code = ("import sys\nfrom dwdp_trtllm.perf.bench_work import rebuild, run_model\n"
            "cfg = {'model': {'preset': 'tiny'}, 'run': {'ranks': 2, 'warmup_iters': 1, 'modes': ['dep']},\n"
            "       'workload': {'isl': 300, 'tokens_per_rank': 3000, 'max_num_tokens': 512}}\n"
            "load, why = rebuild(cfg, run_model(cfg))\nassert load is not None and load.tokens_SR.sum() > 0, why\n"
            "print(','.join(sorted(m for m in sys.modules if m.startswith(('dwdp_trtllm.engine', 'dwdp_trtllm.integration')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"rebuild imported {out.stdout.strip()}"


@pytest.mark.slow  # ~3 s per module (a fresh interpreter imports torch); the static test above is the fast check
@pytest.mark.parametrize("module", CORE)
def test_core_module_leaves_hosts_unimported(module):
    """A fresh interpreter imports the core module; neither host package is in sys.modules after."""
    code = (f"import sys, {module}\n"
            "hosts = sorted(m for m in sys.modules if m.startswith(('dwdp_trtllm.engine', 'dwdp_trtllm.integration')))\n"
            "print(','.join(hosts))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{module} imported {out.stdout.strip()}"


def test_the_package_never_imports_transformers():
    """transformers is a [dev] extra (tests compare against its reference models): `dwdp bench` and every other
    command run without it. Statically: no module of the package names it, at any level."""
    found = []
    for mod, path in _modules().items():
        for node, _ in _imports(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n == "transformers" or n.startswith("transformers.") for n in names if not getattr(node, "level", 0)):
                found.append(mod)
    assert found == []


def test_the_bench_path_leaves_transformers_unimported():
    """What `dwdp bench configs/bench/quickstart.yaml` imports in the parent and in a rank (CLI, runner, launcher,
    rank entry, worker, model, loader, report, plots), in a fresh interpreter: transformers is not among them."""
    mods = ["dwdp_trtllm.cli", "dwdp_trtllm.commands.bench", "dwdp_trtllm.bench.runner", "dwdp_trtllm.bench.plots",
            "dwdp_trtllm.engine.launcher", "dwdp_trtllm.engine.rank_entry", "dwdp_trtllm.engine.worker",
            "dwdp_trtllm.engine.model", "dwdp_trtllm.engine.loader"]
    code = "import sys, importlib\nfor m in %r: importlib.import_module(m)\nprint('transformers' in sys.modules)" % mods
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
