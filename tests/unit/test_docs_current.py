"""Lists in the docs that name code: kept equal to the code they name."""
import re
from pathlib import Path

from dwdp_trtllm import models

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_architecture_lists_every_model_preset():
    row = next(ln for ln in (DOCS / "ARCHITECTURE.md").read_text().splitlines() if ln.startswith("| `models.py` |"))
    listed = re.search(r"`model\.preset`: (.*?);", row).group(1)
    assert sorted(re.findall(r"`([^`]+)`", listed)) == sorted(models.PRESETS)
