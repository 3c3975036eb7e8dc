"""Template helpers for the catalog: times people can read (and check), and the verdict words."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()

VERDICT_WORDS = {"pass": "passing", "warn": "warnings", "fail": "failing", "error": "error",
                 "sleeping": "sleeping", "unvalidated": "not validated", "": "not validated"}


@register.simple_tag
def when(moment: datetime | None, fallback: str = "never") -> str:
    """`<time>` with the relative time as text and the absolute one, in UTC with its zone, on hover."""
    if moment is None:
        return fallback
    utc = moment.astimezone(dt_timezone.utc) if timezone.is_aware(moment) else moment
    return format_html('<time datetime="{}" title="{}">{}</time>', utc.isoformat(),
                       utc.strftime("%Y-%m-%d %H:%M UTC"), naturaltime(moment))


@register.simple_tag
def utc(moment: datetime | None) -> str:
    """An absolute time in UTC, with the zone written out."""
    if moment is None:
        return "—"
    utc_moment = moment.astimezone(dt_timezone.utc) if timezone.is_aware(moment) else moment
    return format_html('<time datetime="{}">{}</time>', utc_moment.isoformat(), utc_moment.strftime("%Y-%m-%d %H:%M UTC"))


@register.filter
def verdict_word(outcome: str | None) -> str:
    return VERDICT_WORDS.get(outcome or "", outcome or "")


@register.filter
def ms(value: float | None) -> str:
    """A latency in milliseconds, to a sensible precision."""
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


@register.filter
def short(sha: str | None) -> str:
    return (sha or "")[:12]
