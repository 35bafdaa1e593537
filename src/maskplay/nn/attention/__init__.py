"""The attention layers and the long-text pieces around them. select.make_attention picks a block's layer from the
config (dense.Attention, dense.SynthesizedAttention, lsra.LongShortAttention); each is called as
`attn(h, inputs, index)` with the pass's inputs.PassInputs. Nothing here imports the backbone: the backbone imports
this package, one way. Kept free of imports so that importing one module (banded, long_masks, reformer) loads only
what it needs."""
