"""The plugin contract, on one floor above :mod:`kvframe.domain`.

* :mod:`kvframe.contract.bases` -- the base class of each plugin kind;
* :mod:`kvframe.contract.views` -- what a plugin is shown of the host;
* :mod:`kvframe.contract.offload` -- the offload tier's manager and transfer protocols;
* :mod:`kvframe.contract.records` -- KV events and trace records;
* :mod:`kvframe.contract.hookspecs` -- the pluggy hook specs;
* :mod:`kvframe.contract.kinds` -- the plugin kinds and their hooks;
* :mod:`kvframe.contract.support` -- helpers that make a policy fast without changing it.

A plugin author imports all of these names from ``kvframe`` itself.
"""
