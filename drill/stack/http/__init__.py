"""The small HTTP/1.1 server and client on asyncio that the replica and the router share.

:mod:`drill.stack.http.server` serves requests (plain and streamed responses);
:mod:`drill.stack.http.messages` holds the request, response and error values and the path
router, re-exported by the server module; :mod:`drill.stack.http.client` is the router's upstream client,
:mod:`drill.stack.http.loop` picks the event loop (uvloop when installed), and
:mod:`drill.stack.http.span_export` exports spans from the loop. Importing this package starts nothing.
"""
