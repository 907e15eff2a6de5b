"""Paging a pull subscription: `GET /v1/subscriptions/{id}/events`."""

from __future__ import annotations

import email.utils
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple


class ApiError(Exception):
    """An answer in the hub's error shape: `code`, `title`, `message`."""

    def __init__(self, code: int, title: str, message: str):
        super().__init__(f"{code} {title}: {message}")
        self.code = code
        self.title = title
        self.message = message


def retry_after_seconds(raw: Optional[str], ceiling: float = 30.0) -> float:
    """A Retry-After of seconds or an HTTP date; at least 0.1 s, at most `ceiling`."""
    wait = 1.0
    if raw:
        try:
            wait = float(raw.strip())
        except ValueError:
            try:
                wait = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError):
                wait = 1.0
    return min(max(wait, 0.1), ceiling)


_log = logging.getLogger("streaming_hub_receiver")
_WS = " \t\r\n"


def _value_end(text: str, i: int) -> int:
    """The index just past the JSON value that starts at text[i]: a scan, never a recursion,
    so no nesting depth can stop it."""
    n = len(text)
    if i < n and text[i] not in '[{"':
        while i < n and text[i] not in ",]}" + _WS:
            i += 1
        return i
    depth, in_string, escaped = 0, False, False
    while i < n:
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if depth == 0:
                    return i + 1
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("the page ends inside a value")


def _skip(text: str, i: int, also: str = "") -> int:
    while i < len(text) and (text[i] in _WS or text[i] in also):
        i += 1
    return i


def split_page(text: str) -> Tuple[List[str], Optional[int]]:
    """A page's items as raw JSON texts, and its next_cursor, found without parsing the items:
    so one item that no parser here can read does not make the whole page unreadable."""
    items: List[str] = []
    cursor: Optional[int] = None
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        raise ValueError("a page is a JSON object")
    i += 1
    while True:
        i = _skip(text, i, ",")
        if i >= len(text) or text[i] == "}":
            return items, cursor
        end = _value_end(text, i)
        key = json.loads(text[i:end])
        i = _skip(text, end)
        if text[i : i + 1] != ":":
            raise ValueError("a page member has no value")
        i = _skip(text, i + 1)
        end = _value_end(text, i)
        if key == "items" and text[i : i + 1] == "[":
            j = i + 1
            while True:
                j = _skip(text, j, ",")
                if j >= end - 1:
                    break
                item_end = _value_end(text, j)
                items.append(text[j:item_end])
                j = item_end
        elif key == "next_cursor":
            cursor = json.loads(text[i:end])
        i = end


def parse_page(raw: bytes) -> Dict[str, Any]:
    """A page as `{"items", "next_cursor", "unreadable"}`. An item no parser here can read (one
    nested too deep for Python, say) is not lost with its page: it is kept in `unreadable` as
    `{"index", "raw", "error"}`, where `index` is its place among the page's items."""
    try:
        page = json.loads(raw)
        page.setdefault("unreadable", [])
        return page
    except (ValueError, RecursionError):
        pass
    text = raw.decode("utf-8", "replace")
    texts, cursor = split_page(text)
    items: List[Dict[str, Any]] = []
    unreadable: List[Dict[str, Any]] = []
    for index, item in enumerate(texts):
        try:
            items.append(json.loads(item))
        except (ValueError, RecursionError) as e:
            unreadable.append({"index": index, "raw": item, "error": f"{type(e).__name__}: {e}"})
    return {"items": items, "next_cursor": cursor, "unreadable": unreadable}


def _log_unreadable(raw: str, error: str) -> None:
    _log.error("a pulled item could not be parsed (%s); its raw text is %d bytes", error, len(raw))


class PullConsumer:
    """Reads a pull subscription. Reading is the acknowledgement: a returned page moves the
    subscription's durable cursor past it, so store what a page holds before reading on."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        subscription_id: str,
        *,
        limit: Optional[int] = None,
        timeout: float = 30.0,
        max_wait: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.subscription_id = subscription_id
        self.limit = limit
        self.timeout = timeout
        self.max_wait = max_wait
        self._sleep = sleep
        self._next: Optional[int] = None

    def next_page(self) -> Dict[str, Any]:
        """One page, `{"items": [...], "next_cursor": int | None}`, waiting out 429 answers."""
        while True:
            query = {}
            if self._next is not None:
                query["after"] = str(self._next)
            if self.limit:
                query["limit"] = str(self.limit)
            url = f"{self.base_url}/v1/subscriptions/{urllib.parse.quote(self.subscription_id, safe='')}/events"
            if query:
                url += "?" + urllib.parse.urlencode(query)
            request = urllib.request.Request(
                url, headers={"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    page = parse_page(response.read())
            except urllib.error.HTTPError as e:
                body = e.read()
                if e.code == 429:
                    self._sleep(retry_after_seconds(e.headers.get("Retry-After"), self.max_wait))
                    continue
                try:
                    shape = json.loads(body)
                    raise ApiError(int(shape["code"]), str(shape["title"]), str(shape["message"])) from None
                except (ValueError, KeyError, TypeError):
                    raise ApiError(e.code, "unexpected_answer", body.decode("utf-8", "replace").strip()) from None
            self._next = page.get("next_cursor")
            return page

    def drain(
        self,
        handle: Callable[[Dict[str, Any]], None],
        on_unreadable: Optional[Callable[[str, str], None]] = None,
    ) -> int:
        """Reads pages until a short one (caught up), handing each event to `handle` in seq
        order; returns how many were read. An item that cannot be parsed goes, in its place, to
        `on_unreadable(raw_text, error)` (by default logged as an error), and the page goes on:
        reading acknowledged it, so nothing of a page is ever dropped."""
        unreadable_to = on_unreadable or _log_unreadable
        read = 0
        while True:
            page = self.next_page()
            items: List[Dict[str, Any]] = page.get("items", [])
            bad = {u["index"]: u for u in page.get("unreadable", [])}
            good = iter(items)
            for index in range(len(items) + len(bad)):
                read += 1
                if index in bad:
                    unreadable_to(bad[index]["raw"], bad[index]["error"])
                else:
                    handle(next(good))
            if page.get("next_cursor") is None:
                return read
