"""The tasks by the name a config's or an experiment's `task:` key gives them (fairseq's TASK_REGISTRY),
listed here rather than registered as a side effect of importing them."""
from __future__ import annotations

from ctxnmt.tasks.language_model import LanguageModelTask
from ctxnmt.tasks.translation import TranslationTask
from ctxnmt.training.task import Task

TASKS: dict[str, type[Task]] = {task.name: task for task in (TranslationTask, LanguageModelTask)}
