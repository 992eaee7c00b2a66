"""The default Spanish-English corpus: the Bible, verse-aligned, one document per chapter.

The text comes from the SWORD modules spaRV1909eb (Reina-Valera 1909) and
engKJV2006eb (King James Version) through the ``diatheke`` command-line tool.
Parsing is kept a pure function of diatheke's text (:func:`parse_dump`) so it
can be tested on hand-made dumps without diatheke installed.

Format of ``diatheke -f plain`` as observed: verse lines ``Book C:V: text``,
indented when they follow a heading; heading lines (KJV only) that diatheke
repeats before every later verse, which makes them useless except when a
single verse is queried on its own; and a final ``(ModuleName)`` line.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from ctxnmt.data.corpus import write_lines_atomic
from ctxnmt.errors import DataError
from ctxnmt.utils.io import atomic_write, check_not_a_file, file_sha256, make_directory
from ctxnmt.utils.messages import Log, to_stderr

SOURCE_MODULE = "spaRV1909eb"
TARGET_MODULE = "engKJV2006eb"
SOURCE_LANG = "es"
TARGET_LANG = "en"
WHOLE_BIBLE = "Gen 1:1-Rev 22:21"
PSALMS = "Psalms"
INSTALL_HINT = "install with: apt-get install diatheke sword-text-sparv sword-text-kjv"
SPLITS = ("train", "dev", "test")
# Bumped whenever the files or stats of build_bible change, so older builds are redone.
FORMAT_VERSION = 2

VerseKey = tuple[str, int, int]  # (book, chapter, verse)

# Book names are one to four words, optionally numbered ("I Samuel", "Song of Solomon",
# "Revelation of John"); being this strict keeps a continuation line that happens to
# contain "3:4:" from being read as a verse.
_VERSE_LINE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<book>(?:(?:[1-4]|I{1,3}|IV) )?[^\W\d_]+(?: [^\W\d_]+){0,3}) "
    r"(?P<chapter>\d+):(?P<verse>\d+):(?:[ \t](?P<text>.*))?$"
)
_MODULE_FOOTER = re.compile(r"^\([\w.-]+\)$")
_STRONGS_TAG = re.compile(r"\s*<[HG]\d+>")
_ANY_TAG = re.compile(r"<[^<>]*>")
_SPACES = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Remove Strong's numbers, other markup and pilcrows, and collapse whitespace."""
    text = _STRONGS_TAG.sub("", text)
    text = _ANY_TAG.sub(" ", text)
    text = text.replace("¶", " ")
    return _SPACES.sub(" ", text).strip()


def parse_dump(text: str, source: str = "diatheke output") -> dict[VerseKey, str]:
    """Turn a ``diatheke -f plain`` dump into cleaned verse texts, in canonical order.

    Heading lines (non-verse lines followed by an indented verse line) are
    dropped; any other non-verse line continues the verse before it. ``source``
    names the dump in error messages.
    """
    lines = [line.rstrip("\r") for line in text.split("\n")]
    _drop_footer(lines)
    pieces: dict[VerseKey, list[str]] = {}
    current: VerseKey | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        match = _VERSE_LINE.match(line)
        if match:
            current = (match["book"], int(match["chapter"]), int(match["verse"]))
            if current in pieces:
                raise DataError(f"{source}:{number}: {_format_key(current)} appears twice")
            pieces[current] = [match["text"] or ""]
        elif _is_heading(lines, number):
            continue
        elif current is None:
            raise DataError(f"{source}:{number}: text before the first verse: {line.strip()[:60]!r}")
        else:
            pieces[current].append(line)
    return {key: clean_text(" ".join(parts)) for key, parts in pieces.items()}


def _drop_footer(lines: list[str]) -> None:
    """Remove the ``(ModuleName)`` line diatheke prints after the last verse."""
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and _MODULE_FOOTER.match(lines[-1].strip()):
        lines.pop()


def _is_heading(lines: list[str], number: int) -> bool:
    """Whether line ``number`` (1-based) is a heading: the next non-empty line is an indented verse."""
    for index in range(number, len(lines)):  # indexing, not slicing: slices copy the list
        if lines[index].strip():
            match = _VERSE_LINE.match(lines[index])
            return bool(match and match["indent"])
    return False


def parse_heading(text: str) -> str | None:
    """Return the heading in front of the first verse of a one-verse dump, or None.

    Only a dump of a single verse gives a trustworthy heading; see the module docstring.
    """
    heading: list[str] = []
    for line in text.split("\n"):
        if _VERSE_LINE.match(line):
            title = clean_text(" ".join(heading))
            return title or None
        if line.strip():
            heading.append(line)
    return None


def add_psalm_titles(verses: dict[VerseKey, str], titles: dict[int, str]) -> int:
    """Prepend each Psalm's title to its first verse, in place; return how many were added."""
    added = 0
    for chapter, title in titles.items():
        key = (PSALMS, chapter, 1)
        if key in verses:
            verses[key] = f"{title} {verses[key]}".strip()
            added += 1
    return added


