"""The core's network: the backbone every family shares and its pieces (attention, masks, positions,
norms, feed-forward layers, heads), the model base, the key/value cache and the generation hooks
(ARCHITECTURE.md)."""
