"""Architecture guards that import-linter's contracts (``pyproject.toml``, ``tests/test_import_contracts.py``) cannot
express: what the harness process loads at run time (entry points and plugins are imported by name, which no static
import graph shows), and drill.api's public names."""

from __future__ import annotations

import subprocess
import sys

import drill.api


def test_the_harness_process_never_imports_locust_or_gevent() -> None:
    """Locust monkey-patches at import; only the load child process may load it (docs/dependencies.md §1.2)."""
    code = (
        "import sys, drill.cli.main, drill.runner.run, drill.load.driver, drill.targets.embedded, "
        "drill.cli.run, drill.cli.load; "
        "print(sorted(m for m in ('locust', 'gevent', 'geventhttpclient') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_api_exports_exactly_its_public_names() -> None:
    public = {
        name
        for name, value in vars(drill.api).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "drill.api") in ("drill.api", "drill.api.check_sdk")
        and not isinstance(value, (type(drill), bool))
    }
    assert public <= set(drill.api.__all__), sorted(public - set(drill.api.__all__))
    assert all(hasattr(drill.api, name) for name in drill.api.__all__)
