"""The layer every other part of ctxnmt may use, and which uses none of them (only
ctxnmt.errors): files, checkpoints, locks, stop signals, processes, threads and messages."""
