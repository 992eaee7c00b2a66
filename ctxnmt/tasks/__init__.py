"""The tasks, each whole (fairseq's tasks): its config, training, validation, inference and runs."""
