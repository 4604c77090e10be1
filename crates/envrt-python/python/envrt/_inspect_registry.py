"""Inspect AI entry point (``[project.entry-points.inspect_ai]``): importing this module
registers the sandbox type ``"envrt"``. Without inspect-ai installed it does nothing."""

try:
    import inspect_ai  # noqa: F401
except ImportError:  # pragma: no cover - the package works without Inspect
    pass
else:
    from . import _inspect  # noqa: F401
