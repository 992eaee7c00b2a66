"""Name -> class registries, so that a model variant is a class plus one entry.

Configs name components (`model.encoder: birnn`); builders look the name up
here, and an unknown name is a ConfigError listing the known ones.  An entry may
declare its own settings, a dataclass whose fields become keys of the config's model
section (`register(name, settings=…)`); the component reads them with
`ModelConfig.settings`.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TypeVar

from ctxnmt.errors import ConfigError
from ctxnmt.models.settings import declare_model_settings

T = TypeVar("T")


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, type] = {}

    def register(self, name: str, settings: type | None = None) -> Callable[[T], T]:
        """Register a class under `name`; `settings`: the dataclass of the model keys it reads
        beyond ModelConfig's (each with a default)."""
        def add(cls: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            if settings is not None:
                declare_model_settings(settings, self.kind, name)
            self._entries[name] = cls  # type: ignore[assignment]
            return cls

        return add

    def get(self, name: str, key: str = "") -> type:
        """The class registered as `name`; else a ConfigError listing the known names, after
        `key` (the config key that named it) where given."""
        if name not in self._entries:
            close = difflib.get_close_matches(name, list(self._entries), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            where = f"{key}: " if key else ""
            raise ConfigError(f"{where}unknown {self.kind} '{name}'{hint}; known: {', '.join(sorted(self._entries))}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)


CELLS = Registry("cell")
ENCODERS = Registry("encoder")
DECODERS = Registry("decoder")
TARGET_CONTEXTS = Registry("target_context")
OUTPUTS = Registry("output")
DOC_INPUTS = Registry("doc_aux")
CONTEXTS = Registry("context")
