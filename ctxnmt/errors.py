"""One exception type for everything a user can get wrong.

The CLI turns a CtxnmtError into a one-line message and exit status 2, so every
raise site must say which file, line or key is at fault.
"""


class CtxnmtError(Exception):
    """A user-facing error: bad input, bad config, bad checkpoint."""


class DataError(CtxnmtError):
    """Malformed or inconsistent corpus files."""


class ConfigError(CtxnmtError):
    """Unknown or invalid configuration keys and values."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        # the dotted config key at fault, where there is one: the error can then name the file
        # and line, or the --set item, that gave it
        self.key = key


class CheckpointError(CtxnmtError):
    """Missing, corrupt or incompatible checkpoints."""
