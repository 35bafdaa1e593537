"""The core's running of a model: precision, devices, quantisation, model directories and files,
progress, FLOP counts, the allocator (ARCHITECTURE.md)."""
