"""Times and durations as the pages and error messages write them."""

from datetime import datetime

from django.utils import timezone


def clock(moment: datetime | None) -> str:
    """A time of day in the dashboard's time zone: `12:03:04 UTC`."""
    return timezone.localtime(moment).strftime("%H:%M:%S %Z") if moment else "never"


def duration(seconds: float) -> str:
    """`45 s`, `1 min 12 s`, `5 min`, `1 h 30 min`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {seconds} s" if seconds else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")
