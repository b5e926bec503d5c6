"""The small HTTP/1.1 server on asyncio that the replica and the router share.

:mod:`drill.stack.http.server` serves requests (plain and streamed responses);
:mod:`drill.stack.http.messages` holds the request, response and error values and the path
router, re-exported by the server module. Importing this package starts nothing.
"""
