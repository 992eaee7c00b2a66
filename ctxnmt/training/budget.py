"""Training budgets shared by every trainer: updates, epochs and minutes of training."""
from __future__ import annotations


def budget_reached(training, progress) -> str:
    """Why training must stop now ("" = it may go on).  `training` has max_updates,
    max_epochs and max_minutes (0 = unlimited); `progress` has update, epoch and elapsed
    seconds of training, validation excluded."""
    t, p = training, progress
    if t.max_updates and p.update >= t.max_updates:
        return f"reached {t.max_updates} updates"
    if t.max_epochs and p.epoch >= t.max_epochs:
        return f"reached {t.max_epochs} epochs"
    if t.max_minutes and p.elapsed >= 60 * t.max_minutes:
        return f"reached the {t.max_minutes:g}-minute budget"
    return ""


def add_budget_arguments(parser) -> None:
    """--max-minutes and --max-updates of a command that trains: each overrides its config key."""
    parser.add_argument("--max-minutes", type=float, metavar="M",
                        help="wall-clock budget for training (training.max_minutes; overrides the config)")
    parser.add_argument("--max-updates", type=int, metavar="N",
                        help="stop after N updates (training.max_updates; overrides the config; 0: no limit)")


def budget_overrides(args) -> list[str]:
    """--set items for the budget flags given; placed after the --set items, the flags win."""
    return [f"training.{name}={value}" for name, value in (("max_minutes", args.max_minutes),
                                                            ("max_updates", args.max_updates)) if value is not None]
