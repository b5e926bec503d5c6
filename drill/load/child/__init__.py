"""The load-generator child process: everything that runs under gevent's monkey-patching.

``python -m drill.load.child.locustfile`` imports Locust first; only modules in this package import
Locust, gevent or geventhttpclient, and nothing outside it imports them (the harness starts the child
by module name, never by import). This file imports nothing, so the patching still comes first."""
