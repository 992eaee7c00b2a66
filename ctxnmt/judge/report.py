"""`ctxnmt judge report`: the papers' ranking table from a study's answers.

For every pair (A, B) of systems (A given before B at creation), each answer says
whether A's output was ranked higher (>), equal (=) or lower (<) than B's.  Rows:

  one per judge      percentages over that judge's answers for the pair, and the
                     two-sided sign test on the > and < counts (ties dropped)
  "all judges"       (two or more judges) percentages over all their answers; the
                     sign test on the items, each item's sign being that of the sum
                     of its answers (+1 >, 0 =, −1 <), so that an item judged by
                     several people counts once; agreement on the items every
                     judge answered: Cohen's κ for two judges, Fleiss' κ for more

Identical outputs were never shown; their count is a column of its own and they
are in none of the percentages.
"""
from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass

from scipy.stats import binomtest

RANKS = (">", "=", "<")


@dataclass
class Row:
    sys_a: str
    sys_b: str
    judge: str
    items: int
    identical: int
    higher: int
    equal: int
    lower: int
    sign_p: float
    kappa: float | None = None
    kappa_name: str = ""

    def percent(self, count: int) -> float:
        return 100.0 * count / self.items if self.items else float("nan")


# -- statistics ------------------------------------------------------------------------------

def sign_test(higher: int, lower: int) -> float:
    """Two-sided p-value of higher vs lower under H0 p = 1/2; 1.0 when there is no non-tie."""
    n = higher + lower
    return float(binomtest(higher, n, 0.5).pvalue) if n else 1.0


def cohen_kappa(first: list[str], second: list[str], categories=RANKS) -> float:
    """Cohen's κ of two judges' labels for the same items; nan when chance agreement is 1."""
    n = len(first)
    if n == 0:
        return float("nan")
    observed = sum(a == b for a, b in zip(first, second)) / n
    chance = sum((first.count(c) / n) * (second.count(c) / n) for c in categories)
    return (observed - chance) / (1 - chance) if chance < 1 else float("nan")


