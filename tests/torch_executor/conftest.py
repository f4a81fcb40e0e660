"""The torch executor's tests need torch (the ``torch`` extra); without it they skip."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
