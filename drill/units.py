"""Quantities with units, as they are written in drill, scenario and stack files.

Durations: ``"250ms"``, ``"2s"``, ``"1.5m"``, ``"1h"``, ``"90us"`` → seconds (float).
Sizes: ``"512MiB"``, ``"20GiB"``, ``"4KB"`` → bytes (int).
A bare number is rejected for durations: ``30`` could mean seconds or minutes, and a
safety tool must not guess.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, PlainSerializer

__all__ = [
    "NS_PER",
    "BindHost",
    "Duration",
    "Size",
    "epoch_unit",
    "format_duration",
    "parse_bind_host",
    "parse_duration",
    "parse_size",
]

_DURATION_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
#: Longest duration accepted anywhere (a year): longer values overflow timers and mean a typo.
MAX_DURATION_S = 366 * 86400.0
_NUMBER_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-zµ]*)\s*$")


#: Nanoseconds per unit of an epoch time.
NS_PER: dict[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def epoch_unit(number: Decimal) -> Literal["ns", "us", "ms", "s"]:
    """The unit of an epoch time given without one, told by its size: ns from 10^17, µs from 10^14, ms from 10^11
    (year 5138 in seconds), else seconds. Trace exports and benchmarks write all four."""
    size = abs(number)
    return "ns" if size >= 10**17 else "us" if size >= 10**14 else "ms" if size >= 10**11 else "s"


def parse_duration(text: object) -> float:
    """Parse ``"250ms"``/``"2s"``/``"1m"`` into seconds.

    Raises ``ValueError`` with the accepted units when the text has none or an unknown one.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"expected a duration such as '30s' or '500ms', got {text!r}")
    match = _NUMBER_UNIT.match(str(text))
    if match is None:
        raise ValueError(f"expected a duration such as '30s' or '500ms', got {text!r}")
    number, unit = float(match.group(1)), match.group(2)
    if not unit:
        raise ValueError(f"duration {text!r} has no unit; write e.g. '{match.group(1)}s' (units: us, ms, s, m, h)")
    factor = _DURATION_UNITS.get(unit)
    if factor is None:
        raise ValueError(f"unknown duration unit {unit!r} in {text!r}; use one of us, ms, s, m, h")
    seconds = number * factor
    if not abs(seconds) <= MAX_DURATION_S:  # also refuses inf and nan
        raise ValueError(f"duration {text!r} is longer than {MAX_DURATION_S / 86400:g} days, the longest accepted")
    return seconds


def parse_size(text: object) -> int:
    """Parse ``"20GiB"``/``"512MB"`` into bytes; a bare integer is bytes."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size such as '20GiB', got {text!r}")
    if isinstance(text, int):
        return text
    match = _NUMBER_UNIT.match(str(text))
    if match is None:
        raise ValueError(f"expected a size such as '20GiB' or '512MiB', got {text!r}")
    number, unit = float(match.group(1)), match.group(2).lower() or "b"
    factor = _SIZE_UNITS.get(unit)
    if factor is None:
        raise ValueError(f"unknown size unit {match.group(2)!r} in {text!r}; use B, KB, MB, GB, KiB, MiB, GiB")
    if not abs(number * factor) <= 2**63 - 1:  # also refuses inf and nan
        raise ValueError(f"size {text!r} is larger than a 64-bit count of bytes")
    return int(number * factor)


def format_duration(seconds: float) -> str:
    """Render seconds compactly with a unit: 0.25 -> '250ms', 90 -> '1.5m'."""
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1:
        return f"{seconds * 1000:g}ms"
    if abs(seconds) < 60 or seconds % 60:
        return f"{seconds:g}s"
    if seconds % 3600:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"


def _not_negative(seconds: float) -> float:
    """No length of time, timeout, window, step or bound is negative (a field may ask for more than 0)."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be a negative time, got {format_duration(seconds)}")
    return seconds


#: A pydantic field type: written with a unit in YAML, held as seconds (float), 0 or more.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    AfterValidator(_not_negative),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]

#: A pydantic field type: written with a unit in YAML, held as bytes (int).
Size = Annotated[int, BeforeValidator(parse_size)]


def parse_bind_host(text: object) -> str:
    """An address this machine can listen on: an IP literal or ``localhost`` (names are not resolved here)."""
    if not isinstance(text, str):
        raise ValueError(f"expected an IP address such as 127.0.0.1, got {text!r}")
    if text == "localhost":
        return text
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"expected an IP address to listen on, such as 127.0.0.1 or 0.0.0.0, got {text!r}") from None
    return text


#: A pydantic field type: the address a server of the harness or of the stack listens on.
BindHost = Annotated[str, BeforeValidator(parse_bind_host)]
