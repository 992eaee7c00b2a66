"""Model components. Importing the package registers every cell, encoder,
decoder, target-context summary and output layer under its config name."""
from ctxnmt.models import cells, decoders, encoders, output, target_context  # noqa: F401  (registration)
