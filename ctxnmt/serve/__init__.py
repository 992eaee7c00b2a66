"""`ctxnmt serve`: a translation server with dynamic batching and a web page that shows what
each model attends to (source attention, target-side attention, adaptive gates, document context)."""
