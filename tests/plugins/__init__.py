"""Test-only plugins, registered through DRILL_EXTRA_PLUGINS (see tests/conftest.py)."""
