"""Shared request/response building blocks: safe string types and keyset pagination."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Generic, TypeVar

from psycopg import sql
from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from .errors import ApiError

T = TypeVar("T")


def _storable(value: str) -> str:
    # PostgreSQL text cannot hold NUL, and lone surrogates cannot be encoded as UTF-8.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 text") from exc
    return value


NO_NUL = r"^[^\x00]*$"

# A DNS-label style name used for tenants, projects, service accounts, instances, hosts.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
Text = Annotated[str, StringConstraints(max_length=2000, pattern=NO_NUL), AfterValidator(_storable)]
ShortText = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=NO_NUL), AfterValidator(_storable)
]
Reason = Annotated[
    str, StringConstraints(min_length=1, max_length=1000, pattern=NO_NUL), AfterValidator(_storable)
]
Token = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._\-]{1,200}$")]
Limit = Annotated[int, Field(ge=1, le=500)]


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        default=None, description="opaque; pass as `cursor` to get the next page, null on the last page"
    )


Cursor = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-=]{1,64}$")]


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{seq}".encode()).decode()


def decode_cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        kind, _, raw = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        value = int(raw)
        if kind != "v1" or not 0 <= value < 2**63:
            raise ValueError(cursor)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_cursor", "cursor is not one this service issued") from exc
    return value


def keyset_page(conn, table: str, cursor: str | None, limit: int, **equal) -> dict:
    """One page of `table` in seq order after the cursor, filtered by column = value pairs, as the
    response body of a list route ({"items", "next_cursor"})."""
    where = [sql.SQL("{} = %s").format(sql.Identifier(column)) for column in equal]
    query = sql.SQL("SELECT * FROM {} WHERE {} seq > %s ORDER BY seq LIMIT %s").format(
        sql.Identifier(table), sql.SQL("").join(w + sql.SQL(" AND ") for w in where))
    rows = conn.execute(query, (*equal.values(), decode_cursor(cursor) or 0, limit + 1)).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


def page_of(rows: list[dict], limit: int, key: str = "seq") -> tuple[list[dict], str | None]:
    """Rows were fetched with LIMIT limit+1: the extra row says whether another page exists."""
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, encode_cursor(rows[-1][key])
    return rows, None
