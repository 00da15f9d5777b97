"""The TensorRT-LLM host's shape (issue 23): one folder, dwdp_trtllm/integration/, in which only the subfolder
integration/trtllm/ touches tensorrt_llm. Its import circles are checked package-wide by test_import_graph.py."""
import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "dwdp_trtllm"
TOUCHES = PKG / "integration" / "trtllm"


def _tensorrt_llm_imports(path: Path) -> list[int]:
    """Line numbers of `import tensorrt_llm...` / `from tensorrt_llm... import` statements (anywhere in the file)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        if any(n == "tensorrt_llm" or n.startswith("tensorrt_llm.") for n in names):
            lines.append(node.lineno)
    return lines


def test_only_integration_trtllm_imports_tensorrt_llm():
    found = {str(p.relative_to(REPO)): ls for p in PKG.rglob("*.py")
             if TOUCHES not in p.parents and (ls := _tensorrt_llm_imports(p))}
    assert found == {}, f"tensorrt_llm imported outside dwdp_trtllm/integration/trtllm/: {found}"
    assert _tensorrt_llm_imports(TOUCHES / "targets.py")  # the rule is not vacuous: the check finds real imports


def test_host_neutral_modules_import_without_tensorrt_llm():
    """Every integration module outside trtllm/ imports in a fresh interpreter whose path holds the fake
    tensorrt_llm tree (so an import of it would succeed and show) without bringing tensorrt_llm in."""
    mods = sorted("dwdp_trtllm." + ".".join(p.relative_to(PKG).with_suffix("").parts).removesuffix(".__init__")
                  for p in (PKG / "integration").rglob("*.py") if TOUCHES not in p.parents and p.parent != TOUCHES
                  and "custom_module" not in p.parts)
    assert "dwdp_trtllm.integration.process_role" in mods and "dwdp_trtllm.integration.hopper_manager" in mods
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n"
            "    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorrt_llm'))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DWDP_TRTLLM")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "fakes"), str(REPO)])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]", r.stdout
