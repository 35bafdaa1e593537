"""Using the models: sentence scores (T-TA one pass, BERT PLL, GPT causal) and sentence embeddings."""

from ...runtime.precision import Precision
from .embed import Embedder, Pooling, encode, read_piece_counts
from .scorer import Method, Overflow, Scorer, SentenceScore, WordScore, load_model_dir

__all__ = ["Embedder", "Pooling", "encode", "read_piece_counts", "Method", "Overflow", "Precision", "Scorer",
           "SentenceScore", "WordScore", "load_model_dir"]
