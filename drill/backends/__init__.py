"""Fault mechanisms that act on a target from outside: Toxiproxy (TCP) and Docker (containers).

Each backend is a small typed client with a timeout on every call; foreign exceptions
are translated at the boundary into :class:`drill.errors.ToxiproxyError` and
:class:`drill.errors.DockerError`. Import the submodule you need
(``drill.backends.toxiproxy``, ``drill.backends.docker``); this package imports nothing.
"""

__all__: list[str] = []
