"""Model components. Importing the package registers every cell, encoder,
decoder, target-context summary, output layer and document-context input under its
config name."""
# registration
from ctxnmt.models import cells, context, decoders, document, encoders, output, target_context  # noqa: F401
