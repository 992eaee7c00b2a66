"""Model components. Importing the package registers every cell, encoder,
decoder, target-context summary and document-context input under its config name."""
from ctxnmt.models import cells, decoders, document, encoders, target_context  # noqa: F401  (registration)
