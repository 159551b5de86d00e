"""The problems of one input file (a dataset, a trace), collected so that all of them, up to a limit, are
reported at once: one ``file:line: what`` message each, then a count of the rest."""

from __future__ import annotations

__all__ = ["MAX_PROBLEMS", "Problems"]

MAX_PROBLEMS = 20  # problems listed per file; the rest are counted


class Problems:
    """``add`` located messages (or ``at(line, what)``); ``raise_any`` raises ``error(messages)`` when any came."""

    def __init__(self, path, error: type[Exception], limit: int = MAX_PROBLEMS):
        self.path, self.error, self.limit = path, error, limit
        self.errors: list[str] = []
        self.more = 0

    def add(self, message: str) -> None:
        if len(self.errors) < self.limit:
            self.errors.append(message)
        else:
            self.more += 1

    def at(self, line: int | None, message: str) -> None:
        """A problem of ``line`` (None: of the whole file)."""
        self.add(f"{self.path}:{line}: {message}" if line is not None else f"{self.path}: {message}")

    def raise_any(self) -> None:
        if self.more:
            self.errors.append(f"{self.path}: ... and {self.more} more problems")
        if self.errors:
            raise self.error(self.errors)
