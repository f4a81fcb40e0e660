"""The plugin host: finding plugins by entry point, resolving config strings, tracing.

* :mod:`kvframe.host.registry` -- :class:`PluginRegistry` and :func:`get_registry`;
* :mod:`kvframe.host.tracing` -- the broadcast that reaches every selected tracer.
"""
