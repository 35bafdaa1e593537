"""Evaluations of trained models: unsupervised STS, N-best reranking, minimal pairs, real-word spelling errors,
unsupervised CoLA. Each module has a loader for its data and an evaluate_* function that takes the model as a
plain function (sentences -> embeddings or scores), so the logic is testable without a model."""

from .wer import edit_distance, wer

__all__ = ["edit_distance", "wer"]
