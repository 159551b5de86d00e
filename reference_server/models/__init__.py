"""The model backends: the decoder-only transformer in numpy and in torch, the simulated-GPU backend, the
model presets, the weights file, the byte tokenizer and sampling; :mod:`.backends` chooses one and loads it."""
