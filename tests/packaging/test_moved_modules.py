"""Old import paths keep working for one release, and say where their names went.

Third-party plugins written against the layout before the floors (issue 30)
import ``kvframe.bases``, ``kvframe.request``, ``kvframe.events``, ... Each such
path imports, with a ``DeprecationWarning`` naming the new home, as a module
whose names are the *same objects* as the new modules' (an ``isinstance`` or
``issubclass`` check against either gives the same answer). Each check runs in
a fresh interpreter: this one has imported the old paths already.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap

import pytest

from kvframe import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_once_and_offers_the_new_homes_names(old: str) -> None:
    homes = MOVED[old]
    script = textwrap.dedent(
        f"""
        import importlib, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module({old!r})
        messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
        assert len(messages) == 1, messages
        assert messages[0].startswith({old + " moved to "!r}), messages[0]
        for home in {homes!r}:
            assert home in messages[0], (home, messages[0])
            new = importlib.import_module(home)
            for name in getattr(new, "__all__", ()):
                if not hasattr(new, name):
                    continue
                found = getattr(module, name)
                owner = next(h for h in {homes!r} if hasattr(importlib.import_module(h), name))
                assert found is getattr(importlib.import_module(owner), name), name
        # The new modules keep their own identity.
        for home in {homes!r}:
            assert importlib.import_module(home).__spec__.name == home
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_an_unknown_name_on_an_old_path_is_an_attribute_error_naming_it() -> None:
    sys.modules.pop("kvframe.request", None)  # imported earlier: import it afresh
    with pytest.warns(DeprecationWarning, match=re.escape("kvframe.request moved to")):
        module = importlib.import_module("kvframe.request")
    with pytest.raises(
        AttributeError, match=re.escape("'kvframe.request' has no attribute 'Nope'")
    ):
        module.Nope  # noqa: B018 - the access is the test


def test_every_name_a_plugin_needs_is_on_kvframe() -> None:
    import kvframe

    for name in kvframe.__all__:
        assert getattr(kvframe, name) is not None, name
