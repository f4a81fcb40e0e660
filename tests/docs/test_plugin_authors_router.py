"""The routers docs/plugin-authors.md shows, and one written from it, pass the routing suite.

The page's router block is a whole plugin: it is cut out of the page, executed
as ``my_routers.longest_prefix`` would be, and handed to
:class:`kvframe.testing.RouterSuite`. ``third_party_router.py`` is a second
router written from that section alone (SGLang's power-of-two choice). A
contract change that either no longer meets fails here.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from kvframe.testing import RouterSuite

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugin-authors.md"
_BLOCK = r"```python\n(# my_routers/longest_prefix\.py\n.*?)```"

sys.path.insert(0, str(Path(__file__).parent))
from third_party_router import PowerOfTwo  # noqa: E402


def _example_module() -> types.ModuleType:
    match = re.search(_BLOCK, PAGE.read_text(encoding="utf-8"), re.S)
    assert match is not None, f"{PAGE}: no router block starting with '# my_routers/...'"
    assert "..." not in match.group(1), "the page's router must be whole, not a sketch"
    module = types.ModuleType("my_routers_longest_prefix")
    exec(compile(match.group(1), f"{PAGE}:router", "exec"), module.__dict__)
    return module


LongestPrefix = _example_module().LongestPrefix


class TestPageRouter(RouterSuite):
    plugin = LongestPrefix


class TestPageRouterWithOptions(RouterSuite):
    plugin = LongestPrefix
    options = {"min_blocks": 4}


class TestThirdPartyRouter(RouterSuite):
    plugin = PowerOfTwo
