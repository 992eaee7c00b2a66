"""A blind pairwise ranking study stored in one SQLite file (WAL mode).

The sample of source lines is drawn once, at creation, so every judge sees the same
items; each item is one source line and one pair of systems, with the side each
output is shown on drawn per item.  Pairs whose two outputs are identical are stored
as such and never shown: they are reported separately.  An answer is committed as
soon as it is given, and (item, judge) is unique, so a killed server loses nothing
and no judge answers an item twice.

Tables
  meta      key → value: format, version, seed, n, has_ref, created
  systems   name, path, position (command-line order; a pair is (earlier, later))
  segments  id, line (1-based in the source file), src, ref
  items     id, segment, sys_a, sys_b, left_is_a, out_a, out_b, identical, position
  answers   id, item, judge, choice (left|equal|right), created; UNIQUE(item, judge)
"""
from __future__ import annotations

import contextlib
import itertools
import os
import random
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxnmt.errors import DataError
from ctxnmt.utils.io import check_writable

FORMAT = "ctxnmt-judge-study"
VERSION = "1"  # bump when the schema changes; older or newer studies are refused
CHOICES = ("left", "equal", "right")
MAX_JUDGE_NAME = 64
LOCK_WAIT_S = 30.0  # how long a request waits for another writer before its answer is refused (503)

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE systems (name TEXT PRIMARY KEY, path TEXT NOT NULL, position INTEGER NOT NULL);
CREATE TABLE segments (id INTEGER PRIMARY KEY, line INTEGER NOT NULL, src TEXT NOT NULL, ref TEXT);
CREATE TABLE items (
  id INTEGER PRIMARY KEY, segment INTEGER NOT NULL REFERENCES segments(id),
  sys_a TEXT NOT NULL REFERENCES systems(name), sys_b TEXT NOT NULL REFERENCES systems(name),
  left_is_a INTEGER NOT NULL, out_a TEXT NOT NULL, out_b TEXT NOT NULL,
  identical INTEGER NOT NULL, position INTEGER NOT NULL);
CREATE TABLE answers (
  id INTEGER PRIMARY KEY AUTOINCREMENT, item INTEGER NOT NULL REFERENCES items(id),
  judge TEXT NOT NULL, choice TEXT NOT NULL CHECK (choice IN ('left', 'equal', 'right')),
  created REAL NOT NULL, UNIQUE (item, judge));
"""


@dataclass(frozen=True)
class System:
    name: str
    path: str
    lines: list[str]


# -- creation --------------------------------------------------------------------------------

def parse_system(spec: str) -> tuple[str, str]:
    """NAME=FILE, as given to --system."""
    name, sep, path = spec.partition("=")
    if not sep or not name.strip() or not path:
        raise DataError(f"--system {spec!r}: expected NAME=FILE")
    return name.strip(), path


def check_inputs(src: list[str], ref: list[str] | None, systems: list[System], src_path: str,
                 ref_path: str | None) -> None:
    if len(systems) < 2:
        raise DataError("a study needs at least two --system NAME=FILE")
    names = [s.name for s in systems]
    for name in names:
        if names.count(name) > 1:
            raise DataError(f"--system name {name!r} is given twice")
    if ref is not None and len(ref) != len(src):
        raise DataError(f"{ref_path} has {len(ref)} lines but {src_path} has {len(src)}")
    for s in systems:
        if len(s.lines) != len(src):
            raise DataError(f"{s.path} (system {s.name}) has {len(s.lines)} lines but {src_path} has {len(src)}")


def sample_lines(src: list[str], n: int, seed: int) -> list[int]:
    """n distinct 0-based indices of non-empty source lines, in file order."""
    candidates = [i for i, line in enumerate(src) if line.strip()]
    if n < 1:
        raise DataError(f"--n must be at least 1, not {n}")
    if n > len(candidates):
        raise DataError(f"--n {n} is more than the {len(candidates)} non-empty source lines")
    return sorted(random.Random(seed).sample(candidates, n))


def create_study(path: str | os.PathLike, src: list[str], ref: list[str] | None, systems: list[System],
                 n: int, seed: int, src_path: str = "source", ref_path: str | None = None) -> dict:
    """Write a new study file (refusing to overwrite one); returns counts of what it holds.

    The file is built under a temporary name and renamed when complete, so a failure
    leaves nothing behind."""
    path = Path(path)
    if path.exists():
        raise DataError(f"{path}: already exists (a study is never overwritten; remove it or pick another name)")
    check_writable(path)
    check_inputs(src, ref, systems, src_path, ref_path)
    chosen = sample_lines(src, n, seed)
    rng = random.Random(f"{seed}-sides")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as db:
            db.executescript(SCHEMA)
            meta = {"format": FORMAT, "version": VERSION, "seed": str(seed), "n": str(n),
                    "has_ref": "1" if ref is not None else "0", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                           time.gmtime())}
            db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
            db.executemany("INSERT INTO systems VALUES (?, ?, ?)",
                           [(s.name, s.path, k) for k, s in enumerate(systems)])
            items = []
            for seg_id, line in enumerate(chosen, 1):
                db.execute("INSERT INTO segments VALUES (?, ?, ?, ?)",
                           (seg_id, line + 1, src[line], ref[line] if ref is not None else None))
                for a, b in itertools.combinations(systems, 2):
                    out_a, out_b = a.lines[line], b.lines[line]
                    items.append((seg_id, a.name, b.name, rng.random() < 0.5, out_a, out_b, out_a == out_b))
            order = list(range(len(items)))
            rng.shuffle(order)  # pairs and segments interleaved, the same order for every judge
            db.executemany("INSERT INTO items (segment, sys_a, sys_b, left_is_a, out_a, out_b, identical, position) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [items[k] + (pos,) for pos, k in enumerate(order)])
            db.commit()
            db.execute("PRAGMA journal_mode=WAL")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    identical = sum(1 for it in items if it[-1])
    return {"segments": len(chosen), "items": len(items), "identical": identical,
            "pairs": len(systems) * (len(systems) - 1) // 2}


# -- opening ---------------------------------------------------------------------------------

@contextlib.contextmanager
def open_study(path: str | os.PathLike) -> Iterator[sqlite3.Connection]:
    """A connection to an existing study of this version; a one-line DataError otherwise."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such study file")
    db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=LOCK_WAIT_S)
    try:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            rows = meta(db)
        except sqlite3.DatabaseError:
            raise DataError(f"{path}: not a ctxnmt judge study (not an SQLite file with a meta table)") from None
        if rows.get("format") != FORMAT:
            raise DataError(f"{path}: not a ctxnmt judge study (meta format is {rows.get('format')!r})")
        if rows.get("version") != VERSION:
            raise DataError(f"{path}: study version {rows.get('version')} but this ctxnmt reads version {VERSION}; "
                            "use the ctxnmt that created it")
        db.execute("PRAGMA foreign_keys=ON")
        yield db
    finally:
        db.close()


