"""Lists in the docs that name code: kept equal to the code they name."""
import re
from pathlib import Path

from dwdp_trtllm.spec import models

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_architecture_lists_every_model_preset():
    row = next(ln for ln in (DOCS / "ARCHITECTURE.md").read_text().splitlines() if ln.startswith("| `spec/models.py` |"))
    listed = re.search(r"`model\.preset`: (.*?);", row).group(1)
    assert sorted(re.findall(r"`([^`]+)`", listed)) == sorted(models.PRESETS)


def test_benchmarks_results_page_links_resolve():
    """Every row of docs/BENCHMARKS.md (the current results) links raw data that exists, and the sections of the dated
    history (docs/history/) it links exist; every raw-data link of the history resolves too."""
    text = (DOCS / "BENCHMARKS.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    raw = [ln for ln in links if ln.startswith("bench_results/")]
    sections = [ln for ln in links if ln.startswith("history/") and "#" in ln]
    assert len(raw) >= 20 and len(sections) >= 20, (raw, sections)
    assert [r for r in raw if not (DOCS / r).exists()] == []
    for ln in sections:
        page, anchor = ln.split("#", 1)
        assert f'<a id="{anchor}"></a>' in (DOCS / page).read_text(), ln
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    data_rows = [r for r in rows if re.search(r"\d", r.split("|")[1] + r.split("|")[2])]
    # every result row links its raw data; a row measured before the page was cut links its dated history section
    assert all("](bench_results/" in r for r in data_rows), [r for r in data_rows if "](bench_results/" not in r][:3]
    for hist in (DOCS / "history").glob("*.md"):
        bad = [ln for ln in re.findall(r"\]\((\.\./bench_results/[^)#]+)", hist.read_text())
               if not (hist.parent / ln).exists()]
        assert bad == [], (hist.name, bad)


def test_benchmarks_page_is_current_results_with_how_to_reproduce():
    """BENCHMARKS.md keeps the current results only (the dated notes live in docs/history/): every section ends with
    how to reproduce it (a command, a date, a commit, the card: H100 or H200), and the routed-expert op's section the lead adds
    new GPU numbers to is there by name."""
    text = (DOCS / "BENCHMARKS.md").read_text()
    assert len(text.splitlines()) < 250
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert "Routed-expert op (FP8, Hopper)" in [s.splitlines()[0] for s in sections]
    for sec in sections:
        how = sec[sec.index("Reproduce"):]
        assert "`" in how and re.search(r"20\d\d-\d\d-\d\d", how) and re.search(r"commit [0-9a-f]{7}", how), sec[:60]
        assert re.search(r"\bH(100|200)\b", how), sec[:60]  # the card it ran on
