"""The one way the ``drill`` command writes to a terminal: every character shown is literal text.

Names and messages reach the terminal from untrusted places — a span or service name in a trace file, a drill's
title, a path given on the command line — so nothing printed is parsed as rich markup (``[/x]`` is shown as
``[/x]``, never a crash), and no control character reaches the terminal raw: ESC (the start of colour, cursor and
OSC sequences such as hyperlinks or window titles), the other C0 controls except newline and tab, DEL, the C1
controls and the Unicode bidirectional overrides are shown as ``\\xNN`` / ``\\uNNNN`` escapes. The userinfo of a
URL is a credential and is shown as ``[redacted]``.

Styled output is assembled from parts (:func:`say`): a plain ``str`` part is literal text, a ``(text, style)``
part is literal text in a rich style. The two consoles default to ``markup=False`` and escape every segment they
render, so even a rich renderable built elsewhere (a table, a progress bar's description) cannot pass a control
character through.
"""

from __future__ import annotations

from collections.abc import Iterable

import click
from rich.console import Console
from rich.segment import Segment
from rich.text import Text

from drill.rundir.redact import CONTROL_CHARACTERS, escape_controls, scrub_url_userinfo

__all__ = ["SafeConsole", "console", "echo", "err_console", "literal", "literal_json", "say", "styled"]


def literal(text: object) -> str:
    """``text`` as it may be shown on a terminal: every unsafe control character replaced by its escape, and the
    userinfo of every URL (``http://admin:PW@host``) redacted."""
    return scrub_url_userinfo(escape_controls(str(text)))


def literal_json(text: str) -> str:
    """JSON text as it may be shown on a terminal: unsafe characters (which JSON holds only inside strings) as
    ``\\uNNNN`` escapes, so the document still parses to the same value."""
    return CONTROL_CHARACTERS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeConsole(Console):
    """A rich console that never interprets markup unless a call asks for it, and escapes control characters in
    every segment it renders (the segments rich itself marks as control codes, such as cursor moves, are kept)."""

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("highlight", False)
        kwargs.setdefault("emoji", False)
        kwargs.setdefault("soft_wrap", True)
        super().__init__(**kwargs)  # type: ignore[arg-type]  # rich's keyword arguments, passed through

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        safe = (seg if seg.control else Segment(literal(seg.text), seg.style, seg.control) for seg in buffer)
        return super()._render_buffer(safe)


console = SafeConsole()
err_console = SafeConsole(stderr=True)

Part = str | tuple[str, str]


def styled(*parts: Part) -> Text:
    """One line made of ``parts``: a ``str`` is literal text, ``(text, style)`` literal text in a rich style."""
    line = Text()
    for part in parts:
        if isinstance(part, str):
            line.append(literal(part))
        else:
            line.append(literal(part[0]), style=part[1])
    return line


def say(*parts: Part, err: bool = False) -> None:
    """Print one :func:`styled` line: ``say(("error:", "bold red"), " ", message, err=True)``."""
    (err_console if err else console).print(styled(*parts))


def echo(text: object, *, err: bool = False) -> None:
    """Print ``text`` as plain literal text, without rich (output meant for pipes: plans, diagnostics)."""
    click.echo(literal(text), err=err)
