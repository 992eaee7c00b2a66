"""Model components. Importing the package registers every cell, encoder,
decoder and target-context summary under its config name."""
from ctxnmt.models import cells, decoders, encoders, target_context  # noqa: F401  (registration)
