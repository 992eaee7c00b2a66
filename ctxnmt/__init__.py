"""ctxnmt: context-aware recurrent neural machine translation.

The model components are registered whenever the package is imported: their settings are
keys of a config's model section (ctxnmt.config.declare_model_settings), which must be
known wherever a config is read."""
from ctxnmt import models  # noqa: F401  (registration)
