"""A history on a PostgreSQL server (``--db postgresql://USER@HOST[:PORT]/DBNAME``), for CI
runners that share one: psycopg 3 (``pip install 'popviz[postgres]'``), the tables of the SQLite
history in the schema ``popviz`` of that database.

Credentials come from libpq's usual places (``PGPASSWORD``, ``~/.pgpass``, ``PGSERVICE`` and
``~/.pg_service.conf``, ``PGSSLMODE``...) or the URL; a password is never printed: every message
names the URL without it and has it cut from the server's text. Appends are safe from parallel
jobs: each ``history add`` is one transaction that first takes a transaction-level advisory lock
(:data:`LOCK_KEY`), so runs are numbered in the order they commit and a run is recorded whole or
not at all — a server that goes away mid-append leaves no part of it. docs/ci-history.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from popviz.ci.history_db import PG_SCHEMA, Db
from popviz.errors import MissingDependencyError, PopvizError, UsageError

LOCK_KEY = 0x706F7076697A  # "popviz": pg_advisory_xact_lock's key for the history's writers
CONNECT_TIMEOUT_SECONDS = 10
LOCK_TIMEOUT_SECONDS = 60
"""How long a writer waits for another one (``lock_timeout``) before giving up."""


def redact(url: str) -> str:
    """The URL without its password (``postgresql://ci:***@db/perf``), and without a
    ``password=`` query parameter's value."""
    out = re.sub(r"^(postgres(?:ql)?://[^/@:?#]*):[^@/?#]*@", r"\1:***@", url, flags=re.IGNORECASE)
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", out)


def _password(url: str) -> str | None:
    try:
        from psycopg.conninfo import conninfo_to_dict

        return conninfo_to_dict(url).get("password") or None
    except Exception:
        return None


def _scrub(text: str, url: str) -> str:
    """Server or libpq text with any password cut out (libpq does not echo it, but be sure)."""
    import os

    text = " ".join(str(text).split())  # one line
    for secret in {_password(url), os.environ.get("PGPASSWORD")} - {None, ""}:
        text = text.replace(str(secret), "***")
    return redact(text)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError("a postgresql:// history needs psycopg 3: pip install 'popviz[postgres]'") \
            from None
    return psycopg


def error(exc: Exception, url: str, *, writing: bool, connected: bool = True) -> PopvizError:
    """One line naming the server (no password) and what happened; never a traceback."""
    psycopg = _psycopg()
    where = redact(url)
    text = _scrub(str(exc), url) or type(exc).__name__
    unchanged = "; no run was recorded (the transaction was rolled back): run it again" if writing else ""
    if not connected:
        return UsageError(f"{where}: cannot connect ({text}); check the server, the URL and the credentials "
                          "(PGPASSWORD, ~/.pgpass or PGSERVICE)")
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, psycopg.errors.LockNotAvailable) or sqlstate == "55P03":
        return UsageError(f"{where}: the history stayed locked by another transaction for {LOCK_TIMEOUT_SECONDS} s"
                          f"{unchanged}")
    if sqlstate == "25006" or isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return UsageError(f"{where}: the server refused ({text}); history add needs a user that may create "
                          f"schema {PG_SCHEMA!r} and write its tables")
    if sqlstate.startswith("53"):  # insufficient resources: disk full, out of memory
        return UsageError(f"{where}: the server is out of resources ({text}){unchanged}")
    if isinstance(exc, psycopg.OperationalError) or sqlstate.startswith(("08", "57")):
        return UsageError(f"{where}: the connection to the server was lost ({text}){unchanged}")
    if sqlstate.startswith("23"):
        return UsageError(f"{where}: the run clashes with rows already there ({text}){unchanged}")
    return UsageError(f"{where}: the server said: {text}{unchanged or '; the history was not changed'}")


@contextmanager
def _connection(url: str, *, writing: bool) -> Iterator[Any]:
    psycopg = _psycopg()
    try:
        con = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_SECONDS, autocommit=True,
                              application_name="popviz history")
    except psycopg.Error as exc:
        raise error(exc, url, writing=False, connected=False) from None
    except Exception as exc:  # a malformed URL (psycopg's ProgrammingError is an Error too)
        raise UsageError(f"{redact(url)}: not a PostgreSQL URL psycopg can use ({_scrub(str(exc), url)}); "
                         "expected postgresql://USER@HOST:PORT/DATABASE") from None
    try:
        yield con
    except psycopg.Error as exc:
        raise error(exc, url, writing=writing) from None
    finally:
        try:
            con.close()
        except Exception:
            pass


@contextmanager
def _transaction(con: Any, begin: str) -> Iterator[None]:
    con.execute(begin)
    try:
        yield
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:  # the server went away: it rolled back
            pass
        raise
    con.execute("COMMIT")


@contextmanager
def reading(db: str, *, at_rest: bool = False) -> Iterator[Db]:
    """One REPEATABLE READ, READ ONLY transaction: a consistent snapshot of committed runs."""
    with _connection(db, writing=False) as con, \
            _transaction(con, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"):
        con.execute(f"SET LOCAL search_path TO {PG_SCHEMA}")
        yield Db(con, redact(db), "postgresql")


@contextmanager
def writing(db: str) -> Iterator[Db]:
    """One transaction holding the writers' advisory lock (appends one after another, numbered
    in commit order); the schema created inside it, so two first adds cannot race."""
    with _connection(db, writing=True) as con, _transaction(con, "BEGIN"):
        con.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_SECONDS}s'")
        con.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        exists = con.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (PG_SCHEMA,)).fetchone()
        if not exists:
            con.execute(f"CREATE SCHEMA {PG_SCHEMA}")
        con.execute(f"SET LOCAL search_path TO {PG_SCHEMA}")
        yield Db(con, redact(db), "postgresql")
