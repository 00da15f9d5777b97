"""ConfigError: the one exception for bad user input (its own module so that every loader can raise it
without importing the schema that uses those loaders)."""
from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input: names the file, the dotted key path and what was expected."""

    def __init__(self, file: str | None, key: str, expected: str):
        self.file, self.key, self.expected = file, key, expected
        where = f"{file}: " if file else ""
        super().__init__(f"{where}{key or '<root>'}: {expected}")
