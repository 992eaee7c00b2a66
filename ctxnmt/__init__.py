"""ctxnmt: context-aware recurrent neural machine translation.

Importing the package loads nothing heavy: `ctxnmt --help` and `--version` stay quick.  Reading
a config loads no model code either (ctxnmt.config is torch-free); the model components register
under their config names when ctxnmt.models.components is imported, by whatever builds a model."""