def align(src: dict[VerseKey, str], tgt: dict[VerseKey, str]) -> tuple[list[VerseKey], dict[str, int]]:
    """Keys present and non-empty on both sides, in source order, and counts of what was dropped."""
    dropped = {"missing_src": 0, "missing_tgt": 0, "empty_src": 0, "empty_tgt": 0}
    kept: list[VerseKey] = []
    for key, text in src.items():
        if key not in tgt:
            dropped["missing_tgt"] += 1
        elif not text:
            dropped["empty_src"] += 1
        elif not tgt[key]:
            dropped["empty_tgt"] += 1
        else:
            kept.append(key)
    dropped["missing_src"] = sum(1 for key in tgt if key not in src)
    return kept, dropped


def suspect_chapters(src: dict[VerseKey, str], tgt: dict[VerseKey, str]) -> list[tuple[str, int]]:
    """Chapters whose verses may be paired with the wrong translation.

    RV1909 is stored under KJV verse numbers although it divides some chapters
    differently: where it has an empty verse, verses near it are usually
    merged or shifted, and an empty last verse means the next chapter starts
    one or more verses early (RV Numbers 13:1 is KJV Numbers 12:16). These
    chapters are kept, since a fix needs a versification table, but listed.
    """
    last_verse: dict[tuple[str, int], int] = {}
    for book, chapter, verse in src:
        last_verse[book, chapter] = max(verse, last_verse.get((book, chapter), 0))
    suspects: dict[tuple[str, int], None] = {}
    for key, text in src.items():
        if text and tgt.get(key):
            continue
        chapter = key[:2]
        suspects[chapter] = None
        following = (key[0], key[1] + 1)
        if key[2] == last_verse[chapter] and following in last_verse:
            suspects[following] = None
    return list(suspects)


def chapter_indices(keys: Iterable[VerseKey]) -> dict[tuple[str, int], int]:
    """Number the chapters 0, 1, ... in the order they first appear (canonical order)."""
    indices: dict[tuple[str, int], int] = {}
    for book, chapter, _ in keys:
        indices.setdefault((book, chapter), len(indices))
    return indices


def split_of(chapter_index: int) -> str:
    """Which split a chapter belongs to: whole chapters go to one split, so documents stay intact."""
    remainder = chapter_index % 50
    if remainder == 7:
        return "dev"
    if remainder == 32:
        return "test"
    return "train"


def document_id(book: str, chapter: int) -> str:
    """A space-free document id such as ``I_Samuel.3``."""
    return f"{book.replace(' ', '_')}.{chapter}"


def _format_key(key: VerseKey) -> str:
    return f"{key[0]} {key[1]}:{key[2]}"


# --- building the corpus -------------------------------------------------------------


