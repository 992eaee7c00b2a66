"""ctxnmt: context-aware recurrent neural machine translation.

Importing the package loads nothing heavy: `ctxnmt --help` and `--version` stay quick.  The
model components register themselves when ctxnmt.models is imported, which reading a config
does first (ctxnmt.config), since their settings are keys of its model section."""
