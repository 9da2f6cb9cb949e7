"""A real PostgreSQL server for the history tests: Debian's ``postgresql`` package's initdb and
pg_ctl, a private cluster in a temporary directory, listening on a unix socket there and on a
free localhost port (run as the ``postgres`` user when the tests run as root, which PostgreSQL
refuses). `.ci/run` starts one with ``python tests/pg_server.py start DIR`` and exports
``POPVIZ_TEST_POSTGRES`` (a URL of a superuser); tests without it start their own.

Also a command line for `.ci/run`:  python tests/pg_server.py start DIR | stop DIR
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "POPVIZ_TEST_POSTGRES"
"""A superuser URL of a running server (set by .ci/run); each test gets a database of its own."""
PASSWORD_USER = ("popviz_ci", "s3cret-pw-never-printed")
"""A role that logs in with a password over TCP (scram-sha-256): the credentials tests."""


def bindir() -> Path | None:
    """Where initdb and pg_ctl are (Debian keeps them out of PATH), or None."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(Path(candidate) / "initdb", os.X_OK) and os.access(Path(candidate) / "pg_ctl", os.X_OK):
            return Path(candidate)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A private cluster: ``start()``, ``url(db)``, ``stop()``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.port_file = self.root / "port"
        self.port = int(self.port_file.read_text()) if self.port_file.exists() else _free_port()

    def _as_owner(self, *cmd: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *cmd]
        return list(cmd)

    def _run(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._as_owner(*cmd), capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)

    def start(self) -> None:
        bins = bindir()
        if bins is None:
            raise RuntimeError("PostgreSQL's initdb and pg_ctl are not installed (apt-get install postgresql)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
            os.chmod(self.root, 0o755)
        if not self.data.exists():
            pw = self.root / "pw"
            pw.write_text("postgres-superuser-pw\n")
            if os.geteuid() == 0:
                shutil.chown(pw, "postgres")
            r = self._run(str(bins / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                          "--auth-host=scram-sha-256", f"--pwfile={pw}", "-E", "UTF8", "--no-sync")
            if r.returncode:
                raise RuntimeError(f"initdb failed: {r.stderr.strip()[-500:]}")
            self.port_file.write_text(str(self.port))
        r = self._run(str(bins / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-t", "60",
                      "-o", f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.sock} "
                      "-c fsync=off -c max_connections=60 -c shared_buffers=16MB", "start")
        if r.returncode:
            log = (self.root / "log").read_text(errors="replace")[-800:] if (self.root / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {log}")
        self.sql("postgres", f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{PASSWORD_USER[0]}') "
                 f"THEN CREATE ROLE {PASSWORD_USER[0]} LOGIN CREATEDB PASSWORD '{PASSWORD_USER[1]}'; END IF; END $$")

    def stop(self, mode: str = "fast") -> None:
        bins = bindir()
        if bins is not None and self.data.exists():
            self._run(str(bins / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def url(self, db: str = "postgres") -> str:
        """The superuser over the unix socket (trust)."""
        return f"postgresql:///{db}?host={self.sock}&port={self.port}&user=postgres"

    def tcp_url(self, db: str, user: str = PASSWORD_USER[0]) -> str:
        """A password role over TCP: the password must come from PGPASSWORD, ~/.pgpass or PGSERVICE."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def sql(self, db: str, statement: str) -> None:
        self.sql_url(self.url(db), statement)

    @staticmethod
    def sql_url(url: str, statement: str) -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=10) as con:
            con.execute(statement)


def url_of(base: str, db: str) -> str:
    """``base`` (a URL naming a database) with another database name."""
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}/{db}" + (f"?{parts.query}" if parts.query else "")


def create_database(base: str, name: str) -> str:
    """A new empty database on the server of ``base``; its URL."""
    import psycopg

    with psycopg.connect(base, autocommit=True, connect_timeout=10) as con:
        con.execute(f'DROP DATABASE IF EXISTS "{name}"')
        con.execute(f'CREATE DATABASE "{name}"')
    return url_of(base, name)


def wait_ready(base: str, timeout: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(base, connect_timeout=5):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def require() -> None:
    """Skip the calling test module, saying why, when no server can be had; under CI=true, fail."""
    import importlib.util

    import pytest

    reason = None
    if importlib.util.find_spec("psycopg") is None:
        reason = "psycopg is not installed (pip install -e '.[test]' installs it)"
    elif not os.environ.get(ENV) and bindir() is None:
        reason = "PostgreSQL is not installed (apt-get install postgresql; .ci/run does)"
    if reason:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"CI must run the PostgreSQL history tests: {reason}")
        pytest.skip(reason, allow_module_level=True)


def start_private() -> Server:
    """A server of the test's own (skipped with the reason when it cannot start, outside CI)."""
    import pytest

    s = Server(Path(tempfile.mkdtemp(prefix="popviz-pg-", dir="/tmp")))
    try:
        s.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"cannot start a PostgreSQL server here: {exc}")
    return s


def _server_fixture():
    """(superuser URL, the Server when the tests started it): .ci/run's, else one of their own."""
    given = os.environ.get(ENV)
    if given:
        wait_ready(given)
        yield given, None
        return
    s = start_private()
    yield s.url(), s
    s.stop("immediate")


def _fixture():
    import pytest

    return pytest.fixture(scope="module", name="server")(_server_fixture)


server = _fixture() if "pytest" in sys.modules else None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python tests/pg_server.py start|stop DIR", file=sys.stderr)
        return 2
    server = Server(Path(argv[1]))
    if argv[0] == "start":
        server.start()
        print(server.url())
    else:
        server.stop()
    return 0


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main(sys.argv[1:]))
