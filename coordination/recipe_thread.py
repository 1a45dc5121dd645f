"""The thread a recipe makes its ZooKeeper requests on, fed by a queue of events.

kazoo calls state listeners and watches on its own threads, which must never block, and
callers (a consumer's rebalance callback, a signal handler) must not wait for ZooKeeper
either. So each recipe here (``coordination.shard_ownership``,
``coordination.executors``) has one thread of its own: the others only put an item on a
queue (a SimpleQueue, whose put() is safe in signal handlers), and the recipe's thread
takes the items in order, then does what is due, and makes every request.
"""

from __future__ import annotations

import logging
import queue
import threading

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import KazooState, WatchedEvent

from .requests import wait_for

logger = logging.getLogger(__name__)

SYNC = "SYNC"  # queue item: something watched changed
_STOP = "STOP"  # queue item: stop() was called


class RecipeThread:
    """A recipe's own thread: items from kazoo's threads and callers in, requests out.

    Subclasses say what an item does (``_handle``: a kazoo state, or ``SYNC`` from a watch
    or a caller), what is due after each batch of items (``_step``), how long to wait for
    the next item (``_idle_timeout``; ``_on_idle`` when it passed without one), and how to
    leave (``_shutdown``, always called on the thread as it ends).
    """

    stop_timeout = 10.0  # seconds stop() waits for the thread by default

    def __init__(self, client: KazooClient, *, thread_name: str) -> None:
        self._client = client
        self._thread_name = thread_name
        self._events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop_requested = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread and listen to the client's state; returns at once."""
        if self._thread is not None:
            raise RuntimeError(f"a {type(self).__name__} can be started only once")
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._client.add_listener(self._on_state)
        # The listener reports changes only; queue the current state too. If it changes in
        # between, CONNECTED is queued twice, which is harmless.
        if self._client.state == KazooState.CONNECTED:
            self._events.put(KazooState.CONNECTED)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the thread to shut down and wait ``timeout`` seconds (``stop_timeout`` if
        None) for it; True once it has finished. Idempotent; from any thread, a signal
        handler or the recipe's own callbacks."""
        self._stop_requested = True
        self._events.put(_STOP)
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return thread is None
        thread.join(self.stop_timeout if timeout is None else timeout)
        return not thread.is_alive()

    # -- other threads: never block, never touch the recipe's state ---------------------

    def _queue_sync(self) -> None:
        """Have the recipe thread handle ``SYNC``; from any thread."""
        self._events.put(SYNC)

    def _on_state(self, state: str) -> None:
        self._events.put(state)

    def _on_watch(self, event: WatchedEvent) -> None:
        self._queue_sync()

    # -- the recipe thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop_requested:
                for item in self._next_items():
                    if item == _STOP:
                        self._stop_requested = True
                    else:
                        self._handle(item)
                if self._stop_requested:
                    break
                self._step()
        except Exception:
            logger.exception("%s failed", self._thread_name, extra=self._log_extra())
        finally:
            self._shutdown()
            self._client.remove_listener(self._on_state)  # later items: nobody reads them

    def _next_items(self) -> list[str]:
        """Block until something happens or ``_idle_timeout()`` passes, then drain."""
        try:
            items = [self._events.get(timeout=self._idle_timeout())]
        except queue.Empty:
            self._on_idle()
            return []
        while True:
            try:
                items.append(self._events.get_nowait())
            except queue.Empty:
                return items

    def _zk(self, request: IAsyncResult):
        return wait_for(self._client, request)

    # -- what a recipe says --------------------------------------------------------------

    def _handle(self, item: str) -> None:
        raise NotImplementedError

    def _step(self) -> None:
        """After each batch of items, unless stopping: the requests that are due."""
        raise NotImplementedError

    def _idle_timeout(self) -> float | None:
        """Seconds to wait for the next item (None: until one comes)."""
        raise NotImplementedError

    def _on_idle(self) -> None:
        """``_idle_timeout()`` passed without an item."""

    def _shutdown(self) -> None:
        """The thread is ending (stop() or a failure): leave while it still can. The
        client's state is no longer queued after this."""

    def _log_extra(self) -> dict:
        return {}