def meta(db: sqlite3.Connection) -> dict[str, str]:
    return dict(db.execute("SELECT key, value FROM meta").fetchall())


# -- judging ---------------------------------------------------------------------------------

def check_judge(judge: str) -> str:
    judge = (judge or "").strip()
    if not judge:
        raise DataError("the judge name is empty")
    if len(judge) > MAX_JUDGE_NAME:
        raise DataError(f"the judge name is longer than {MAX_JUDGE_NAME} characters")
    return judge


def progress(db: sqlite3.Connection, judge: str) -> tuple[int, int]:
    """(answered, total) of the items shown to judges (identical pairs are not shown)."""
    total = db.execute("SELECT COUNT(*) FROM items WHERE identical = 0").fetchone()[0]
    done = db.execute("SELECT COUNT(*) FROM answers WHERE judge = ?", (judge,)).fetchone()[0]
    return done, total


def next_item(db: sqlite3.Connection, judge: str) -> dict | None:
    """The first item (in study order) this judge has not answered, as shown: no system names."""
    row = db.execute(
        "SELECT i.id, s.src, s.ref, i.left_is_a, i.out_a, i.out_b FROM items i JOIN segments s ON s.id = i.segment "
        "WHERE i.identical = 0 AND i.id NOT IN (SELECT item FROM answers WHERE judge = ?) "
        "ORDER BY i.position LIMIT 1", (judge,)).fetchone()
    if row is None:
        return None
    item, src, ref, left_is_a, out_a, out_b = row
    left, right = (out_a, out_b) if left_is_a else (out_b, out_a)
    return {"item": item, "src": src, "ref": ref, "left": left, "right": right}


def record_answer(db: sqlite3.Connection, judge: str, item: int, choice: str) -> None:
    """Commit one answer; DataError for an unknown item or choice, or one already answered."""
    judge = check_judge(judge)
    if choice not in CHOICES:
        raise DataError(f"choice must be one of {', '.join(CHOICES)}, not {choice!r}")
    found = db.execute("SELECT identical FROM items WHERE id = ?", (item,)).fetchone()
    if found is None or found[0]:
        raise DataError(f"no item {item} to judge in this study")
    try:
        with db:
            db.execute("INSERT INTO answers (item, judge, choice, created) VALUES (?, ?, ?, ?)",
                       (item, judge, choice, time.time()))
    except sqlite3.IntegrityError:
        raise AlreadyAnswered(f"judge {judge!r} has already answered item {item}") from None


def undo_last(db: sqlite3.Connection, judge: str) -> int | None:
    """Remove this judge's latest answer; the item it was for, or None if there was none."""
    judge = check_judge(judge)
    with db:
        row = db.execute("SELECT id, item FROM answers WHERE judge = ? ORDER BY id DESC LIMIT 1",
                         (judge,)).fetchone()
        if row is None:
            return None
        db.execute("DELETE FROM answers WHERE id = ?", (row[0],))
    return row[1]


class AlreadyAnswered(DataError):
    """The same judge answering the same item a second time."""