def build_bible(out_dir: str | os.PathLike, log: Log = to_stderr) -> dict:
    """Write ``{train,dev,test}.{es,en,doc}`` and ``stats.json`` under ``out_dir``; return the stats.

    Reuses an existing build when ``stats.json`` and every file it lists match,
    so running it twice costs nothing. The returned dict has ``reused`` set
    accordingly (that key is not stored in the file).
    """
    out_dir = os.fspath(out_dir)
    existing = _existing_build(out_dir)
    if existing is not None:
        log(f"reusing the Bible corpus already built in {out_dir}")
        return {**existing, "reused": True}
    check_not_a_file(out_dir)
    _check_diatheke()
    log(f"extracting {SOURCE_MODULE} and {TARGET_MODULE} with diatheke")
    src = parse_dump(_diatheke(SOURCE_MODULE, WHOLE_BIBLE), f"diatheke {SOURCE_MODULE}")
    tgt = parse_dump(_diatheke(TARGET_MODULE, WHOLE_BIBLE), f"diatheke {TARGET_MODULE}")
    titles = _psalm_titles(tgt)
    n_titles = add_psalm_titles(tgt, titles)
    keys, dropped = align(src, tgt)
    n_dropped = sum(dropped.values())
    log(f"aligned {len(keys)} verses; dropped {n_dropped} empty or missing on one side ({_describe(dropped)})")
    suspects = suspect_chapters(src, tgt)
    log(f"{len(suspects)} chapters may be misaligned by differing verse divisions (listed in stats.json)")
    splits = _split_keys(src, keys)
    make_directory(out_dir)
    files = _write_splits(out_dir, splits, src, tgt)
    stats = {
        "format": FORMAT_VERSION,
        "source_module": SOURCE_MODULE,
        "target_module": TARGET_MODULE,
        "split_rule": "chapter index % 50: 7 -> dev, 32 -> test, otherwise train",
        "verses_src": len(src),
        "verses_tgt": len(tgt),
        "chapters": len(chapter_indices(src)),
        "psalm_titles": n_titles,
        "aligned": len(keys),
        "dropped": sum(dropped.values()),
        "dropped_detail": dropped,
        "suspect_chapters": [document_id(book, chapter) for book, chapter in suspects],
        "splits": {name: {"lines": len(k), "documents": len(chapter_indices(k))} for name, k in splits.items()},
        "files": files,
    }
    with atomic_write(os.path.join(out_dir, "stats.json")) as handle:
        json.dump(stats, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    log(f"wrote the Bible corpus to {out_dir}")
    return {**stats, "reused": False}


def _describe(dropped: dict[str, int]) -> str:
    return ", ".join(f"{name.replace('_', ' ')}: {count}" for name, count in dropped.items() if count) or "none"


def _split_keys(src: dict[VerseKey, str], keys: list[VerseKey]) -> dict[str, list[VerseKey]]:
    # Chapters are numbered over the whole source dump, so a chapter losing
    # all its verses would not shift the split of the chapters after it.
    index = chapter_indices(src)
    splits: dict[str, list[VerseKey]] = {name: [] for name in SPLITS}
    for key in keys:
        splits[split_of(index[key[:2]])].append(key)
    return splits


def _write_splits(out_dir: str, splits, src, tgt) -> dict[str, dict]:
    files: dict[str, dict] = {}
    for name, keys in splits.items():
        columns = {
            SOURCE_LANG: [src[key] for key in keys],
            TARGET_LANG: [tgt[key] for key in keys],
            "doc": [document_id(key[0], key[1]) for key in keys],
        }
        for suffix, lines in columns.items():
            file_name = f"{name}.{suffix}"
            path = os.path.join(out_dir, file_name)
            write_lines_atomic(path, lines)
            files[file_name] = {"lines": len(lines), "sha256": file_sha256(path)}
    return files


def _existing_build(out_dir: str) -> dict | None:
    """The stored stats if ``out_dir`` holds a complete, unmodified build of this format, else None."""
    try:
        with open(os.path.join(out_dir, "stats.json"), encoding="utf-8") as handle:
            stats = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(stats, dict) or stats.get("format") != FORMAT_VERSION:
        return None
    if (stats.get("source_module"), stats.get("target_module")) != (SOURCE_MODULE, TARGET_MODULE):
        return None
    expected = {f"{split}.{suffix}" for split in SPLITS for suffix in (SOURCE_LANG, TARGET_LANG, "doc")}
    files = stats.get("files")
    if not isinstance(files, dict) or set(files) != expected:
        return None
    for file_name, info in files.items():
        path = os.path.join(out_dir, file_name)
        if not os.path.isfile(path) or not isinstance(info, dict) or file_sha256(path) != info.get("sha256"):
            return None
    return stats


# --- talking to diatheke -------------------------------------------------------------


def _check_diatheke() -> None:
    if shutil.which("diatheke") is None:
        raise DataError(f"diatheke is not installed (needed to build the Bible corpus); {INSTALL_HINT}")
    listing = _run(["diatheke", "-b", "system", "-k", "modulelist"])
    available = {line.split(" : ")[0].strip() for line in listing.splitlines() if " : " in line}
    missing = [name for name in (SOURCE_MODULE, TARGET_MODULE) if name not in available]
    if missing:
        raise DataError(f"SWORD module(s) {', '.join(missing)} not installed; {INSTALL_HINT}")


def _diatheke(module: str, key: str) -> str:
    text = _run(["diatheke", "-b", module, "-f", "plain", "-k", key])
    # diatheke exits 0 with no output for an unknown module.
    if not text.strip():
        raise DataError(f"diatheke printed nothing for {module} {key!r}; is the module installed? {INSTALL_HINT}")
    return text


def _run(command: list[str]) -> str:
    # Book names are localised by SWORD; a fixed locale keeps them English.
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        result = subprocess.run(command, capture_output=True, env=env, check=False)
    except OSError as err:
        raise DataError(f"cannot run {command[0]}: {err.strerror}; {INSTALL_HINT}") from None
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DataError(f"{' '.join(command)} failed with status {result.returncode}: {message[-1] if message else ''}")
    try:
        return result.stdout.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{' '.join(command)}: output is not valid UTF-8 at byte {err.start}") from None


def _psalm_titles(verses: dict[VerseKey, str]) -> dict[int, str]:
    """Query the first verse of every Psalm on its own and collect the headings found."""
    chapters = sorted({chapter for book, chapter, _ in verses if book == PSALMS})
    if not chapters:
        raise DataError(f"diatheke {TARGET_MODULE}: no book called {PSALMS!r} in the dump")
    # One diatheke process per Psalm (~0.1 s each, mostly start-up); run a few at once.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        dumps = pool.map(lambda chapter: _diatheke(TARGET_MODULE, f"{PSALMS} {chapter}:1"), chapters)
        titles = {chapter: parse_heading(dump) for chapter, dump in zip(chapters, dumps)}
    return {chapter: title for chapter, title in titles.items() if title}
