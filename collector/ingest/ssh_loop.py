"""The one asyncio loop that every SSH host's operations run on, in a daemon thread; sync callers wait on
its futures with a timeout (a stalled network fails the wait, never hangs the caller)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading

log = logging.getLogger("collector.ingest.remote")


class Loop:
    """One asyncio loop in a daemon thread, shared by every host."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def submit(cls, coro) -> concurrent.futures.Future:
        """Start `coro` on the loop; its future."""
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                cls._loop.set_exception_handler(_leftovers_of_a_dropped_link)
                threading.Thread(target=cls._loop.run_forever, name="ssh-loop", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(_quiet_when_cancelled(coro), cls._loop)

    @classmethod
    def run(cls, coro, timeout: float):
        """`coro`'s result; TimeoutError (and `coro` cancelled) when it takes longer than `timeout`."""
        future = cls.submit(coro)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


async def _quiet_when_cancelled(coro):
    """`coro`, whose failure after its caller gave up on it (cancelled it) ends it as cancelled: a file
    closed over a link that died meanwhile is no news, not an "exception never retrieved" in the log."""
    try:
        return await coro
    except Exception:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        raise


def _leftovers_of_a_dropped_link(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """asyncssh's own helper tasks of a read given up on (a stall) fail when the link is dropped, and no one
    awaits them: that is the drop already reported (the host's state says it), kept out of the log."""
    import asyncssh

    if isinstance(context.get("exception"), asyncssh.Error | OSError | EOFError):
        log.debug("after a dropped link: %s", context.get("message"))
        return
    loop.default_exception_handler(context)