def fleiss_kappa(counts: list[list[int]]) -> float:
    """Fleiss' κ from per-item category counts (every item rated by the same number of judges)."""
    if not counts:
        return float("nan")
    raters = sum(counts[0])
    if raters < 2 or any(sum(row) != raters for row in counts):
        raise ValueError("Fleiss' kappa needs the same number (≥ 2) of ratings for every item")
    items = len(counts)
    agreement = sum((sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in counts) / items
    shares = [sum(row[j] for row in counts) / (items * raters) for j in range(len(counts[0]))]
    chance = sum(p * p for p in shares)
    return (agreement - chance) / (1 - chance) if chance < 1 else float("nan")


# -- from the study --------------------------------------------------------------------------

def ranked_answers(db) -> list[tuple[str, str, int, str, str]]:
    """(sys_a, sys_b, item, judge, rank of A against B) for every answer."""
    rows = db.execute("SELECT i.sys_a, i.sys_b, i.id, a.judge, a.choice, i.left_is_a FROM answers a "
                      "JOIN items i ON i.id = a.item ORDER BY a.id").fetchall()
    out = []
    for sys_a, sys_b, item, judge, choice, left_is_a in rows:
        if choice == "equal":
            rank = "="
        else:
            rank = ">" if (choice == "left") == bool(left_is_a) else "<"
        out.append((sys_a, sys_b, item, judge, rank))
    return out


def pairs(db) -> list[tuple[str, str]]:
    names = [n for (n,) in db.execute("SELECT name FROM systems ORDER BY position")]
    return list(itertools.combinations(names, 2))


def agreement(by_item: dict[int, dict[str, str]], judges: list[str]) -> tuple[float | None, str]:
    """κ over the items every judge answered."""
    if len(judges) < 2:
        return None, ""
    complete = [labels for labels in by_item.values() if all(j in labels for j in judges)]
    if len(judges) == 2:
        return cohen_kappa([x[judges[0]] for x in complete], [x[judges[1]] for x in complete]), "Cohen"
    return fleiss_kappa([[sum(x[j] == r for j in judges) for r in RANKS] for x in complete]), "Fleiss"


def pair_rows(sys_a: str, sys_b: str, answers: list, identical: int) -> list[Row]:
    judges = sorted({judge for *_, judge, _ in answers})
    rows = []
    for judge in judges:
        ranks = [rank for *_, j, rank in answers if j == judge]
        rows.append(_row(sys_a, sys_b, judge, ranks, identical, sign_test(ranks.count(">"), ranks.count("<"))))
    if len(judges) >= 2:
        by_item: dict[int, dict[str, str]] = {}
        for _, _, item, judge, rank in answers:
            by_item.setdefault(item, {})[judge] = rank
        sums = [sum({">": 1, "=": 0, "<": -1}[r] for r in labels.values()) for labels in by_item.values()]
        ranks = [rank for *_, rank in answers]
        row = _row(sys_a, sys_b, "all judges", ranks, identical,
                   sign_test(sum(s > 0 for s in sums), sum(s < 0 for s in sums)))
        row.kappa, row.kappa_name = agreement(by_item, judges)
        rows.append(row)
    return rows


def _row(sys_a, sys_b, judge, ranks, identical, p) -> Row:
    return Row(sys_a, sys_b, judge, len(ranks), identical, ranks.count(">"), ranks.count("="), ranks.count("<"), p)


def report_rows(db) -> list[Row]:
    answers = ranked_answers(db)
    rows = []
    for sys_a, sys_b in pairs(db):
        identical = db.execute("SELECT COUNT(*) FROM items WHERE sys_a = ? AND sys_b = ? AND identical = 1",
                               (sys_a, sys_b)).fetchone()[0]
        mine = [a for a in answers if a[0] == sys_a and a[1] == sys_b]
        rows.extend(pair_rows(sys_a, sys_b, mine, identical) or
                    [_row(sys_a, sys_b, "(no answers)", [], identical, 1.0)])
    return rows


def overall_agreement(db) -> tuple[float | None, str, int]:
    """κ over every item (all pairs) that all judges answered, and how many items that is."""
    answers = ranked_answers(db)
    judges = sorted({a[3] for a in answers})
    by_item: dict[int, dict[str, str]] = {}
    for _, _, item, judge, rank in answers:
        by_item.setdefault(item, {})[judge] = rank
    kappa, name = agreement(by_item, judges)
    return kappa, name, sum(all(j in x for j in judges) for x in by_item.values())


# -- output ----------------------------------------------------------------------------------

def _fmt(value: float | None, digits: int) -> str:
    return "" if value is None else ("n/a" if math.isnan(value) else f"{value:.{digits}f}")


HEADER = ["system A", "system B", "judge", "items", "identical", "A > B %", "A = B %", "A < B %", ">", "=", "<",
          "sign test p", "kappa"]


def _cells(r: Row) -> list[str]:
    kappa = f"{_fmt(r.kappa, 3)} ({r.kappa_name})" if r.kappa is not None else ""
    return [r.sys_a, r.sys_b, r.judge, str(r.items), str(r.identical), _fmt(r.percent(r.higher), 1),
            _fmt(r.percent(r.equal), 1), _fmt(r.percent(r.lower), 1), str(r.higher), str(r.equal), str(r.lower),
            _fmt(r.sign_p, 4), kappa]


def format_markdown(rows: list[Row], study: dict, overall: tuple) -> str:
    lines = [f"Blind pairwise ranking: {study['n']} source sentences (seed {study['seed']}); "
             "percentages over the judged items, identical outputs not shown to judges and counted apart.", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    kappa, name, items = overall
    if kappa is not None:
        lines += ["", f"Agreement over all pairs: {name}'s κ = {_fmt(kappa, 3)} on {items} items every judge answered."]
    return "\n".join(lines) + "\n"


def format_csv(rows: list[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(_cells(r) for r in rows)
    return buffer.getvalue()
