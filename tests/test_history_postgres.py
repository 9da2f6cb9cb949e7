"""The history on a real PostgreSQL server (issue 43): `--db postgresql://...` for history add and
show and compare --against-history, the same schema, validation and migrations as the SQLite
file, two processes appending at once, credentials from libpq's places and never printed, and a
server that goes away in the middle of an append (a clear line, no part of the run recorded).

The server is the one .ci/run started (``POPVIZ_TEST_POSTGRES``), else one these tests start
(tests/pg_server.py: Debian's initdb and pg_ctl); each test has a database of its own. Without
psycopg or PostgreSQL the tests are skipped with the reason, and fail under CI=true."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pg_server
import pytest

from popviz import testing
from popviz.ci import history
from popviz.ci.baseline import EngineMetrics, from_reports
from popviz.sources.bundle import write_bundle

from conftest import ROOT, assert_one_line_error, hang_guard, run_cli, unwrapped

psycopg = pytest.importorskip("psycopg") if os.environ.get("CI") != "true" else __import__("psycopg")

pg_server.require()
_start_private = pg_server.start_private
server = pg_server.server  # the module's fixture


@pytest.fixture
def db(server) -> str:
    return pg_server.create_database(server[0], f"popviz_t_{uuid.uuid4().hex[:12]}")


def engine(cycles: float, used: float = 1000.0, name: str = "training", **env: str) -> EngineMetrics:
    return EngineMetrics(name=name, instance=None, source="pva", estimated=False, config={"device_iterations": 4},
                         metrics={"pipeline.cycles_per_micro_batch": cycles, "memory.ipu0.used_bytes": used},
                         environment=dict(env))


TIMING = dict(name="training", mode="training", gradient_accumulation=16, device_iterations=2)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("pghist")
    out = {}
    for name, stages in (("base", [1000, 1000]), ("slow", [1000, 1400])):
        report = testing.pipeline_report(stages, **TIMING)
        write_bundle(report, root / name / report.name)
        out[name] = root / name
    return out


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI with none of libpq's variables but those in ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.run([sys.executable, "-m", "popviz", *args], cwd=ROOT, env={**full, "COLUMNS": "100", **env},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def sql(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as con:
        cur = con.execute(statement, params)
        return cur.fetchall() if cur.description else []


# ------------------------------------------------------------------------------- the CLI

def test_add_show_and_compare_against_a_postgresql_history(db, bundles):
    base = from_reports(bundles["base"])
    for label in ("c1", "c2", "c3"):
        history.add(db, base, label=label)
    proc = run_cli("history", "add", str(bundles["slow"]), "--db", db, "--label", "c4")
    assert proc.returncode == 0, proc.stderr
    assert unwrapped(proc.stderr) == f"popviz: added run #4 (c4) to {db}: 1 engine(s), 19 metric(s)\n"
    again = run_cli("history", "add", str(bundles["slow"]), "--db", db, "--label", "c4")
    assert "popviz: note: run #4 (c4) has the same label 'c4'" in unwrapped(again.stderr)
    sql(db, "DELETE FROM popviz.runs WHERE id = 5")  # the foreign keys take its engines and metrics along
    assert sql(db, "SELECT count(*) FROM popviz.metrics WHERE run_id = 5") == [(0,)]
    show = run_cli("history", "show", "--db", db, "pipeline.*")
    assert show.returncode == 0, show.stderr
    assert unwrapped(show.stdout).splitlines()[0] == (  # the headline, broken between words at 100 columns
        "popviz history: 4 run(s), #1 (c1) to #4 (c4); step regression at #4 (c4) in 3 metric(s): "
        "training pipeline.cycles_per_micro_batch, training pipeline.stage1.cycles_per_micro_batch and 1 more")
    assert "training pipeline.cycles_per_micro_batch at #4 (c4): 3,031 → 4,244 (+40.00%) regressed" in show.stdout
    doc = json.loads(run_cli("history", "show", "--db", db, "pipeline.cycles_per_micro_batch", "--json").stdout)
    assert doc["db"] == db and [v["value"] for v in doc["metrics"][0]["values"]] == [3031.25] * 3 + [4243.75]
    slow = run_cli("compare", "--against-history", db, str(bundles["slow"]), "--last", "3")
    assert slow.returncode == 1, slow.stderr
    assert slow.stdout.startswith("popviz: FAIL: regression in training pipeline.cycles_per_micro_batch "
                                  "(3,031 → 4,244, +40.00%)")
    assert unwrapped(slow.stdout).splitlines()[1] == f"base: the median of the last 3 run(s) in {db} (#2 (c2) to #4 (c4))"


def test_the_same_schema_as_the_sqlite_file(db, tmp_path):
    import sqlite3

    history.add(db, [engine(1000.0, popviz="0.1.0")], label="a")
    file = tmp_path / "h.db"
    history.add(file, [engine(1000.0, popviz="0.1.0")], label="a")
    con = sqlite3.connect(file)
    lite = {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in ("meta", "runs", "engines", "metrics")}
    con.close()
    pg = {t: [r[0] for r in sql(db, "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                                    "'popviz' AND table_name = %s ORDER BY ordinal_position", (t,))] for t in lite}
    assert pg == lite
    assert dict(sql(db, "SELECT key, value FROM popviz.meta"))["schema_version"] == str(history.SCHEMA_VERSION) == "2"
    assert sql(db, "SELECT run_id, engine, config, environment FROM popviz.engines") == [
        (1, "training", '{"device_iterations": 4}', '{"popviz": "0.1.0"}')]


def test_the_same_validation_as_the_sqlite_file(db, bundles):
    history.add(db, [engine(1000.0)], label="a")
    sql(db, "UPDATE popviz.metrics SET value = -5 WHERE metric = 'memory.ipu0.used_bytes'")
    message = "has an impossible value for metric 'memory.ipu0.used_bytes' of engine 'training' of run #1: -5 bytes"
    show = assert_one_line_error(run_cli("history", "show", "--db", db), message)
    add = assert_one_line_error(run_cli("history", "add", str(bundles["base"]), "--db", db), message)
    assert add == show and "it was not changed" in add
    assert sql(db, "SELECT count(*) FROM popviz.runs") == [(1,)]
    sql(db, "UPDATE popviz.metrics SET value = 'NaN' WHERE metric = 'memory.ipu0.used_bytes'")
    assert_one_line_error(run_cli("history", "show", "--db", db), "not finite for metric 'memory.ipu0.used_bytes'")
    sql(db, "UPDATE popviz.metrics SET value = 5")
    sql(db, "CREATE FUNCTION popviz.wipe() RETURNS trigger AS $$ BEGIN DELETE FROM popviz.metrics; RETURN NEW; END "
            "$$ LANGUAGE plpgsql")
    sql(db, "CREATE TRIGGER wipe AFTER INSERT ON popviz.runs FOR EACH ROW EXECUTE FUNCTION popviz.wipe()")
    assert_one_line_error(run_cli("history", "add", str(bundles["base"]), "--db", db),
                          "has trigger 'wipe', which popviz never creates")
    assert sql(db, "SELECT count(*) FROM popviz.metrics") == [(2,)]  # never ran
    sql(db, "DROP TRIGGER wipe ON popviz.runs")
    sql(db, "UPDATE popviz.meta SET value = '3' WHERE key = 'schema_version'")
    assert_one_line_error(run_cli("history", "show", "--db", db),
                          "is a popviz history of schema 3; this popviz 0.1.0 reads schema 2 and older: upgrade popviz")


def test_a_schema_1_history_on_the_server_is_migrated_by_the_next_add(db):
    history.add(db, [engine(1000.0)], label="old")
    sql(db, "ALTER TABLE popviz.engines DROP COLUMN environment")
    sql(db, "DROP INDEX popviz.metrics_by_value")  # what schema 1 had
    sql(db, "UPDATE popviz.meta SET value = '1' WHERE key = 'schema_version'")
    h = history.read(db)
    assert [r.label for r in h.runs] == ["old"] and h.engines[(1, "training")].environment == {}
    history.add(db, [engine(1000.0, poplar_sdk="3.3.0")], label="new")
    assert dict(sql(db, "SELECT key, value FROM popviz.meta"))["schema_version"] == "2"
    assert sql(db, "SELECT run_id, environment FROM popviz.engines ORDER BY run_id") == [
        (1, "{}"), (2, '{"poplar_sdk": "3.3.0"}')]


def test_an_empty_database_holds_no_runs_and_is_left_empty(db):
    assert_one_line_error(run_cli("history", "show", "--db", db), "holds no runs yet; add one with popviz history add")
    assert sql(db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'popviz'") == [(0,)]


# --------------------------------------------------------------------------- concurrency

WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from popviz.ci import history
    from popviz.ci.baseline import EngineMetrics

    db, who, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():
        time.sleep(0.005)
    for i in range(40):
        metrics = {f"memory.ipu{k}.used_bytes": float(1000 * k + i) for k in range(16)}
        history.add(db, [EngineMetrics("training", None, "pva", False, {"writer": who}, metrics)], label=f"{who}-{i}")
    print("done")
""")


