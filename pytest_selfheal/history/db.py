"""The failure history database, ``<reports root>/history.sqlite3`` (edge: ``sqlite3``): a versioned
schema with forward migrations; WAL and a busy timeout, so concurrent runs on one root wait for each
other. A database that is corrupted, foreign, newer, or a symlink is :class:`HistoryUnavailable`:
one line, and the caller goes on without history."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, fields
from pathlib import Path
from typing import Optional

from pytest_selfheal.errors import one_line
from pytest_selfheal.history.records import (
    FAILED,
    OUTCOMES,
    PASSED_ON_RERUN,
    QUARANTINED,
    RUN_FIELDS,
    FlakeRate,
    RunInfo,
    Sighting,
    TestOutcome,
)

HISTORY_FILE = "history.sqlite3"
APPLICATION_ID = 0x53484C46  # "SHLF": tells our database from any other SQLite file
SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 30_000

# MIGRATIONS[v] takes a database at version v to v + 1 (version 0: an empty file).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    0: (
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            run_key TEXT NOT NULL UNIQUE,
            recorded_at TEXT NOT NULL,
            kind TEXT NOT NULL,
            incident_id TEXT,
            iteration INTEGER,
            commit_sha TEXT,
            branch TEXT,
            ci_workflow TEXT,
            ci_job TEXT,
            ci_run_id TEXT,
            tests_run INTEGER
        )""",
        """CREATE TABLE outcomes (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            nodeid TEXT NOT NULL,
            outcome TEXT NOT NULL,
            fingerprint TEXT,
            failure_class TEXT
        )""",
        "CREATE INDEX outcomes_by_nodeid ON outcomes(nodeid)",
        "CREATE INDEX outcomes_by_fingerprint ON outcomes(fingerprint)",
        "CREATE INDEX outcomes_by_run ON outcomes(run_id)",
        "CREATE INDEX runs_by_branch ON runs(branch, recorded_at)",
    ),
    # The history segments already recorded (history/segments.py): a pull reads only the new ones.
    1: ("CREATE TABLE segments (name TEXT PRIMARY KEY) WITHOUT ROWID",),
    # The repository of a run's branch ("known" counts the base repository's branch only), and
    # the shared segments a pull refused: each is said once, never downloaded again.
    2: ("ALTER TABLE runs ADD COLUMN repository TEXT",
        "CREATE TABLE refused_segments (name TEXT PRIMARY KEY, reason TEXT NOT NULL) WITHOUT ROWID"),
}

# RunInfo's fields in order (its commit is the column commit_sha): a row is a RunInfo(*row).
_RUN_COLUMNS = tuple("commit_sha" if name == "commit" else name for name in RUN_FIELDS)
_OUTCOME_COLUMNS = ", ".join(f.name for f in fields(TestOutcome))  # a row is a TestOutcome(*row)
# Fingerprints per sightings query: SQLite before 3.32 allows 999 parameters in a statement.
_SIGHTINGS_CHUNK = 500


class HistoryUnavailable(Exception):
    """The history database cannot be used; ``str()`` is one line naming the file."""


def _unavailable(path: Path, problem: str) -> HistoryUnavailable:
    return HistoryUnavailable(one_line(f"{path}: history unavailable ({problem}); continuing without history"))


