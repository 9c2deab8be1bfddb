"""List+watch of one resource kind: resourceVersion, bookmarks, relist on 410, reconnect backoff.

Each event reaches ``on_event(kind, obj, initial)`` as a plain dict; ``initial`` marks objects
from a (re)list, which the sources treat like ADDED (S4.1.2). Objects that vanished between two
lists are reported as DELETED so nothing is missed across a 410: with their last metadata only
(no spec or status), since the watcher keeps no second copy of each object beside the router's.
Lists are read in pages of ``LIST_PAGE_SIZE`` so a relist at thousands of objects never holds
the whole list in memory at once.

What the watcher keeps per object is one tuple (``Tombstone``), sharing its strings with the
previous one for the object and, for namespaces, apiVersion and kind, with all others: at 5,000
HikyoSecrets two dicts per object cost ~2 MiB more (issue 13, S9.6).
"""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kubernetes import client, watch

log = logging.getLogger(__name__)

OnEvent = Callable[[str, dict[str, Any], bool], None]
# Short server-side timeouts let a stopped watcher (lost leadership) notice within a minute.
WATCH_TIMEOUT_SECONDS = 60
RECONNECT_MIN, RECONNECT_MAX = 0.5, 30.0
# A page of 500 HikyoSecrets parsed is ~6 MiB of dicts (managedFields, conditions), held while
# each item is routed; 100 keeps that transient near 1 MiB for a few more LIST requests.
LIST_PAGE_SIZE = 100


@dataclass(frozen=True)
class Resource:
    """What to list and watch: a list function of the official client plus its arguments."""

    description: str  # for logs, e.g. "hikyosecrets in all namespaces"
    list_fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    # Only objects it keeps reach the handler or the watcher's memory (a shard leader's own,
    # S4.1.8: the apiserver cannot select by a hash). None keeps every object.
    keep: Callable[[dict[str, Any]], bool] | None = None


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
        self.known: dict[str, Tombstone] = {}  # uid -> the last object seen, reduced
        self.synced = threading.Event()  # set after the first complete list
        self.relists = 0
        # True while a list's pages are handed out: they come in name order, not creation
        # order, so an index built from events is not in creation order until the list ends.
        self.listing = False

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
        self.listing = True
        try:
            return self._list_all()
        finally:
            self.listing = False

    def _list_all(self) -> str:
        seen: dict[str, Tombstone] = {}
        continue_token: str | None = None
        while True:
            paging: dict[str, Any] = {"limit": self.page_size}
            if continue_token:
                paging["_continue"] = continue_token
            listed = self.resource.list_fn(*self.resource.args, _preload_content=False, **paging)
            body = _json(listed)
            kind = body.get("kind", "").removesuffix("List")
            keep = self.resource.keep
            for item in body.get("items") or []:
                if keep is not None and not keep(item):
                    continue
                item.setdefault("kind", kind)
                uid = item["metadata"]["uid"]
                remembered = Tombstone.of(item, self.known.get(uid))
                seen[uid] = remembered
                self.on_event("ADDED", item, True)
            metadata = body["metadata"]
            continue_token = metadata.get("continue")
            if not continue_token:
                break  # the last page's resourceVersion is the whole list's (one snapshot)
        for uid, gone in list(self.known.items()):
            if uid not in seen:
                self.on_event("DELETED", gone.as_object(), True)
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
                if self.resource.keep is not None and not self.resource.keep(obj):
                    continue
                uid = obj["metadata"]["uid"]
                if kind == "DELETED":
                    self.known.pop(uid, None)
                else:
                    self.known[uid] = Tombstone.of(obj, self.known.get(uid))
                self.on_event(kind, obj, False)
        finally:
            stream.stop()
        return resource_version


TOMBSTONE_METADATA = ("name", "namespace", "uid", "resourceVersion", "annotations")
_ABSENT: Any = object()  # a field the object did not have


def _interned(value: Any) -> Any:
    # A few distinct values repeated across objects: a parsed list holds a copy per object.
    return sys.intern(value) if type(value) is str else value


def _same(value: Any, previous: Any) -> Any:
    """``previous`` when equal: its string is the one the router's key already holds."""
    return previous if value == previous else value


class Tombstone(NamedTuple):
    """What a DELETED event for a vanished object carries: kind, apiVersion and the metadata
    the routers read (names, uid, annotations), never spec, status or managedFields."""

    name: Any
    namespace: Any
    uid: Any
    resource_version: Any
    annotations: Any
    api_version: Any
    kind: Any

    @classmethod
    def of(cls, obj: dict[str, Any], previous: Tombstone | None = None) -> Tombstone:
        metadata = obj["metadata"]
        name, uid = metadata.get("name", _ABSENT), metadata.get("uid", _ABSENT)
        if previous is not None:
            name, uid = _same(name, previous.name), _same(uid, previous.uid)
        return cls(
            name,
            _interned(metadata.get("namespace", _ABSENT)),
            uid,
            metadata.get("resourceVersion", _ABSENT),
            metadata.get("annotations", _ABSENT),
            _interned(obj.get("apiVersion", _ABSENT)),
            _interned(obj.get("kind", _ABSENT)),
        )

    def as_object(self) -> dict[str, Any]:
        """The tombstone as the object dict a DELETED event hands to ``on_event``."""
        values = (self.name, self.namespace, self.uid, self.resource_version, self.annotations)
        kept: dict[str, Any] = {
            "metadata": {
                k: v for k, v in zip(TOMBSTONE_METADATA, values, strict=True) if v is not _ABSENT
            }
        }
        for field, value in (("apiVersion", self.api_version), ("kind", self.kind)):
            if value is not _ABSENT:
                kept[field] = value
        return kept


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data)


def _describe(error: BaseException) -> str:
    """Status or class only: an ApiException's text would carry the response body."""
    status = getattr(error, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '')}".strip()
    return type(error).__name__
