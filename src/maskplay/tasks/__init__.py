"""The tasks, above the families: scoring, evaluation, training, fine-tuning, decoding, serving,
distillation, export, and the one-module tasks (ARCHITECTURE.md). Each imports the core and the
families, never the command line."""
