"""The lowest floor: what a request, a token and a step cost *are*.

Nothing here imports any other part of kvframe, so every floor above may use it
(the layering contract in ``pyproject.toml``, checked by import-linter):

* :mod:`kvframe.domain.costs` -- :class:`CostModel` and :class:`ModelShape`.
* :mod:`kvframe.domain.fidelity` -- :class:`Fidelity`: which vLLM release's rules
  the core follows, one switch per upstream change.
"""
