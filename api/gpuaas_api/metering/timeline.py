# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A member's live time from its status moves: the intervals it was live (one of the serving statuses, those in
which it holds its host for the instance) and their seconds per UTC hour. Pure functions over the moves the
timeline recorded (instances/service.py set_member_status appends one event per move)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from ..executor.plan import SERVING

HOUR = timedelta(hours=1)


def floor_hour(moment: datetime) -> datetime:
    """The start of the UTC hour holding `moment`."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def live_intervals(moves: Iterable[tuple[datetime, str]], until: datetime) -> list[tuple[datetime, datetime]]:
    """The [start, end) intervals before `until` in which the member was live. `moves`: (when, status it moved to),
    in the order they were recorded. A move's time is its transaction's start, so a move recorded after another
    may carry an earlier time: it counts from the later one (time never runs back)."""
    intervals: list[tuple[datetime, datetime]] = []
    since: datetime | None = None
    last: datetime | None = None
    for moment, status in moves:
        last = moment = moment if last is None else max(moment, last)
        if moment >= until:
            break
        if status in SERVING and since is None:
            since = moment
        elif status not in SERVING and since is not None:
            intervals.append((since, moment))
            since = None
    if since is not None:
        intervals.append((since, until))
    return intervals


def seconds_per_hour(intervals: Iterable[tuple[datetime, datetime]], start: datetime,
                     end: datetime) -> dict[datetime, int]:
    """Whole seconds live per UTC hour, for the hours from the one holding `start` to `end`, counting time before
    `end` only (the hour `end` falls in is counted up to it). Hours with no live time are left out."""
    totals: dict[datetime, timedelta] = {}
    for begin, finish in intervals:
        begin, finish = max(begin, floor_hour(start)), min(finish, end)
        hour = floor_hour(begin)
        while hour < finish:
            part = min(finish, hour + HOUR) - max(begin, hour)
            if part > timedelta(0):
                totals[hour] = totals.get(hour, timedelta(0)) + part
            hour += HOUR
    return {hour: int(total.total_seconds()) for hour, total in sorted(totals.items())
            if int(total.total_seconds()) > 0}
