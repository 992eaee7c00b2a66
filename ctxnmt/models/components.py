"""The components shipped with ctxnmt, registered under their config names when this module is
imported: whatever builds a model from a config imports it (ctxnmt.models.nmt, the language
model), so that reading a config (ctxnmt.config) loads none of them."""
from ctxnmt.models import cells, context, decoders, document, encoders, output, target_context  # noqa: F401
