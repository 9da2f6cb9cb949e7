"""The connection a history is read and written through, in both dialects (SQLite and
PostgreSQL): ``?`` placeholders, one-line refusals naming the history. popviz.ci.history_store
holds the schema; popviz.ci.history_sqlite and history_pg open the connections."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from popviz.errors import CorruptReportError

PG_SCHEMA = "popviz"
"""The PostgreSQL schema (namespace) the tables live in."""


@dataclass
class Db:
    """A connection inside a transaction, with ``?`` placeholders in both dialects."""

    raw: Any
    where: str
    """The history as messages name it (no password)."""
    kind: str
    """``sqlite`` or ``postgresql``."""
    version: int = 0
    """The schema version of what is stored (0: nothing yet)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self.kind == "postgresql":
            cur = self.raw.cursor()
            cur.execute(sql.replace("?", "%s"), tuple(params))
            return cur
        return self.raw.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.kind == "postgresql":
            with self.raw.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), rows)
        else:
            self.raw.executemany(sql, rows)

    def fail(self, what: str) -> CorruptReportError:
        """A history that holds what cannot be true (the file is not replaced: it says what)."""
        return CorruptReportError(f"{self.where} {what}; it was not changed (docs/ci-history.md says how to "
                                  "read and fix a history)")

    def not_a_history(self, what: str) -> CorruptReportError:
        target = "database" if self.kind == "postgresql" else "file name"
        return CorruptReportError(f"{self.where} {what}; pass a history written by popviz history add "
                                  f"(or a new {target} to start one)")
