"""Game days: a list of drills run in order, an index page linking their reports, and a trend view across game days.

``definition`` reads a game-day file; ``conductor`` runs its drills (each a ``drill run`` child process) and
writes the game-day record; ``record`` is that record (``gameday.json``) and finds earlier ones; ``headline``
picks a verdict's headline figures; ``index`` and ``trend`` render the pages (Markdown and self-contained HTML).
"""
