"""S4.1.8: keys another shard layout scheduled (before a change of the shard count) expire
nowhere else; shard 0 of the new layout deletes them once, an hour into its term (their
leaders are long gone by then, and their keys' runs settled)."""

from __future__ import annotations

import logging
import threading
from functools import partial

from k8s.errors import describe

from ..runtime import Runtime
from ..shards import ShardLayout, of_another_layout

log = logging.getLogger(__name__)

RETIRE_OTHER_LAYOUTS_AFTER_SECONDS = 3600.0


def retire_other_layouts(
    runtime: Runtime,
    layout: ShardLayout,
    leading: threading.Event,
    after: float = RETIRE_OTHER_LAYOUTS_AFTER_SECONDS,
) -> None:
    """Waits ``after`` seconds of this term (none if it ends first), then deletes the other
    layouts' keys from both Redis queues once."""
    if leading.wait(after):
        return
    from ..queue.redis import RedisQueue  # scaled mode only: embedded never imports redis

    for queue in (runtime.queue, runtime.reports):
        if not isinstance(queue, RedisQueue):
            continue
        try:
            gone = queue.retire(partial(of_another_layout, prefix=queue.prefix, layout=layout))
        except Exception as error:  # the next term tries again
            log.warning("retiring other shard layouts' keys failed: %s", describe(error))
            continue
        if gone:
            log.info("retired %d keys other shard layouts left under %s", gone, queue.prefix)
