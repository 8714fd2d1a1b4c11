"""Durations, times and money as people read them: the one formatter every card,
reply, alert, refusal and CLI line uses, so the same amount always reads the same.

    units.duration(150)                  # "2 min 30 s"
    units.duration(timedelta(hours=4))   # "4 h"
    units.ago(then, now)                 # "5 min ago", "in 14 min", "never"
    units.money(13_088)                  # "$0.013"  (cards, lists, alerts)
    units.money(28)                      # "0.0028¢"
    units.usd(13_088)                    # "$0.013088"  (a budget's detail, a claim)
    units.when(at)                       # "2026-12-04 17:10 UTC"
    units.clock(at)                      # "17:10"  (under a day's heading)
    units.time_of_day(at)                # "17:10:05 UTC"
    units.day(at)                        # "2026-12-04"

Exact enough to be true: a duration shows its two largest units (what it drops is
smaller than the last one shown). Money a person reads in passing (`money`) has two
significant figures and never fewer digits than the cent, and under a cent it is said in
cents; where an amount is acted on (a budget's detail, a claim to settle) `usd` is exact.
Pure functions; nothing reads the clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

MICROS_PER_USD = 1_000_000
MICROS_PER_CENT = 10_000
#: Each unit's length in seconds, largest first, and its short name.
_UNITS = ((86_400, "d"), (3_600, "h"), (60, "min"), (1, "s"))
#: At most this many units are shown ("1 d 2 h", not "1 d 2 h 3 min 4 s").
_SHOWN = 2


def duration(span: float | timedelta) -> str:
    """ "40 s", "2 min 30 s", "4 h", "1 d 2 h": whole seconds, the two largest units."""
    seconds = int(span.total_seconds() if isinstance(span, timedelta) else span)
    if seconds < 0:
        return f"-{duration(-seconds)}"
    parts: list[str] = []
    for size, name in _UNITS:
        count, seconds = divmod(seconds, size)
        if count or parts:
            parts.append(f"{count} {name}")
        if len(parts) == _SHOWN:
            break
    # "2 h 0 min" says no more than "2 h"
    shown = [part for part in parts if not part.startswith("0 ")]
    return " ".join(shown) or "0 s"


def ago(at: datetime | None, now: datetime) -> str:
    """ "5 min ago", "in 14 min", or "never" for no time at all."""
    if at is None:
        return "never"
    seconds = int((now - at).total_seconds())
    return f"in {duration(-seconds)}" if seconds < 0 else f"{duration(seconds)} ago"


def when(at: datetime) -> str:
    """A moment to the minute, in UTC as the store keeps it."""
    return at.strftime("%Y-%m-%d %H:%M UTC")


def when_exact(at: datetime) -> str:
    """A moment to the second, for what is ordered within a minute (seals, storage faults)."""
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def clock(at: datetime) -> str:
    """The minute of a moment, for lines under a heading that names the day (in UTC)."""
    return at.strftime("%H:%M")


def time_of_day(at: datetime) -> str:
    """The second within today a short window closes at (an undo), in UTC."""
    return at.strftime("%H:%M:%S UTC")


def day(at: datetime) -> str:
    """The day something happened on (a digest, a signed head, a budget's period)."""
    return at.strftime("%Y-%m-%d")


def usd(micros: int) -> str:
    """Micro-dollars as dollars, never rounded: "$5.00", "$0.15", "$1.234567", "$0.000028"."""
    if micros < 0:
        return f"-{usd(-micros)}"
    dollars, rest = divmod(micros, MICROS_PER_USD)
    if rest % MICROS_PER_CENT == 0:
        return f"${dollars:,}.{rest // MICROS_PER_CENT:02d}"
    return f"${dollars:,}.{rest:06d}".rstrip("0")


#: Significant figures of an amount read in passing ("$0.013", not "$0.013088").
_FIGURES = 2


def money(micros: int) -> str:
    """Micro-dollars as a person reads them: "$0.013", "$0.15", "$1,234.57", "0.28¢".

    Two significant figures, never coarser than the cent (a dollar amount keeps its
    cents); under a cent, in cents. Half rounds up."""
    if micros < 0:
        return f"-{money(-micros)}"
    if micros == 0:
        return "$0.00"
    amount = _rounded(Decimal(micros) / MICROS_PER_USD)
    if amount < Decimal("0.01"):
        return f"{(amount * 100).normalize():f}¢"
    whole, cents = f"{amount:,f}".split(".")
    # "$0.050" says no more than "$0.05": zeros past the cent are dropped
    return f"${whole}.{cents[:2]}{cents[2:].rstrip('0')}"


def _rounded(amount: Decimal) -> Decimal:
    """`amount` to two significant figures or to the cent, whichever keeps more."""
    places = max(2, _FIGURES - 1 - amount.adjusted())
    rounded = amount.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
    # Rounding up may add a digit (0.0099 to 0.010): round once more at the new size.
    places = max(2, _FIGURES - 1 - rounded.adjusted())
    return rounded.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
