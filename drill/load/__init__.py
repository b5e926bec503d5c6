"""The load driver. Locust is imported only in the load-generator child process: first by
:mod:`drill.load.locustfile`, then by :mod:`drill.load.distributed`, which only that child imports. The
modules that run under gevent there (``openloop``, ``streaming``, ``reactor``, ``bursts``, ``sinks``) are
likewise imported only by the child; everything else here is plain Python the harness can import safely."""