class HistoryDB:
    """An open history database: a context manager."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path

    @classmethod
    def open(cls, reports_root: Path, *, create: bool = True) -> HistoryDB:
        """Open (and with ``create``, create or migrate) ``reports_root/history.sqlite3``."""
        return cls.open_file(Path(reports_root) / HISTORY_FILE, create=create)

    @classmethod
    def open_file(cls, path: Path, *, create: bool = True) -> HistoryDB:
        """:meth:`open` for a database file of any name (a shard's history artifact)."""
        path = Path(path)
        if os.path.islink(path) or os.path.islink(path.parent):
            raise _unavailable(path, "a symlink; the history stays inside the reports root")
        if not create and not path.is_file():
            raise _unavailable(path, "no history recorded yet")
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (sqlite3.Error, OSError) as exc:
            raise _unavailable(path, str(exc)) from None
        db = cls(connection, path)
        try:
            db._prepare(create)
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise _unavailable(path, f"not a readable history database: {exc}") from None
        except HistoryUnavailable:
            connection.close()
            raise
        return db

    def _prepare(self, create: bool) -> None:
        self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._db.execute("PRAGMA foreign_keys = ON")
        # One read transaction: another process creating the schema commits its tables and
        # its application id together, and separate reads could see one without the other.
        self._db.execute("BEGIN")
        try:
            app_id = int(self._db.execute("PRAGMA application_id").fetchone()[0])
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            self._db.execute("COMMIT")
        if app_id != APPLICATION_ID and (app_id != 0 or tables):
            raise _unavailable(self.path, "another application's SQLite file")
        if version > SCHEMA_VERSION:
            raise _unavailable(self.path, f"schema version {version} is newer than this pytest-selfheal ({SCHEMA_VERSION})")
        if version < SCHEMA_VERSION and not create:
            raise _unavailable(self.path, f"schema version {version} needs a migration; run pytest --selfheal once")
        # WAL + NORMAL: a power cut may lose the last runs, which the history can afford. Set before
        # migrating (the schema steps then commit unsynced); while another process creating the
        # file sets the same mode, SQLite answers "locked" at once, not after the busy timeout.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self._db.execute("PRAGMA synchronous = NORMAL")
        if version < SCHEMA_VERSION:
            self._migrate(version)

    def _migrate(self, version: int) -> None:
        # One transaction per step: a crash leaves the previous version, never half of one.
        while version < SCHEMA_VERSION:
            with self._transaction():
                current = int(self._db.execute("PRAGMA user_version").fetchone()[0])
                if current == version:  # another process may have migrated meanwhile
                    for statement in MIGRATIONS[version]:
                        self._db.execute(statement)
                    self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self._db.execute(f"PRAGMA user_version = {version + 1}")
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> HistoryDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, run: RunInfo, outcomes: Sequence[TestOutcome], *, segment: Optional[str] = None) -> bool:
        """Record one run (from ``segment``); False when its ``run_key`` was recorded before."""
        return self.import_runs([(run, outcomes)], segments=[segment] if segment else ()) == 1

    def import_runs(self, items: Iterable[tuple[RunInfo, Sequence[TestOutcome]]], *,
                    segments: Iterable[str] = ()) -> int:
        """Record many runs (from ``segments``) in one transaction, known ``run_key`` skipped; how many were new."""
        batch = list(items)
        unknown = next((o.outcome for _, outcomes in batch for o in outcomes if o.outcome not in OUTCOMES), None)
        if unknown is not None:
            raise ValueError(f"unknown history outcome {unknown!r}")
        added = 0
        with self._transaction():
            for run, outcomes in batch:
                cursor = self._db.execute(
                    f"INSERT OR IGNORE INTO runs ({', '.join(_RUN_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(_RUN_COLUMNS))})",
                    astuple(run),
                )
                if cursor.rowcount == 1:
                    added += 1
                    self._db.executemany(f"INSERT INTO outcomes (run_id, {_OUTCOME_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                                         [(cursor.lastrowid, *astuple(o)) for o in outcomes])
            self._db.executemany("INSERT OR IGNORE INTO segments (name) VALUES (?)", [(n,) for n in segments])
        return added

    def recorded_segments(self) -> set[str]:
        return {str(name) for (name,) in self._db.execute("SELECT name FROM segments")}

    def refused_segments(self) -> set[str]:
        """The segments a pull refused (never read again)."""
        return {str(name) for (name,) in self._db.execute("SELECT name FROM refused_segments")}

    def refuse_segments(self, refused: Iterable[tuple[str, str]]) -> None:
        self._db.executemany("INSERT OR IGNORE INTO refused_segments (name, reason) VALUES (?, ?)", list(refused))

    def runs(self, *, newest: Optional[int] = None) -> list[tuple[RunInfo, list[TestOutcome]]]:
        """Every run with its outcomes, oldest first; ``newest``: the newest N only, newest first."""
        order = "DESC" if newest is not None else "ASC"
        rows = self._db.execute(f"SELECT id, {', '.join(_RUN_COLUMNS)} FROM runs ORDER BY recorded_at {order}, "
                                f"id {order} LIMIT ?", (-1 if newest is None else newest,)).fetchall()
        return [(RunInfo(*row[1:]), self._outcomes_of(row[0])) for row in rows]

    def _outcomes_of(self, run_id: int) -> list[TestOutcome]:
        return [TestOutcome(*row) for row in self._db.execute(
            f"SELECT {_OUTCOME_COLUMNS} FROM outcomes WHERE run_id = ? ORDER BY rowid", (run_id,))]

    def sightings(self, fingerprints: Iterable[str], branch: str,
                  repository: Optional[str] = None) -> dict[str, Sighting]:
        """For each fingerprint that failed on ``branch`` (of ``repository`` when given: a
        fork's branch of the same name is another branch): first seen (commit, time) and how
        many runs."""
        wanted = list(dict.fromkeys(fingerprints))
        seen: dict[str, Sighting] = {}
        # One query per chunk of fingerprints (most are "never seen"), under SQLite's bound on
        # parameters; with one MIN() aggregate, SQLite takes the bare r.commit_sha from that row.
        for start in range(0, len(wanted), _SIGHTINGS_CHUNK):
            chunk = wanted[start:start + _SIGHTINGS_CHUNK]
            for fingerprint, first_seen, runs, commit in self._db.execute(
                f"""SELECT o.fingerprint, MIN(r.recorded_at), COUNT(DISTINCT r.id), r.commit_sha FROM outcomes o
                    JOIN runs r ON r.id = o.run_id
                    WHERE o.fingerprint IN ({', '.join('?' * len(chunk))}) AND r.branch = ? AND o.outcome IN (?, ?, ?)
                    {"AND r.repository = ?" if repository is not None else ""}
                    GROUP BY o.fingerprint""",
                (*chunk, branch, FAILED, PASSED_ON_RERUN, QUARANTINED, *([repository] if repository is not None else [])),
            ):
                if runs:
                    seen[str(fingerprint)] = Sighting(str(fingerprint), commit, str(first_seen), int(runs))
        return {fingerprint: seen[fingerprint] for fingerprint in wanted if fingerprint in seen}

    def flake_rates(self, since: str, nodeids: Optional[Iterable[str]] = None) -> list[FlakeRate]:
        """Tests that passed on re-run at least once since ``since`` (ISO time), ranked by
        flake rate, then flaky count, then node id; ``nodeids`` restricts the answer."""
        query = """SELECT o.nodeid, SUM(o.outcome = ?), COUNT(*), MAX(r.recorded_at)
                   FROM outcomes o JOIN runs r ON r.id = o.run_id
                   WHERE r.recorded_at >= ? AND o.outcome IN (?, ?, ?)"""
        params: list[object] = [PASSED_ON_RERUN, since, FAILED, PASSED_ON_RERUN, QUARANTINED]
        wanted = list(dict.fromkeys(nodeids)) if nodeids is not None else None
        if wanted is not None:
            if not wanted:
                return []
            query += f" AND o.nodeid IN ({', '.join('?' * len(wanted))})"
            params.extend(wanted)
        query += """ GROUP BY o.nodeid HAVING SUM(o.outcome = ?) > 0
                     ORDER BY SUM(o.outcome = ?) * 1.0 / COUNT(*) DESC, SUM(o.outcome = ?) DESC, o.nodeid"""
        params.extend([PASSED_ON_RERUN] * 3)
        return [FlakeRate(str(n), int(f), int(c), str(t)) for n, f, c, t in self._db.execute(query, params)]

    def history_of(self, *, nodeid: Optional[str] = None, fingerprint: Optional[str] = None,
                   limit: int = 200) -> list[tuple[RunInfo, TestOutcome]]:
        """The recorded outcomes of one test or one fingerprint, newest first."""
        column, value = ("nodeid", nodeid) if nodeid is not None else ("fingerprint", fingerprint)
        rows = self._db.execute(
            f"""SELECT {', '.join('r.' + c for c in _RUN_COLUMNS)}, {_OUTCOME_COLUMNS}
                FROM outcomes o JOIN runs r ON r.id = o.run_id WHERE o.{column} = ?
                ORDER BY r.recorded_at DESC, r.id DESC LIMIT ?""",
            (value, limit),
        ).fetchall()
        width = len(_RUN_COLUMNS)
        return [(RunInfo(*row[:width]), TestOutcome(*row[width:])) for row in rows]
