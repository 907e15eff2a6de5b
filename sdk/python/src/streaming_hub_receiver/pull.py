"""Paging a pull subscription: `GET /v1/subscriptions/{id}/events`."""

from __future__ import annotations

import email.utils
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional


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
                    page = json.loads(response.read())
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

    def drain(self, handle: Callable[[Dict[str, Any]], None]) -> int:
        """Reads pages until a short one (caught up), handing each event to `handle` in seq
        order; returns how many were read."""
        read = 0
        while True:
            page = self.next_page()
            items: List[Dict[str, Any]] = page.get("items", [])
            for event in items:
                read += 1
                handle(event)
            if page.get("next_cursor") is None:
                return read
