"""The load driver. Only :mod:`drill.load.locustfile` (run in a child process) imports Locust;
everything else here is plain Python the harness can import safely."""
