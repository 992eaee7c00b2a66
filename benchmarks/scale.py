"""The data path at scale (issue 52): prepare, train and batch building on a corpus of millions of pairs.

    python benchmarks/scale.py --pairs 5.85M [--steps prepare,train1,train2,batches] [--compare-bible]
        [--bpe-merges 30000] [--workers N | --prepare-args "…"] [--json out.json] [--keep]
    python benchmarks/scale.py --pairs 60k --steps prepare,train1,batches     # a small try

The corpus is the Bible's training pairs repeated until --pairs, every line varied so that
no line of a side comes back exactly (nothing can be memoised by sentence): each side
independently swaps two neighbouring words and/or drops a word, at positions that a
seeded bijection picks (`LineVariants`), each occurrence of a line taking that line's next
variant (the Bible's own repeated lines share one sequence) and skipping any variant that
another line already wrote (`SeenLines`: 64-bit digests, 8 bytes a slot, freed when the
corpus is written).  When a line's one-word variants are used up, two and then three words
are dropped; past that a line repeats, and the stamp and the report count such lines.
None repeats in the first two repetitions; at 5.85M pairs an estimated 0.9% of the Spanish
and 0.6% of the English lines do, all from about 400 short formulaic verses ("And the
LORD spake unto Moses, saying," is 67 of the Bible's lines, with 293 variants).  Each repetition's chapters are
new documents (id `Genesis.1#3`), so a document-context model still reads real
consecutive documents.  Dev is the Bible's dev split as it is.  The corpus is written
streaming into --workdir (default /tmp/ctxnmt-scale/PAIRS; about 3 minutes for 5.85M
pairs), and not written again while its stamp (pairs, seed, generator version, the Bible
files' sizes) matches: --keep keeps it for the next run.

The config is --config (configs/rnnsearch-small.yaml) with data.corpus files pointed at
the workdir and data.bpe_merges --bpe-merges, its model_dir in the workdir.  Each step
runs in its own child process and is measured from outside:
  - prepare: `ctxnmt prepare CONFIG` into an emptied model_dir;
  - train1 / train2: `ctxnmt train CONFIG` with 1 rank / `--nproc 2`, --updates updates,
    a log line each, and one dev validation (perplexity; --valid-bleu adds beam search) on
    the first --valid-sents dev pairs at the last update;
  - batches: in one Python process on one thread, load the prepared training data, plan
    one epoch (`epoch_batches`) and build its first --batches batches (`make_batch`):
    batches/s and target tokens/s, and the ratio to --target-rate (100,000 target tokens/s,
    what the GPU recipe consumes on an H200);
  - bible (--compare-bible): prepare and train1 on the plain Bible with the same config
    and data settings, so that "train peak RSS at most 1.5 GB above the same model's on
    the Bible" reads off one run.
For each child: wall time; the peak resident memory of every process of its tree (VmRSS
polled every --interval s through /proc/PID/task/*/children, with the kernel's VmHWM),
the largest over the ranks, the peak of their sum, and the peak of their PSS sum (pages
shared between processes, as a memory-mapped corpus is between ranks, counted once); the
bytes of MODEL_DIR/prep; for training, the seconds from the start to the first `update 1:`
log line on stderr, and to the validation's line.

The batch-building step is written against the memory-mapped data path (a prepared
`train` with `src_lens`/`tgt_lens`, `make_batch(train, indices)`) and falls back to the
older forms (`train.src` as id lists or a `Side`, `make_batch(indices, src, tgt)`).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIBLE = ROOT / "data" / "bible"
GENERATOR_VERSION = 1
STAMP = "scale-corpus.json"
STEPS = ("prepare", "train1", "train2", "batches", "bible")
MIB = 1024 * 1024


# -- sizes ---------------------------------------------------------------------------------------
def parse_count(text: str) -> int:
    """'5850000', '5,850,000', '1.2M', '300k', '2G' → a count of pairs."""
    match = re.fullmatch(r"\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*", str(text))
    if not match:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 5850000, 1.2M, 300k)")
    number, suffix = float(match.group(1).replace(",", "").replace("_", "")), match.group(2).lower()
    value = round(number * {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9}[suffix])
    if value < 1:
        raise argparse.ArgumentTypeError(f"a count must be at least 1: {text!r}")
    return value


def short_count(n: int) -> str:
    """5850000 → '5.85M', 60000 → '60k' (the default workdir's name); as parse_count reads it back."""
    for size, suffix in ((10 ** 9, "G"), (10 ** 6, "M"), (10 ** 3, "k")):
        text = f"{n / size:g}{suffix}"
        if n >= size and "e" not in text and parse_count(text) == n:
            return text
    return str(n)


# -- the corpus ------------------------------------------------------------------------------------
def _mix(*parts) -> int:
    """A 64-bit number from `parts`, the same in every process (unlike hash())."""
    digest = hashlib.blake2b("\0".join(map(str, parts)).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def unrank_combination(index: int, n: int, k: int) -> list[int]:
    """The `index`-th k-subset of range(n) in lexicographic order."""
    out, x = [], 0
    for remaining in range(k, 0, -1):
        while True:
            count = math.comb(n - x - 1, remaining - 1)
            if index < count:
                out.append(x)
                x += 1
                break
            index -= count
            x += 1
    return out


class LineVariants:
    """The variants of one line of text, numbered 0, 1, 2, …: variant j of a line is a different
    string from variant j' ≠ j until the line's variants run out (`size`), except where the line
    has two equal neighbouring words.  They come in bands, each used up before the next:
      1. swap two neighbouring words, or drop one word and perhaps swap two of the rest (n² − 1);
      2. drop two words, perhaps swap two of the rest;  3. drop three, likewise;
    never dropping every word.  Within a band the order is an affine bijection j → a·j + b
    (mod the band's size) with a and b drawn from (seed, side, text), so the positions look
    random but never repeat.  A line of one word has no variant but itself."""

    def __init__(self, text: str, seed: int, side: str):
        self.text, self.words = text, text.split()
        n = len(self.words)
        bands = [n * n - 1 if n >= 2 else 0] + [math.comb(n, k) * (n - k) if n - k >= 1 else 0 for k in (2, 3)]
        self.bands = [(k, size) for k, size in zip((1, 2, 3), bands) if size > 0]
        self.size = sum(size for _, size in self.bands)
        self.used = 0  # variants taken (corpus_lines)
        self.affine = []
        for k, size in self.bands:
            h = _mix(seed, side, k, text)
            a, b = 1 + (h >> 32) % size, h % size
            while math.gcd(a, size) != 1:
                a += 1
            self.affine.append((a, b))

    def variant(self, j: int) -> str:
        """Variant number `j` (j ≥ size wraps around: the line repeats)."""
        if not self.size:
            return self.text
        j %= self.size
        for (k, size), (a, b) in zip(self.bands, self.affine):
            if j < size:
                return " ".join(self._apply(k, (a * j + b) % size))
            j -= size
        raise AssertionError("unreachable")

    def _apply(self, k: int, index: int) -> list[str]:
        words, n = self.words, len(self.words)
        if k == 1 and index < n - 1:  # a swap alone
            return swap(list(words), index)
        if k == 1:
            index -= n - 1
        rest = n - k  # words left; `choice` 0: no swap, else swap rest's choice-1 and choice
        combination, choice = divmod(index, rest)
        drop = {combination} if k == 1 else set(unrank_combination(combination, n, k))
        kept = [w for i, w in enumerate(words) if i not in drop]
        return swap(kept, choice - 1) if choice else kept


def swap(words: list[str], i: int) -> list[str]:
    words[i], words[i + 1] = words[i + 1], words[i]
    return words


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh]


class SeenLines:
    """A set of lines as 64-bit digests in one open-addressed numpy table (8 bytes a slot, at most
    40% full): millions of lines checked for repeats without holding them."""

    def __init__(self, capacity: int):
        import numpy as np

        self.keys = np.zeros(1 << max(10, math.ceil(capacity * 2.5).bit_length()), dtype=np.uint64)
        self.mask = len(self.keys) - 1

    def add(self, text: str) -> bool:
        """Add `text`; False where it was there already."""
        key = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") or 1
        keys, i = self.keys, key & self.mask
        while True:
            held = int(keys[i])
            if held == 0:
                keys[i] = key
                return True
            if held == key:
                return False
            i = (i + 1) & self.mask


def corpus_lines(bible: Path, pairs: int, seed: int, src: str = "es", tgt: str = "en", stats: dict | None = None):
    """(source, target, document id) of the synthetic corpus, one pair at a time: the Bible's training
    pairs over and over, repetition r's document ids suffixed `#r`.  On each side, every occurrence
    of a line takes that line's next variant (LineVariants; the Bible's own repeated lines share
    one sequence), skipping any variant already written from another line, so no line of a side
    repeats until a line's variants run out.  `stats` counts the lines written again because their
    variants ran out (`repeated`) and the variants skipped (`skipped`), per side."""
    docs = read_lines(bible / "train.doc")
    plan, seen = {}, {}  # side: each line's variants (one object per distinct text); the lines written
    for side, lang in (("src", src), ("tgt", tgt)):
        lines, variants = read_lines(bible / f"train.{lang}"), {}
        if len(lines) != len(docs) or not docs:
            raise SystemExit(f"{bible}: train.{src}, train.{tgt} and train.doc differ in length or are empty")
        for line in lines:
            if line not in variants:
                variants[line] = LineVariants(line, seed, side)
        plan[side] = [variants[line] for line in lines]
        seen[side] = SeenLines(pairs)
    counts = {"repeated": {"src": 0, "tgt": 0}, "skipped": {"src": 0, "tgt": 0}}
    if stats is not None:
        stats.update(counts)
        counts = stats
    n, i = len(docs), 0
    for r in range(math.ceil(pairs / n)):
        for line in range(min(n, pairs - i)):
            out = []
            for side in ("src", "tgt"):
                variants = plan[side][line]
                while True:
                    last = variants.used >= variants.size  # none left but repeats (wrapping around)
                    text = variants.variant(variants.used)
                    variants.used += 1
                    if seen[side].add(text):
                        break
                    if last:
                        counts["repeated"][side] += 1
                        break
                    counts["skipped"][side] += 1
                out.append(text)
            yield out[0], out[1], f"{docs[line]}#{r}"
            i += 1


def corpus_stamp(bible: Path, pairs: int, seed: int, src: str, tgt: str) -> dict:
    return {"pairs": pairs, "seed": seed, "generator": GENERATOR_VERSION,
            "base": {name: (bible / name).stat().st_size for name in (f"train.{src}", f"train.{tgt}", "train.doc")}}


def build_corpus(workdir: Path, pairs: int, seed: int, bible: Path = BIBLE, src: str = "es", tgt: str = "en",
                 log=print) -> dict:
    """Write train.{src,tgt,doc} (streaming) and dev.* (the Bible's) into `workdir`, unless its stamp
    says they are there already; the stamp's record (with `seconds` and `bytes`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stamp_path = workdir / STAMP
    wanted = corpus_stamp(bible, pairs, seed, src, tgt)
    names = [f"train.{src}", f"train.{tgt}", "train.doc", f"dev.{src}", f"dev.{tgt}", "dev.doc"]
    if stamp_path.is_file() and all((workdir / name).is_file() for name in names):
        try:
            stamp = json.loads(stamp_path.read_text())
        except ValueError:
            stamp = {}
        if {k: stamp.get(k) for k in wanted} == wanted:
            log(f"corpus: {pairs} pairs already in {workdir} (stamp matches); not generated again")
            return {**stamp, "reused": True}
    stamp_path.unlink(missing_ok=True)
    start, stats = time.perf_counter(), {}
    tmp = {name: workdir / f"{name}.tmp" for name in names[:3]}
    files = [open(tmp[name], "w", encoding="utf-8", buffering=1 << 20) for name in names[:3]]
    try:
        for s, t, d in corpus_lines(bible, pairs, seed, src, tgt, stats):
            files[0].write(s + "\n")
            files[1].write(t + "\n")
            files[2].write(d + "\n")
    finally:
        for fh in files:
            fh.close()
    for name in names[:3]:
        tmp[name].replace(workdir / name)
    for name in names[3:]:
        shutil.copyfile(bible / name, workdir / name)
    record = {**wanted, "seconds": round(time.perf_counter() - start, 1), "repeated_lines": stats["repeated"],
              "skipped_variants": stats["skipped"],
              "bytes": sum((workdir / name).stat().st_size for name in names[:3])}
    stamp_path.write_text(json.dumps(record, indent=1))
    log(f"corpus: wrote {pairs} pairs ({record['bytes'] / MIB:.0f} MiB) into {workdir} in {record['seconds']} s")
    return {**record, "reused": False}


# -- configs ------------------------------------------------------------------------------------------
def write_config(path: Path, base: Path, model_dir: Path, data: dict) -> Path:
    import yaml

    cfg = yaml.safe_load(base.read_text())
    cfg["name"] = f"{cfg.get('name', base.stem)}-{path.stem}"
    cfg["model_dir"] = str(model_dir)
    cfg.setdefault("data", {}).update(data)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def train_overrides(args) -> list[str]:
    """Stop after --updates updates, with a log line each and one dev validation at the last."""
    return [f"training.max_updates={args.updates}", "training.max_minutes=0", "training.max_epochs=0",
            f"training.valid_every={args.updates}", f"training.valid_max_sents={args.valid_sents}",
            f"training.valid_bleu={'true' if args.valid_bleu else 'false'}", "training.log_every=1",
            "training.checkpoint_every=0"]


def reset_model_dir(model_dir: Path, keep_prep: bool = True) -> None:
    """Empty the model directory (but for prep/): a fresh start is refused where a training is."""
    if not model_dir.is_dir():
        return
    for entry in model_dir.iterdir():
        if keep_prep and entry.name == "prep":
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


# -- measuring a child process tree --------------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def process_tree(root: int) -> list[int]:
    """`root` and its descendants, through /proc/PID/task/*/children."""
    pids, queue = [], [root]
    while queue:
        pid = queue.pop()
        pids.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            children = _read(f"/proc/{pid}/task/{task}/children")
            queue += [int(c) for c in (children or "").split()]
    return pids


def memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of `pid` in KiB; None where it is gone (or a zombie)."""
    status = _read(f"/proc/{pid}/status")
    if status is None:
        return None
    values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
    if "VmRSS" not in values:
        return None
    return int(values["VmRSS"]), int(values.get("VmHWM", values["VmRSS"]))


def pss_kib(pid: int) -> int:
    """The proportional set size of `pid` (shared pages divided among their sharers), 0 where gone."""
    rollup = _read(f"/proc/{pid}/smaps_rollup") or ""
    match = re.search(r"^Pss:\s+(\d+) kB", rollup, re.M)
    return int(match.group(1)) if match else 0


def process_label(pid: int, root: int) -> str:
    """'rank N' (a training rank), 'main' (the child started), 'worker' (a fork of a process of the
    tree, e.g. prepare's), or the program's name."""
    environ = _read(f"/proc/{pid}/environ") or ""
    rank = re.search(r"(?:^|\0)RANK=(\d+)(?:\0|$)", environ)
    if rank:
        return f"rank {rank.group(1)}"
    if pid == root:
        return "main"
    cmdline = _read(f"/proc/{pid}/cmdline") or ""
    parent = re.search(r"^PPid:\s+(\d+)", _read(f"/proc/{pid}/status") or "", re.M)
    if parent and cmdline and cmdline == _read(f"/proc/{parent.group(1)}/cmdline"):
        return "worker"
    argv = cmdline.split("\0")
    return Path(argv[0]).name if argv and argv[0] else f"pid {pid}"


class TreeMonitor(threading.Thread):
    """Polls the resident memory of a process tree until stopped."""

    def __init__(self, root: int, interval: float = 0.1):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.procs: dict[int, dict] = {}
        self.peak_sum_kib = self.peak_pss_sum_kib = self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)
        self.sample()

    def sample(self) -> None:
        total = pss = 0
        for pid in process_tree(self.root):
            memory = memory_kib(pid)
            if memory is None:
                continue
            rss, hwm = memory
            total += rss
            pss += pss_kib(pid)
            proc = self.procs.setdefault(pid, {"pid": pid, "label": "", "peak_rss_kib": 0, "hwm_kib": 0})
            label = process_label(pid, self.root)  # a forked child may exec after it is first seen
            if not proc["label"] or not (label.startswith("pid ") or proc["label"].startswith("rank ")):
                proc["label"] = label  # but an exiting process reads as nameless: keep what it was
            proc["peak_rss_kib"] = max(proc["peak_rss_kib"], rss)
            proc["hwm_kib"] = max(proc["hwm_kib"], hwm)
        self.peak_sum_kib = max(self.peak_sum_kib, total)
        self.peak_pss_sum_kib = max(self.peak_pss_sum_kib, pss)
        self.samples += 1

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def result(self) -> dict:
        procs = [{"pid": p["pid"], "label": p["label"], "peak_mib": max(p["peak_rss_kib"], p["hwm_kib"]) / 1024,
                  "polled_peak_mib": p["peak_rss_kib"] / 1024} for p in self.procs.values()]
        ranks = [p for p in procs if p["label"].startswith("rank ")]
        for p in procs:
            if p["pid"] == self.root and ranks and p["label"] == "main":
                p["label"] = "launcher"
        ranks = ranks or [p for p in procs if p["pid"] == self.root]
        procs.sort(key=lambda p: (p["pid"] != self.root, p["label"], p["pid"]))
        return {"processes": procs, "peak_rank_mib": max((p["peak_mib"] for p in ranks), default=0.0),
                "peak_sum_mib": self.peak_sum_kib / 1024, "peak_pss_sum_mib": self.peak_pss_sum_kib / 1024,
                "samples": self.samples}


def run_measured(cmd: list[str], log_path: Path, cwd: Path, interval: float, marks: dict[str, str] | None = None,
                 echo: bool = True) -> dict:
    """Run `cmd` and measure its process tree; stderr is kept in `log_path` (and echoed to ours),
    and for each of `marks` (name: text), the seconds from the start to the text's first
    appearance in it are recorded under the name (None where it never appears)."""
    marks = marks or {}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    monitor = TreeMonitor(proc.pid, interval)
    monitor.start()
    seen: dict[str, float] = {}
    out_chunks: list[bytes] = []

    def read_stderr() -> None:
        tail = ""
        with open(log_path, "wb") as log:
            for chunk in iter(lambda: os.read(proc.stderr.fileno(), 1 << 16), b""):
                now = time.perf_counter() - start
                log.write(chunk)
                log.flush()
                if echo:
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.flush()
                text = tail + chunk.decode("utf-8", "replace")
                for name, mark in marks.items():
                    if name not in seen and mark in text:
                        seen[name] = now
                tail = text[-200:]

    def read_stdout() -> None:
        for chunk in iter(lambda: os.read(proc.stdout.fileno(), 1 << 16), b""):
            out_chunks.append(chunk)

    readers = [threading.Thread(target=read_stderr, daemon=True), threading.Thread(target=read_stdout, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        returncode = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    wall = time.perf_counter() - start
    monitor.stop()
    for reader in readers:
        reader.join()
    stdout = b"".join(out_chunks).decode("utf-8", "replace")
    return {"command": shlex.join(cmd), "returncode": returncode, "wall_s": wall,
            **{name: seen.get(name) for name in marks}, "stdout": stdout, "log": str(log_path), **monitor.result()}


# -- the steps ------------------------------------------------------------------------------------------
def ctxnmt(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxnmt", *args]


def with_sets(cmd: list[str], settings: list[str]) -> list[str]:
    return cmd + [a for s in settings for a in ("--set", s)]


def step_prepare(config: Path, model_dir: Path, args, logs: Path, name: str = "prepare") -> dict:
    reset_model_dir(model_dir, keep_prep=False)
    cmd = with_sets(ctxnmt("prepare", str(config)), args.overrides) + args.prepare_args
    result = run_measured(cmd, logs / f"{name}.stderr", model_dir.parent, args.interval)
    result["prep_bytes"] = tree_bytes(model_dir / "prep")
    match = re.search(r"prepared (\d+) training and (\d+) dev pairs.*vocabulary (\d+) source / (\d+) target",
                      result["stdout"])
    if match:
        result.update(zip(("train_pairs", "dev_pairs", "src_vocab", "tgt_vocab"), map(int, match.groups())))
    dropped = re.search(r"dropped (\d+) training pairs longer", Path(result["log"]).read_text(errors="replace"))
    if dropped:
        result["dropped_long"] = int(dropped.group(1))
    return result


def step_train(config: Path, model_dir: Path, args, logs: Path, nproc: int, name: str) -> dict:
    reset_model_dir(model_dir)
    cmd = with_sets(ctxnmt("train", str(config)), args.overrides + train_overrides(args))
    if nproc != 1:
        cmd += ["--nproc", str(nproc)]
    marks = {"first_update_s": "update 1:", "validation_s": "validation at update"}
    result = run_measured(cmd, logs / f"{name}.stderr", model_dir.parent, args.interval, marks)
    result["nproc"] = nproc
    result["prep_bytes"] = tree_bytes(model_dir / "prep")
    done = model_dir / "done.json"
    if done.is_file():
        record = json.loads(done.read_text())
        result.update(updates=record.get("update"), target_tokens_per_s=record.get("target_tokens_per_s"),
                      stopped=record.get("stopped"), best_scores=record.get("best_scores"))
    return result


def step_batches(config: Path, model_dir: Path, args, logs: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one-batches", str(config), "--batches", str(args.batches),
           "--target-rate", str(args.target_rate)] + [a for s in args.overrides for a in ("--set", s)]
    result = run_measured(cmd, logs / "batches.stderr", model_dir.parent, args.interval)
    line = next((x for x in result["stdout"].splitlines() if x.startswith("RESULT ")), None)
    if line:
        result.update(json.loads(line[7:]))
    return result


def measure_batches(config_path: str, overrides: list[str], count: int, target_rate: float) -> dict:
    """In this process, on one thread: load the prepared training data, plan epoch 1's batches and
    build the first `count` of them, with whichever data-path API this checkout has."""
    import inspect
    import resource

    import torch

    torch.set_num_threads(1)
    from ctxnmt.config import load_config
    from ctxnmt.data import batching
    from ctxnmt.data.prepare import load_prepared

    def rss_mib() -> float:
        return (memory_kib(os.getpid()) or (0, 0))[0] / 1024

    cfg = load_config(config_path, overrides)
    t = cfg.training
    start = time.perf_counter()
    prepared = load_prepared(Path(cfg.model_dir) / "prep")
    load_s = time.perf_counter() - start
    rss_loaded = rss_mib()
    train = prepared.train
    start = time.perf_counter()
    if hasattr(train, "src_lens"):  # the memory-mapped data path (TokenArrays)
        api, src_lens, tgt_lens = "TokenArrays", train.src_lens, train.tgt_lens
    elif hasattr(train.src, "lens"):  # Split of Side arrays
        api, src_lens, tgt_lens = "Split of Side", train.src.lens, train.tgt.lens
    else:  # Split of id lists
        api, src_lens, tgt_lens = "Split of lists", [len(s) for s in train.src], [len(s) for s in train.tgt]
    lengths_s = time.perf_counter() - start
    first = next(iter(inspect.signature(batching.make_batch).parameters))
    if first == "indices":  # make_batch(indices, src, tgt, context, k)
        api += ", make_batch(indices, src, tgt)"
        build = lambda index: batching.make_batch(index, train.src, train.tgt)  # noqa: E731
    else:  # make_batch(data, indices, context, k)
        api += ", make_batch(train, indices)"
        build = lambda index: batching.make_batch(train, index)  # noqa: E731
    start = time.perf_counter()
    batches = batching.epoch_batches(src_lens, tgt_lens, t.batch_tokens, t.batch_sents, t.seed, 0)
    plan_s = time.perf_counter() - start
    n_batches = len(batches)
    epoch_tokens = int(sum(int(x) for x in tgt_lens)) if isinstance(tgt_lens, list) else int(tgt_lens.sum())
    count = min(count, n_batches)
    tokens = sents = 0
    start = time.perf_counter()
    for i in range(count):
        batch = build(batches[i])
        tokens += int(batch.tgt_mask.sum())
        sents += int(batch.tgt_mask.shape[0])
    build_s = time.perf_counter() - start
    batches_per_s = count / build_s if build_s else float("inf")
    tok_per_s = tokens / build_s if build_s else float("inf")
    epoch_s = plan_s + n_batches / batches_per_s  # the plan, and every batch built at this rate
    sustained = epoch_tokens / epoch_s if epoch_s else float("inf")
    return {"api": api, "threads": torch.get_num_threads(), "train_sentences": len(tgt_lens),
            "load_s": load_s, "rss_after_load_mib": rss_loaded, "lengths_s": lengths_s,
            "epoch_batches_s": plan_s, "epoch_batches": n_batches, "epoch_target_tokens": epoch_tokens,
            "built_batches": count, "built_sentences": sents, "built_target_tokens": tokens, "build_s": build_s,
            "batches_per_s": batches_per_s, "target_tok_per_s": tok_per_s, "epoch_builder_s": epoch_s,
            "sustained_target_tok_per_s": sustained, "target_rate": target_rate,
            "ratio_to_target": tok_per_s / target_rate, "sustained_ratio_to_target": sustained / target_rate,
            "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# -- the machine and the report -------------------------------------------------------------------------
def machine() -> dict:
    cpuinfo = _read("/proc/cpuinfo") or ""
    meminfo = _read("/proc/meminfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    total = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    info = {"cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "memory_gib": round(int(total.group(1)) / 1024 ** 2, 1) if total else None,
            "cpu": model.group(1).strip() if model else platform.processor(), "load_average": os.getloadavg(),
            "python": platform.python_version(), "host": platform.node()}
    if shutil.which("nvidia-smi"):
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True)
        info["gpus"] = [g.strip() for g in gpus.stdout.splitlines() if g.strip()]
    return info


def commit(cwd: Path) -> dict:
    """This checkout's commit, its changed files, and the ctxnmt package the steps import (a
    PYTHONPATH can put another checkout's first)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line.strip()]
    package = subprocess.run([sys.executable, "-c", "import ctxnmt; print(ctxnmt.__file__)"], cwd=cwd,
                             capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "short": git("rev-parse", "--short", "HEAD"), "changed": changed,
            "package": str(Path(package).parent) if package else "?", "pythonpath": os.environ.get("PYTHONPATH", "")}


def mib(value) -> str:
    return "–" if value is None else f"{value:,.0f}"


def seconds(value) -> str:
    return "–" if value is None else f"{value:,.1f}"


def process_summary(procs: list[dict]) -> str:
    """'main 453, worker ×6 ≤ 331': each process's peak, those of one label after the first together."""
    groups: dict[str, list[float]] = {}
    for p in procs:
        groups.setdefault(p["label"], []).append(p["peak_mib"])
    return ", ".join(f"{label} {peaks[0]:,.0f}" if len(peaks) == 1 else f"{label} ×{len(peaks)} ≤ {max(peaks):,.0f}"
                     for label, peaks in groups.items())


def report(results: dict) -> str:
    m, c, corpus = results["machine"], results["commit"], results["corpus"]
    changed = ", ".join(c["changed"][:6]) + (", …" if len(c["changed"]) > 6 else "")
    lines = [f"# Scale benchmark: {corpus['pairs']:,} pairs", "",
             f"machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['memory_gib']} GiB"
             + (f", {'; '.join(m['gpus'])}" if m.get("gpus") else "")
             + f"; load average at start {m['load_average'][0]:.2f}",
             f"commit: {c['short'] or '?'}" + (f" with {len(c['changed'])} files changed or new ({changed})"
                                                if c["changed"] else "")
             + (f"; the steps import ctxnmt from {c['package']}" if Path(c["package"]) != ROOT / "ctxnmt" else ""),
             f"corpus: {corpus['pairs']:,} pairs, {corpus.get('bytes', 0) / MIB:,.0f} MiB of text, seed "
             f"{corpus['seed']}, generator v{corpus['generator']}"
             + (" (reused)" if corpus.get("reused") else f", written in {corpus.get('seconds', 0):.0f} s")
             + (f"; lines whose variants ran out (repeat): {corpus['repeated_lines']}"
                if any(corpus.get("repeated_lines", {}).values()) else ""),
             f"config: {results['config']} ({results['settings']})", ""]
    steps = results["steps"]
    rows = [(name, r) for name, r in steps.items() if name != "batches"]
    if rows:
        lines += ["| step | status | wall s | to update 1 s | to validation s | peak RSS max rank MiB "
                  "| peak RSS sum MiB | peak PSS sum MiB | per process peak MiB | prep MiB | notes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in rows:
            procs = process_summary(r.get("processes", []))
            notes = []
            if "train_pairs" in r:
                notes.append(f"{r['train_pairs']:,} train / {r['dev_pairs']} dev pairs, vocab "
                             f"{r['src_vocab']:,}/{r['tgt_vocab']:,}" + (f", dropped {r['dropped_long']:,} long"
                                                                        if "dropped_long" in r else ""))
            if r.get("updates") is not None:
                notes.append(f"{r['updates']} updates, {r['target_tokens_per_s']:,.0f} tok/s, "
                             f"dev {', '.join(f'{k} {v:.1f}' for k, v in (r.get('best_scores') or {}).items())}")
            status = "ok" if r.get("returncode") == 0 else f"FAILED ({r.get('returncode')})"
            lines.append(f"| {name} | {status} | {seconds(r.get('wall_s'))} | {seconds(r.get('first_update_s'))} "
                         f"| {seconds(r.get('validation_s'))} "
                         f"| {mib(r.get('peak_rank_mib'))} | {mib(r.get('peak_sum_mib'))} "
                         f"| {mib(r.get('peak_pss_sum_mib'))} | {procs} "
                         f"| {mib(r.get('prep_bytes', 0) / MIB)} | {'; '.join(notes)} |")
        lines.append("")
    bible = steps.get("bible train1")
    for name in ("train1", "train2"):
        if bible and name in steps and steps[name].get("returncode") == 0 and bible.get("returncode") == 0:
            diff = steps[name]["peak_rank_mib"] - bible["peak_rank_mib"]
            lines.append(f"{name} peak RSS (max rank) − the same model's on the Bible (1 rank): {diff:+,.0f} MiB "
                         f"(bar: at most +1,536 MiB: {'met' if diff <= 1536 else 'NOT met'})")
    if bible:
        lines.append("")
    b = steps.get("batches")
    if b:
        if b.get("returncode") == 0 and "batches_per_s" in b:
            lines += [f"batch building on {b['threads']} thread ({b['api']}), {b['train_sentences']:,} sentences:",
                      "",
                      "| load s | RSS after load MiB | lengths s | epoch_batches s | batches/epoch "
                      "| make_batch batches/s | target tok/s | × target | epoch (plan + all batches) tok/s "
                      "| × target |",
                      "|---|---|---|---|---|---|---|---|---|---|",
                      f"| {b['load_s']:.2f} | {b['rss_after_load_mib']:,.0f} | {b['lengths_s']:.2f} "
                      f"| {b['epoch_batches_s']:.2f} | {b['epoch_batches']:,} | {b['batches_per_s']:,.0f} "
                      f"| {b['target_tok_per_s']:,.0f} | {b['ratio_to_target']:.2f} "
                      f"| {b['sustained_target_tok_per_s']:,.0f} | {b['sustained_ratio_to_target']:.2f} |", "",
                      f"({b['built_batches']:,} batches built, {b['built_target_tokens']:,} target tokens; × target: "
                      f"against {b['target_rate']:,.0f} target tokens/s; the step's process peaked at "
                      f"{b['peak_rank_mib']:,.0f} MiB)"]
        else:
            lines.append(f"batches: FAILED ({b.get('returncode')}); see {b.get('log')}")
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=parse_count, default=5_850_000, help="training pairs (5850000, 1.2M, 300k)")
    parser.add_argument("--seed", type=int, default=1, help="the corpus's variations")
    parser.add_argument("--workdir", type=Path, help="default /tmp/ctxnmt-scale/PAIRS")
    parser.add_argument("--bible", type=Path, default=BIBLE, help="the built Bible corpus (train.*, dev.*)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "rnnsearch-small.yaml")
    parser.add_argument("--bpe-merges", type=int, default=30000)
    parser.add_argument("--steps", default="prepare,train1,train2,batches",
                        help=f"comma-separated, of {', '.join(STEPS)} (bible = --compare-bible)")
    parser.add_argument("--compare-bible", action="store_true",
                        help="also prepare and train1 the same config on the plain Bible")
    parser.add_argument("--updates", type=int, default=3, help="training updates per train step")
    parser.add_argument("--valid-sents", type=int, default=32, help="dev pairs of the validation")
    parser.add_argument("--valid-bleu", action="store_true", help="validate with beam search and BLEU too")
    parser.add_argument("--nproc", type=int, default=2, help="ranks of train2")
    parser.add_argument("--workers", type=int, help="pass --workers N to ctxnmt prepare")
    parser.add_argument("--prepare-args", type=shlex.split, default=[],
                        help='more arguments for ctxnmt prepare, e.g. "--workers 2" (one word: --prepare-args=--force)')
    parser.add_argument("--batches", type=int, default=1000, help="batches built in the batches step")
    parser.add_argument("--target-rate", type=float, default=100_000.0,
                        help="target tokens/s the batch builder is compared with (the GPU recipe on an H200)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config overrides for every step")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between memory samples")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the workdir (corpus, models, logs)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the children's stderr")
    parser.add_argument("--one-batches", help=argparse.SUPPRESS)  # internal: the batches step in this process
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.one_batches:
        print("RESULT " + json.dumps(measure_batches(args.one_batches, args.overrides, args.batches, args.target_rate)))
        return 0
    steps = [s.strip() for s in args.steps.split(",") if s.strip()] + (["bible"] if args.compare_bible else [])
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise SystemExit(f"unknown steps: {', '.join(unknown)} (known: {', '.join(STEPS)})")
    if args.workers is not None:
        args.prepare_args = ["--workers", str(args.workers)] + args.prepare_args
    workdir = (args.workdir or Path("/tmp/ctxnmt-scale") / short_count(args.pairs)).resolve()
    existed = workdir.exists()
    logs, model_dir = workdir / "logs", workdir / "model"
    say = lambda message: print(message, file=sys.stderr)  # noqa: E731
    results = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()},
               "workdir": str(workdir), "steps": {}}
    corpus = build_corpus(workdir, args.pairs, args.seed, args.bible, log=say)
    results["commit"] = commit(workdir)
    results["corpus"] = corpus
    data = {"corpus": "files", "dir": str(workdir), "train": "train", "dev": "dev", "bpe_merges": args.bpe_merges}
    config = write_config(workdir / "config.yaml", args.config, model_dir, data)
    results["config"] = str(config)
    results["settings"] = f"{args.config.name}, data.bpe_merges={args.bpe_merges}" + (
        f", {', '.join(args.overrides)}" if args.overrides else "") + f"; train: {args.updates} updates, " \
        f"validation on {args.valid_sents} dev pairs{' with BLEU' if args.valid_bleu else ''}"
    failed = False

    def record(name: str, result: dict) -> None:
        nonlocal failed
        results["steps"][name] = result
        ok = result.get("returncode") == 0
        failed |= not ok
        say(f"== {name}: {'ok' if ok else 'FAILED, exit status ' + str(result.get('returncode'))}, "
            f"{result.get('wall_s', 0):.1f} s, peak RSS max rank {result.get('peak_rank_mib', 0):,.0f} MiB, "
            f"sum {result.get('peak_sum_mib', 0):,.0f} MiB; log {result.get('log')}")

    if "prepare" in steps:
        record("prepare", step_prepare(config, model_dir, args, logs))
    elif any(s in steps for s in ("train1", "train2", "batches")) and not (model_dir / "prep" / "vocab.tgt").is_file():
        say("no prepared data in the workdir and no prepare step: preparing first (not measured)")
        step_prepare(config, model_dir, args, logs, name="prepare-unmeasured")
    for name, nproc in (("train1", 1), ("train2", args.nproc)):
        if name in steps:
            record(name, step_train(config, model_dir, args, logs, nproc, name))
    if "batches" in steps:
        record("batches", step_batches(config, model_dir, args, logs))
    if "bible" in steps:
        bible_dir = workdir / "bible-model"
        bible_data = {"dir": str(args.bible.resolve()), "bpe_merges": args.bpe_merges}
        bible_config = write_config(workdir / "bible.yaml", args.config, bible_dir, bible_data)
        record("bible prepare", step_prepare(bible_config, bible_dir, args, logs, name="bible-prepare"))
        record("bible train1", step_train(bible_config, bible_dir, args, logs, 1, "bible-train1"))
    for result in results["steps"].values():
        result.pop("stdout", None) if result.get("returncode") == 0 else None
    table = report(results)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.keep or failed:
        say(f"workdir kept: {workdir}" + (" (a step failed; its log is there)" if failed and not args.keep else ""))
    elif not existed:
        shutil.rmtree(workdir)
    else:  # a workdir given or reused: remove what this script writes there, nothing else
        for name in ("model", "bible-model", "logs", "config.yaml", "bible.yaml", STAMP, "train.es", "train.en",
                     "train.doc", "dev.es", "dev.en", "dev.doc"):
            path = workdir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
