"""The worker-id lease of :class:`~memstore.MemoryStore` and
:class:`~memstore.aio.AsyncMemoryStore`, decided once: claiming, renewing and releasing it as
sans-I/O steps (see :mod:`memstore.store_writes`), the lease's state, and issuing ids under
it (with the retry policy for a taken id or a lapsed lease). The stores drive the steps and
keep only their heartbeat (a daemon thread, an asyncio task)."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from memstore.core.leases import HeldLease, id_floor
from memstore.core.plans import ID_COLLISION_RETRIES
from memstore.errors import IdCollisionError, StorageError, WorkerLeaseLostError
from memstore.ids import SnowflakeGenerator
from memstore.store_base import StoreBase
from memstore.store_steps import EngineCalls, Steps

logger = logging.getLogger("memstore")


class StoreLeases(StoreBase):
    """The lease steps and state both stores share."""

    if TYPE_CHECKING:  # what the stores provide
        _calls: EngineCalls

        def _start_heartbeat(self) -> Any:
            """Start renewing the lease in the background (unless already running)."""

        def _end_heartbeat(self) -> Any:
            """Stop the background renewals, waiting for one in flight."""

    def _claim_steps(self) -> Steps[SnowflakeGenerator]:
        """The generator, after renewing the held lease (which may have lapsed) or claiming a
        free id; run under the store's lease lock once :meth:`_usable_generator` found none.

        Raises :class:`~memstore.errors.WorkerLeaseLostError` when a held lease can be neither
        renewed nor replaced, :class:`~memstore.errors.WorkerIdsExhaustedError` when no id is
        free, :class:`~memstore.errors.StorageError` when the first claim fails.
        """
        lease = self._own_lease()
        ttl = self.settings.worker_lease_seconds
        if lease is not None:
            sent_at = time.monotonic()
            try:
                kept = yield lambda: self._calls.renew(
                    lease.worker_id, lease.epoch, ttl, self._last_issued_ms()
                )
            except StorageError as error:
                raise self._lease_lost(lease, error) from error
            generator = self._renewed_before_issuing(lease, kept, sent_at)
            if generator is not None:
                return generator
        sent_at = time.monotonic()
        claimed = yield lambda: self._calls.claim(ttl)
        with self._lease_lock:  # reentrant: the sync store claims under it already
            self._take_lease(claimed.worker_id, claimed.epoch, claimed.last_ms, sent_at)
        yield self._start_heartbeat
        assert self._ids is not None
        return self._ids

    def _renewal_steps(self) -> Steps[None]:
        """One heartbeat: renew the held lease; forget it if another process claimed it."""
        lease = self._own_lease()
        if lease is None:
            return
        sent_at = time.monotonic()
        try:
            kept = yield lambda: self._calls.renew(
                lease.worker_id,
                lease.epoch,
                self.settings.worker_lease_seconds,
                self._last_issued_ms(),
            )
        except StorageError as error:
            logger.warning("memstore: worker lease renewal failed (%s)", error.kind)
            return
        self._apply_background_renewal(lease, kept, sent_at)

    def _release_steps(self) -> Steps[None]:
        """End the heartbeat, then release the lease held (a failure is logged: the lease
        expires ``worker_lease_seconds`` after its last renewal)."""
        yield self._end_heartbeat
        with self._lease_lock:
            lease = self._own_lease()
            self._lease = None
        if lease is None:
            return
        try:
            yield lambda: self._calls.release(lease.worker_id, lease.epoch, self._last_issued_ms())
        except StorageError as error:
            logger.warning("memstore: worker lease release failed (%s)", error.kind)

    @property
    def worker_id(self) -> int | None:
        """The snowflake worker id this store issues ids with: the fixed one, or the one it
        leased (``None`` while a leasing store holds none yet: it leases on its first write;
        ``migrate()``, reads and ``health()`` claim no lease)."""
        if not self._leasing:
            return self._fixed_worker_id
        lease = self._lease
        return None if lease is None else lease.worker_id

    def _take_lease(self, worker_id: int, epoch: int, last_ms: int, sent_at: float) -> None:
        """Start issuing ids on a lease just claimed (call with ``_lease_lock`` held)."""
        self._ids = SnowflakeGenerator(
            worker_id,
            max_backwards_wait_ms=self.settings.clock_backwards_max_wait_ms,
            clock=self._id_clock,
            start_after=id_floor(worker_id, last_ms),
        )
        self._lease = HeldLease(worker_id, epoch, sent_at, self.settings.worker_lease_seconds)
        self._lease_pid = os.getpid()

    def _own_lease(self) -> HeldLease | None:
        """The lease this process claimed; a lease inherited across ``fork`` is forgotten (the
        parent still holds it and renews it)."""
        lease = self._lease
        if lease is not None and self._lease_pid != os.getpid():
            self._lease = lease = None
        return lease

    def _usable_generator(self) -> SnowflakeGenerator | None:
        """The generator when ids may be issued right now without touching the database."""
        if not self._leasing:
            return self._ids
        lease = self._own_lease()
        if lease is not None and lease.usable(time.monotonic()):
            return self._ids
        return None

    def _last_issued_ms(self) -> int:
        return 0 if self._ids is None else self._ids.last_ms

    def _renewed_before_issuing(
        self, lease: HeldLease, kept: bool, sent_at: float
    ) -> SnowflakeGenerator | None:
        """Apply a renewal made before issuing ids: the generator when ``lease`` was kept,
        else ``None`` (another process holds the id now: lease another one)."""
        if not kept:
            self._lease = None
            return None
        self._lease = lease.renewed(sent_at)
        self._metrics.incr("lease_renewals")
        assert self._ids is not None
        return self._ids

    @staticmethod
    def _lease_lost(lease: HeldLease, error: StorageError) -> WorkerLeaseLostError:
        """The error when a lease that may have lapsed could not be renewed."""
        return WorkerLeaseLostError(
            f"worker id {lease.worker_id}: the lease may have lapsed and could not "
            f"be renewed ({error.kind or 'database error'}); no id was issued"
        )

    def _apply_background_renewal(self, lease: HeldLease, kept: bool, sent_at: float) -> None:
        """Apply a heartbeat's renewal of ``lease``, unless the store holds another lease by
        now; a lease another process claimed meanwhile is forgotten."""
        with self._lease_lock:
            current = self._lease
            if current is not None and (current.worker_id, current.epoch) == (
                lease.worker_id,
                lease.epoch,
            ):
                self._lease = current.renewed(sent_at) if kept else None
        if kept:
            self._metrics.incr("lease_renewals")

    def _issue_ids(self, count: int, above: int) -> list[int]:
        """``count`` fresh ids above ``above`` (the app's newest id, read in the write's
        transaction)."""
        generator = self._usable_generator()
        if generator is None:
            raise WorkerLeaseLostError(
                "no usable worker-id lease: the lease may have lapsed; no id was issued"
            )
        return generator.next_ids(count, above=above)

    def _retry_write(self, attempt: int, error: IdCollisionError | WorkerLeaseLostError) -> None:
        """After attempt ``attempt`` of a write's transaction failed with ``error``: return to
        retry it (ids taken by another process: fresh ids; the lease lapsed inside the
        transaction: renewed first), or raise ``error`` once the retries are used up."""
        if isinstance(error, IdCollisionError):
            self._id_collided(attempt, error)
        else:
            self._lease_lapsed(attempt, error)

    def _lease_lapsed(self, attempt: int, error: WorkerLeaseLostError) -> None:
        """Called when the lease lapsed between renewing it and issuing ids (a pause inside
        the write's transaction, which rolled back): retry, renewing first, or give up. Ids
        are never issued, and a lease never renewed, inside a write's transaction."""
        if attempt >= ID_COLLISION_RETRIES:
            raise error
        logger.warning("memstore: the worker-id lease lapsed during a write; renewing, retrying")

    def _id_collided(self, attempt: int, error: IdCollisionError) -> None:
        """Called when attempt ``attempt`` of a write hit a taken id: retry, or give up."""
        self._metrics.incr("id_collisions")
        if attempt >= ID_COLLISION_RETRIES:
            raise error
        logger.warning(
            "memstore: snowflake id collision (another process uses worker id %s?); "
            "retrying with fresh ids",
            self.worker_id,
        )
