"""Model components.  Importing the package registers nothing: ctxnmt.models.components does,
for what builds a model; their settings are ctxnmt.models.settings's, torch-free."""
