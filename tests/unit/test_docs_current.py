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
    """Every row of docs/BENCHMARKS.md's results page links raw data that exists and a history section that exists."""
    text = (DOCS / "BENCHMARKS.md").read_text()
    page = text[text.index("## Results today"):text.index("## History")]
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    links = re.findall(r"\]\(([^)]+)\)", page)
    raw = [ln for ln in links if ln.startswith("bench_results/")]
    sections = [ln[1:] for ln in links if ln.startswith("#")]
    assert len(raw) >= 20 and len(sections) >= 20, (raw, sections)
    assert [r for r in raw if not (DOCS / r).exists()] == []
    assert sorted(set(sections) - anchors) == []
    rows = [ln for ln in page.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    data_rows = [r for r in rows if re.search(r"\d", r.split("|")[1] + r.split("|")[2])]
    assert all("](bench_results/" in r and "](#s" in r for r in data_rows), [r for r in data_rows
                                                                          if "](#s" not in r][:3]
