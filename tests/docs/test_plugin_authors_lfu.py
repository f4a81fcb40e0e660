"""The LFU policy that docs/plugin-authors.md shows, as printed, passes the conformance suite.

The page's first Python block is a whole plugin (no ``...`` bodies): it is cut
out of the page, executed as the module ``my_policies.lfu`` would be, and
handed to :class:`kvframe.testing.EvictionPolicySuite` with the options the page
selects it with. A change to the contract that the example no longer meets
fails here, not in a reader's project.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

from kvframe.testing import EvictionPolicySuite

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugin-authors.md"


def _example_module() -> types.ModuleType:
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(r"```python\n(# my_policies/lfu\.py\n.*?)```", text, re.S)
    assert match is not None, f"{PAGE}: no ```python block starting with '# my_policies/lfu.py'"
    source = match.group(1)
    assert "..." not in source, "the page's LFU must be a whole policy, not a sketch"
    module = types.ModuleType("my_policies_lfu")
    exec(compile(source, f"{PAGE}:lfu", "exec"), module.__dict__)
    return module


LFU = _example_module().LFU


def test_the_page_example_is_at_most_forty_lines_of_policy() -> None:
    source = re.search(
        r"```python\n(# my_policies/lfu\.py\n.*?)```", PAGE.read_text(encoding="utf-8"), re.S
    )
    assert source is not None
    code = [line for line in source.group(1).splitlines() if line.strip()]
    assert len(code) <= 40, len(code)


class TestPageLFU(EvictionPolicySuite):
    plugin = LFU


class TestPageLFUWithDecay(EvictionPolicySuite):
    plugin = LFU
    options = {"decay": 0.5}
