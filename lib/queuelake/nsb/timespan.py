"""The .NET TimeSpan text NServiceBus writes TimeToBeReceived in (``00:00:10``, ``1.00:00:00``,
``00:00:01.5000000``), to and from milliseconds, and the length that means "never expires".

Why a module of its own: publish writes a TimeSpan from a row's ttbr_ms, a replay reads one back to
set the message's expiry, and the outbound contract refuses a ttbr_ms past the limit; none of them
needs the header codec for it.
"""

from __future__ import annotations

import re

# A TimeToBeReceived this long or longer means "never expires" (TimeSpan.MaxValue is ~29,000 years,
# and now + it would pass LAST_INSTANT): replay drops it, and publish refuses it as a ttbr_ms.
MAX_TTBR_MS = 100 * 365 * 86_400_000

_TIMESPAN = re.compile(r"^(-)?(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?$")


def timespan(ms: int) -> str:
    """A .NET TimeSpan string ("c" format), as NServiceBus writes TimeToBeReceived."""
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    text = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    if days:
        text = f"{days}.{text}"
    if millis:
        text += f".{millis * 10_000:07d}"
    return text


def timespan_ms(text: str | None) -> int | None:
    """A .NET TimeSpan string (``00:00:10``, ``1.00:00:00``, ``00:00:01.5000000``) in milliseconds;
    None when absent, unreadable, not positive or practically infinite (TimeSpan.MaxValue)."""
    if not text:
        return None
    m = _TIMESPAN.match(text.strip())
    if m is None:
        return None
    sign, days, hours, minutes, seconds, fraction = m.groups()
    ms = (int(days or 0) * 86_400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)) * 1000 + int(
        (fraction or "0").ljust(7, "0")
    ) // 10_000
    if sign or ms <= 0 or ms >= MAX_TTBR_MS:
        return None
    return ms
