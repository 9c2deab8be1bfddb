"""List+watch of one resource kind: resourceVersion, bookmarks, relist on 410, reconnect backoff.

Each event reaches ``on_event(kind, obj, initial)`` as a plain dict; ``initial`` marks objects
from a (re)list, which the sources treat like ADDED (S4.1.2). Objects that vanished between two
lists are reported as DELETED so nothing is missed across a 410: with their last metadata only
(no spec or status), since the watcher keeps no second copy of each object beside the router's.
Lists are read in pages of ``LIST_PAGE_SIZE`` so a relist at thousands of objects never holds
the whole list in memory at once.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch

log = logging.getLogger(__name__)

OnEvent = Callable[[str, dict[str, Any], bool], None]
# Short server-side timeouts let a stopped watcher (lost leadership) notice within a minute.
WATCH_TIMEOUT_SECONDS = 60
RECONNECT_MIN, RECONNECT_MAX = 0.5, 30.0
LIST_PAGE_SIZE = 500


@dataclass(frozen=True)
class Resource:
    """What to list and watch: a list function of the official client plus its arguments."""

    description: str  # for logs, e.g. "hikyosecrets in all namespaces"
    list_fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


class Gone410(Exception):  # the watch resourceVersion is too old
    pass


class Watcher(threading.Thread):
    """Keeps ``on_event`` informed about one resource until ``stop`` is set."""

    def __init__(
        self,
        api_client: client.ApiClient,
        resource: Resource,
        on_event: OnEvent,
        stop: threading.Event,
        *,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        super().__init__(name=f"watch {resource.description}", daemon=True)
        self.api_client = api_client
        self.resource = resource
        self.on_event = on_event
        self.stop_event = stop
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        self.known: dict[str, dict[str, Any]] = {}  # uid -> tombstone(last object seen)
        self.synced = threading.Event()  # set after the first complete list
        self.relists = 0

    def run(self) -> None:
        delay = RECONNECT_MIN
        resource_version: str | None = None
        while not self.stop_event.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                resource_version = self._watch(resource_version)
                delay = RECONNECT_MIN
            except Gone410:
                log.info("%s: resourceVersion expired, relisting", self.resource.description)
                resource_version = None
            except Exception as error:  # API down, store down (on_event), anything: retry
                if self.stop_event.is_set():
                    return  # stopped meanwhile (leadership ended, shutdown): nothing to say
                status = getattr(error, "status", None)
                if status == 410:
                    resource_version = None
                    continue
                log.warning(
                    "%s: watch failed (%s); relisting in %.1f s",
                    self.resource.description,
                    _describe(error),
                    delay,
                )
                if self.stop_event.wait(delay * random.uniform(0.8, 1.2)):
                    return
                delay = min(delay * 2, RECONNECT_MAX)
                resource_version = None  # relist: we may have missed events

    def _relist(self) -> str:
        seen: dict[str, dict[str, Any]] = {}
        continue_token: str | None = None
        while True:
            paging: dict[str, Any] = {"limit": self.page_size}
            if continue_token:
                paging["_continue"] = continue_token
            listed = self.resource.list_fn(*self.resource.args, _preload_content=False, **paging)
            body = _json(listed)
            kind = body.get("kind", "").removesuffix("List")
            for item in body.get("items") or []:
                item.setdefault("kind", kind)
                seen[item["metadata"]["uid"]] = tombstone(item)
                self.on_event("ADDED", item, True)
            metadata = body["metadata"]
            continue_token = metadata.get("continue")
            if not continue_token:
                break  # the last page's resourceVersion is the whole list's (one snapshot)
        for uid, gone in list(self.known.items()):
            if uid not in seen:
                self.on_event("DELETED", gone, True)
        self.known = seen
        self.relists += 1
        self.synced.set()
        return metadata["resourceVersion"]

    def _watch(self, resource_version: str) -> str:
        # Events are read raw: "object" skips building a model per event (a Deployment's is a
        # deep tree), and only raw_object is used.
        stream = watch.Watch(return_type="object")
        try:
            for event in stream.stream(
                self.resource.list_fn,
                *self.resource.args,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.timeout_seconds,
                _request_timeout=self.timeout_seconds + 30,
            ):
                if self.stop_event.is_set():
                    break  # no events after a stop: a new leader term has its own watchers
                kind = event["type"]
                obj = event["raw_object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone410()
                    raise ValueError(f"watch error {obj.get('code')} {obj.get('reason')}")
                resource_version = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                uid = obj["metadata"]["uid"]
                if kind == "DELETED":
                    self.known.pop(uid, None)
                else:
                    self.known[uid] = tombstone(obj)
                self.on_event(kind, obj, False)
        finally:
            stream.stop()
        return resource_version


TOMBSTONE_METADATA = ("name", "namespace", "uid", "resourceVersion", "annotations")


def tombstone(obj: dict[str, Any]) -> dict[str, Any]:
    """What a DELETED event for a vanished object carries: kind, apiVersion and the metadata
    the routers read (names, uid, annotations), never spec, status or managedFields."""
    metadata = {k: obj["metadata"][k] for k in TOMBSTONE_METADATA if k in obj["metadata"]}
    kept = {"metadata": metadata}
    for field in ("apiVersion", "kind"):
        if field in obj:
            kept[field] = obj[field]
    return kept


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data)


def _describe(error: BaseException) -> str:
    """Status or class only: an ApiException's text would carry the response body."""
    status = getattr(error, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '')}".strip()
    return type(error).__name__
