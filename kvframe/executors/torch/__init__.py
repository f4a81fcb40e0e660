"""The torch executor: a real Llama-architecture decoder on kvframe's paged KV cache.

Importing this package does not import torch; :mod:`.build` (which the engine
imports only for ``--executor torch``) does. :mod:`.outputs` (comparing two
runs' generated tokens) and :mod:`.options` are torch-free.
"""
