"""tests/conftest.py's SLOW list marks real tests: every entry names a test function that exists, and the collection
hook marks exactly the listed tests slow."""
import re
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("key", sorted(conftest.SLOW))
def test_every_slow_entry_names_a_test(key):
    path, name = key.split("::")
    func = name.split("[", 1)[0]
    assert re.search(rf"^def {re.escape(func)}\(", (ROOT / path).read_text(), re.M), f"{key}: no such test"


class _Item:
    def __init__(self, nodeid):
        self.nodeid, self.marks = nodeid, []

    def add_marker(self, mark):
        self.marks.append(mark.name)


def test_the_hook_marks_listed_tests_and_every_parameter_set_of_a_listed_function():
    whole = next(k for k in conftest.SLOW if "[" not in k)
    one = next(k for k in conftest.SLOW if "[" in k)
    items = [_Item(whole), _Item(whole + "[a-b]"), _Item(whole + "_other"), _Item(one),
             _Item(one.split("[")[0] + "[another]")]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.marks for i in items] == [["slow"], ["slow"], [], ["slow"], []]