def test_two_ci_jobs_appending_at_once_both_land(db, tmp_path):
    """The first adds of both race to create the schema, then every add races the other's."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db, who, str(go)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
    go.touch()
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    h = history.read(db)
    assert [r.id for r in h.runs] == list(range(1, 81))
    assert {r.label for r in h.runs} == {f"{w}-{i}" for w in "ab" for i in range(40)}
    for run in h.runs:
        e = h.engines[(run.id, "training")]
        i = int(run.label.split("-")[1])
        assert e.config == {"writer": run.label[0]}
        assert e.metrics == {f"memory.ipu{k}.used_bytes": float(1000 * k + i) for k in range(16)}
    median = history.median_side(db, 5)  # over the newest run's writer only: the configuration changed
    newest = h.engines[(80, "training")].config
    tail = []
    for r in reversed(h.runs[-5:]):
        if h.engines[(r.id, "training")].config != newest:
            break
        tail.insert(0, r.id)
    assert [r.id for r in median.runs["training"]] == tail


# --------------------------------------------------------------------------- credentials

def test_credentials_from_pgpassword_pgpass_and_pgservice_never_printed(server, tmp_path):
    base, _ = server
    user, password = pg_server.PASSWORD_USER
    name = f"popviz_c_{uuid.uuid4().hex[:10]}"
    pg_server.create_database(base, name)
    sql(pg_server.url_of(base, name), f"GRANT ALL ON DATABASE {name} TO {user}")
    sql(pg_server.url_of(base, name), f"GRANT CREATE ON SCHEMA public TO {user}")
    port = sql(base, "SHOW port")[0][0]
    url = f"postgresql://{user}@127.0.0.1:{port}/{name}"
    plain = {"HOME": str(tmp_path)}  # no ~/.pgpass there
    denied = cli("history", "add", str(ROOT / "sample_reports" / "mnist_pipeline"), "--db", url, env=plain)
    assert_one_line_error(denied, f"{url}: cannot connect", "PGPASSWORD, ~/.pgpass or PGSERVICE")
    ok = cli("history", "add", str(ROOT / "sample_reports" / "mnist_pipeline"), "--db", url, "--label", "env",
                 env={**plain, "PGPASSWORD": password})
    assert ok.returncode == 0, ok.stderr
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{port}:{name}:{user}:{password}\n")
    os.chmod(pgpass, 0o600)
    shown = cli("history", "show", "--db", url, "--json", env={**plain, "PGPASSFILE": str(pgpass)})
    assert shown.returncode == 0, shown.stderr
    assert [r["label"] for r in json.loads(shown.stdout)["runs"]] == ["env"]
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[perf]\nhost=127.0.0.1\nport={port}\ndbname={name}\nuser={user}\npassword={password}\n")
    by_service = cli("compare", "--against-history", "postgresql:///?service=perf",
                         str(ROOT / "sample_reports" / "mnist_pipeline"),
                         env={**plain, "PGSERVICEFILE": str(services)})
    assert by_service.returncode == 0, by_service.stderr
    for proc in (denied, ok, shown, by_service):
        assert password not in proc.stdout + proc.stderr
    # a password in the URL itself: never printed, in a message or in the run's record
    wrong = f"postgresql://{user}:not-the-{password}@127.0.0.1:{port}/{name}"
    bad = cli("history", "show", "--db", wrong, env=plain)
    line = assert_one_line_error(bad, f"postgresql://{user}:***@127.0.0.1:{port}/{name}: cannot connect")
    assert "not-the-" not in bad.stderr + bad.stdout and "password authentication failed" in line
    good = f"postgresql://{user}:{password}@127.0.0.1:{port}/{name}"
    added = cli("history", "add", str(ROOT / "sample_reports" / "mnist_pipeline"), "--db", good, env=plain)
    assert added.returncode == 0 and password not in added.stderr, added.stderr
    assert f"to postgresql://{user}:***@127.0.0.1:{port}/{name}:" in added.stderr
    html = tmp_path / "dash.html"
    assert cli("history", "show", "--db", good, "--html", str(html), env=plain).returncode == 0
    assert password not in html.read_text()


def test_no_server_and_no_psycopg_are_one_line(tmp_path):
    line = assert_one_line_error(run_cli("history", "show", "--db", "postgresql://nobody@127.0.0.1:1/perf"),
                                 "postgresql://nobody@127.0.0.1:1/perf: cannot connect")
    assert "Traceback" not in line
    script = ("import sys; sys.modules['psycopg'] = None\n"
              "from popviz.cli import main\nsys.exit(main(['history', 'show', '--db', 'postgresql://x@h/db']))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert_one_line_error(proc, "a postgresql:// history needs psycopg 3: pip install 'popviz[postgres]'")


# ------------------------------------------------------------------- a server that goes away

def test_a_server_that_goes_away_mid_append_records_no_part_of_the_run(tmp_path):
    """The add has inserted its run and engine rows and waits to insert the metrics (the test holds
    a lock on the table) when the server stops: one line, exit 2, and after a restart no trace of
    that run."""
    server = _start_private()
    try:
        db = pg_server.create_database(server.url(), "away")
        history.add(db, [engine(1000.0)], label="before")
        holder = psycopg.connect(db)
        holder.execute("LOCK TABLE popviz.metrics IN EXCLUSIVE MODE")  # reads pass, inserts wait
        watcher = psycopg.connect(db, autocommit=True)  # pg_stat_activity is read afresh each time
        proc = subprocess.Popen([sys.executable, "-m", "popviz", "history", "add",
                                 str(ROOT / "sample_reports" / "mnist_pipeline"), "--db", db, "--label", "lost"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + hang_guard(120)
        while True:  # until the add waits on the lock, inside its transaction
            waiting = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                     "'popviz history' AND wait_event_type = 'Lock'").fetchone()[0]
            if waiting or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert waiting == 1, proc.communicate(timeout=hang_guard(10))
        server.stop("immediate")
        out, err = proc.communicate(timeout=hang_guard(120))
        assert proc.returncode == 2, (out, err)
        lines = unwrapped(err.strip()).splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"popviz: error: {db}: the connection to the server was lost (")
        assert lines[0].endswith("no run was recorded (the transaction was rolled back): run it again")
        server.start()
        pg_server.wait_ready(db)
        assert [r.label for r in history.read(db).runs] == ["before"]
        assert sql(db, "SELECT count(*) FROM popviz.engines") == [(1,)]
        assert sql(db, "SELECT count(*) FROM popviz.metrics") == [(2,)]
        # the lost run's number is not reused (after a crash PostgreSQL's sequence skips ahead: gaps)
        assert history.add(db, [engine(1001.0)], label="after").id > 2
        assert [r.label for r in history.read(db).runs] == ["before", "after"]
    finally:
        server.stop("immediate")
