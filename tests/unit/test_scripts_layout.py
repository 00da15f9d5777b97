"""scripts/ holds what a user or CI runs, each named in the README or a doc (docs/*.md) and indexed in
scripts/README.md; one campaign's tools live in scripts/dev/ with a one-line index; every path `scripts/...` the
repository names (docs, code, tests, configs, the scripts themselves) exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
PATH = re.compile(r"(?<![\w/.-])scripts/[\w./-]+?\.(?:py|sh)\b")  # ours, not an upstream repo's scripts/


#: paths of the same form that name another repository's script
UPSTREAM = {"scripts/generate_pyi.py": "DeepGEMM's own, which scripts/gpu/deepgemm_build.sh bundles"}


def _user_scripts() -> list[Path]:
    return sorted(p for d in (SCRIPTS, SCRIPTS / "gpu") for p in d.iterdir() if p.suffix in (".py", ".sh"))


def test_every_script_is_named_in_the_readme_or_a_doc_and_indexed():
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    index = (SCRIPTS / "README.md").read_text()
    scripts = _user_scripts()
    assert len(scripts) >= 15
    assert [p.name for p in scripts if p.name not in docs] == []
    assert [p.name for p in scripts if p.name not in index] == []


def test_dev_tools_have_a_one_line_index():
    index = (SCRIPTS / "dev" / "README.md").read_text()
    tools = sorted(p.name for p in (SCRIPTS / "dev").iterdir() if p.suffix in (".py", ".sh"))
    assert tools, "scripts/dev/ holds the one-campaign tools"
    lines = [ln for ln in index.splitlines() if ln.startswith("- `")]
    assert sorted(re.match(r"- `([^`]+)`", ln).group(1) for ln in lines) == tools


def test_every_named_script_path_exists():
    """A moved script leaves no reference behind (raw results under docs/bench_results/ record the commands of their
    day and are not rewritten)."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "dwdp_trtllm").rglob("*.py"),
             *(ROOT / "tests").rglob("*.py"), *SCRIPTS.rglob("*"), *(ROOT / "configs").rglob("*.yaml")]
    missing = set()
    for f in files:
        if not f.is_file() or "bench_results" in f.parts or f.suffix not in (".md", ".py", ".sh", ".yaml"):
            continue
        for ref in PATH.findall(f.read_text(errors="replace")):
            if not (ROOT / ref).exists() and ref not in UPSTREAM:
                missing.add(f"{f.relative_to(ROOT)}: {ref}")
    assert sorted(missing) == []
