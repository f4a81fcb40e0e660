"""kvframe's version, on the lowest floor so every floor can name it in what it writes
(``metrics.json``, ``kvframe plugins --json``) without importing the package root."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
