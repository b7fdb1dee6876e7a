"""A LangGraph checkpointer on cairn: ``CairnSaver(store)``.

A LangGraph thread is a cairn session; every checkpoint, every batch of
pending writes and every deletion is one ``custom`` entry of that session
(``docs/FORMAT.md`` §4), appended at the leaf and fsynced before the call
returns. Nothing is ever rewritten: what a thread holds is a fold of its
records, rebuilt when the thread is first touched.

Mapping (the ``content`` of each ``custom`` entry; typed values are
``[type, base64 bytes]`` as the saver's serializer writes them):

``langgraph.checkpoint``
    ``{"ns", "id", "parent", "checkpoint": typed (without channel values),
    "metadata": typed, "values": {channel: blob}}``, where ``values`` holds
    only the channels in ``new_versions`` (a channel is stored only when its
    version changes), each blob one of ``{"v": version, "full": typed}``,
    ``{"v": version, "base": earlier version, "append": [typed, ...]}``
    (a list that grew by appending: only its new items) or
    ``{"v": version, "empty": true}``.
``langgraph.writes``
    ``{"ns", "checkpoint", "task", "path", "writes": [[idx, channel,
    typed], ...]}``.
``langgraph.deleted``
    ``{"checkpoints": [[ns, id], ...], "why": "delete_for_runs" | "prune"}``:
    those checkpoints and their writes are gone from every read.

The session of thread ``T`` has a fixed id derived from ``T`` (SHA-256, in
the session-id alphabet), so two processes resolve a thread to the same
session without a shared index, and creating it is atomic (the second
creator finds it). Its title is ``langgraph thread T``.

One writer per thread: the first saver to write a thread opens its session
for writing and keeps it until ``close()``; another saver (in this process
or another) gets :class:`ThreadBusy` on a write instead of forking the
history. Reading takes no lock: a saver that does not write a thread reads
a snapshot of what is durable, and if the thread changes between that read
and its first write (another worker ran it meanwhile: the stale write of a
cancelled or duplicated run), the write is refused with :class:`ThreadBusy`
too. Maintenance calls (``delete_for_runs``, ``prune``, ``copy_thread``)
hold a thread only while they run. ``delete_thread`` removes
the session; ``copy_thread`` forks it whole (``Store.fork``, atomic);
``prune`` and ``delete_for_runs`` append ``langgraph.deleted`` records
(the log is append-only: the bytes stay until the thread is deleted).

Channel values are treated as immutable, as LangGraph's reducers treat them:
an item changed in place after it was checkpointed is not noticed; replace it
(``add_messages`` replaces by id, which stores the list whole once).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import random
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Tuple, TypeVar, Union

if sys.version_info >= (3, 10):
    from typing import Concatenate, ParamSpec
else:
    from typing_extensions import Concatenate, ParamSpec

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import cairn

__all__ = ["CairnSaver", "ThreadBusy", "thread_session_id"]

NS_CHECKPOINT = "langgraph.checkpoint"
NS_WRITES = "langgraph.writes"
NS_DELETED = "langgraph.deleted"
TITLE_PREFIX = "langgraph thread "

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _in_thread(
    method: Callable[Concatenate[CairnSaver, _P], _R],
) -> Callable[Concatenate[CairnSaver, _P], Coroutine[Any, Any, _R]]:
    """The async side of a sync method: the method itself, run in a worker
    thread (``asyncio.to_thread``), so that an event loop never waits on a
    session's fsync."""

    async def in_thread(saver: CairnSaver, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(method, saver, *args, **kwargs)

    return in_thread


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


class ThreadBusy(cairn.CairnError):
    """Another saver (another process, or another handle) writes this thread."""


def thread_session_id(thread_id: str) -> str:
    """The id of the session that holds LangGraph thread ``thread_id``."""
    n = int.from_bytes(hashlib.sha256(b"langgraph-thread\0" + thread_id.encode()).digest()[:16], "big")
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


Typed = List[str]


class _Blob:
    __slots__ = ("full", "base", "append", "empty")

    def __init__(
        self,
        full: Optional[Typed] = None,
        base: Optional[str] = None,
        append: Optional[List[Typed]] = None,
        empty: bool = False,
    ) -> None:
        self.full = full
        self.base = base
        self.append = append
        self.empty = empty


class _Checkpoint:
    __slots__ = ("checkpoint", "metadata", "parent", "metadata_value")

    def __init__(self, checkpoint: Typed, metadata: Typed, parent: Optional[str]) -> None:
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.parent = parent
        self.metadata_value: Optional[Dict[str, Any]] = None


class _Thread:
    """One thread's fold: its checkpoints, blobs and writes by namespace."""

    def __init__(self, thread_id: str, session: cairn.Session) -> None:
        self.thread_id = thread_id
        self.session = session
        self.lock = threading.RLock()
        # ns -> checkpoint id -> checkpoint
        self.checkpoints: Dict[str, Dict[str, _Checkpoint]] = {}
        # (ns, channel, version) -> blob
        self.blobs: Dict[Tuple[str, str, str], _Blob] = {}
        # (ns, checkpoint id) -> (task id, idx) -> (task id, channel, typed, path)
        self.writes: Dict[Tuple[str, str], Dict[Tuple[str, int], Tuple[str, str, Typed, str]]] = {}
        # (ns, channel) -> (version, value as last stored): the base of the next delta
        self.latest: Dict[Tuple[str, str], Tuple[str, Any]] = {}
        # (ns, channel) -> the version stored last (its value is read on demand)
        self.last_version: Dict[Tuple[str, str], str] = {}

    def fold(self, content: Dict[str, Any], namespace: str) -> None:
        if namespace == NS_CHECKPOINT:
            ns = content["ns"]
            for ch, b in content["values"].items():
                version = str(b["v"])
                if b.get("empty"):
                    blob = _Blob(empty=True)
                elif "append" in b:
                    blob = _Blob(base=str(b["base"]), append=b["append"])
                else:
                    blob = _Blob(full=b["full"])
                self.blobs[(ns, ch, version)] = blob
                self.latest.pop((ns, ch), None)
                if blob.empty:
                    self.last_version.pop((ns, ch), None)
                else:
                    self.last_version[(ns, ch)] = version
            self.checkpoints.setdefault(ns, {})[content["id"]] = _Checkpoint(
                content["checkpoint"], content["metadata"], content["parent"]
            )
        elif namespace == NS_WRITES:
            key = (content["ns"], content["checkpoint"])
            stored = self.writes.setdefault(key, {})
            for idx, channel, typed in content["writes"]:
                stored[(content["task"], idx)] = (content["task"], channel, typed, content["path"])
        elif namespace == NS_DELETED:
            for ns, cid in content["checkpoints"]:
                self.checkpoints.get(ns, {}).pop(cid, None)
                self.writes.pop((ns, cid), None)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


class CairnSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps each thread as a cairn session.

    ``store`` is a cairn store location (a directory, ``sqlite:PATH``, …) or
    an open :class:`cairn.Store`. Sync and async methods are both supported;
    the async ones run the sync ones in a worker thread (cairn releases the
    GIL during I/O). Thread-safe. Call :meth:`close` (or use it as a context
    manager) to release the threads it writes.
    """

    def __init__(
        self,
        store: Union[str, "os.PathLike[str]", cairn.Store],
        *,
        serde: Optional[SerializerProtocol] = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store if isinstance(store, cairn.Store) else cairn.Store(store)
        self._threads: Dict[str, _Thread] = {}
        # thread id -> records its session had when this saver last read it
        # without holding it (1: no session yet, as a new one has its header)
        self._seen: Dict[str, int] = {}
        self._lock = threading.Lock()

    # -- threads -----------------------------------------------------------

    def _load(self, thread_id: str, session: cairn.Session) -> _Thread:
        th = _Thread(thread_id, session)
        for rec in session.records(1):
            if rec["kind"] != "custom":
                continue
            data = rec["data"]
            th.fold(data["content"], data["namespace"])
        return th

    def _thread(self, thread_id: str, *, create: bool, fresh: bool = True) -> Optional[_Thread]:
        """The thread's fold with its session open for writing (created when
        ``create``), or ``None`` when it does not exist. Raises ThreadBusy
        when another writer holds it, or (with ``fresh``) when another
        writer changed it since this saver read it: a write based on that
        read would fork the history."""
        with self._lock:
            th = self._threads.get(thread_id)
            if th is not None:
                return th
            sid = thread_session_id(thread_id)
            try:
                session = self.store.open(sid)
            except cairn.SessionNotFound:
                if not create:
                    return None
                try:
                    session = self.store.create(
                        id=sid,
                        title=TITLE_PREFIX + thread_id,
                    )
                except cairn.SessionExists:
                    session = self._open_writer(thread_id, sid)
            except cairn.SessionInUse as e:
                raise self._busy(thread_id, e) from e
            seen = self._seen.pop(thread_id, None)
            now = len(session)
            if fresh and seen is not None and now != seen:
                session.close()
                raise ThreadBusy(
                    f"LangGraph thread {thread_id!r} changed since this saver read it (another "
                    f"worker wrote {now - seen} records): one writer per thread, so a write "
                    "based on that read is refused instead of forking the history; read the thread "
                    "again (run the graph again) to continue from its latest state"
                )
            th = self._load(thread_id, session)
            self._threads[thread_id] = th
            return th

    def _writer(self, thread_id: str) -> _Thread:
        th = self._thread(thread_id, create=True)
        if th is None:  # create=True always gives a thread
            raise cairn.CairnError(f"LangGraph thread {thread_id!r} could not be created")
        return th

    def _open_writer(self, thread_id: str, sid: str) -> cairn.Session:
        try:
            return self.store.open(sid)
        except cairn.SessionInUse as e:
            raise self._busy(thread_id, e) from e

    @staticmethod
    def _busy(thread_id: str, e: Exception) -> ThreadBusy:
        return ThreadBusy(
            f"LangGraph thread {thread_id!r} is written by another saver ({e}); one writer per "
            "thread: run it on the worker that holds it, or close() that saver first"
        )

    def _reader(self, thread_id: str) -> Optional[_Thread]:
        """The thread for reading: this saver's own when it writes it, else a
        snapshot of what is durable (taking no lock, so reading a thread
        never keeps another worker from writing it)."""
        with self._lock:
            th = self._threads.get(thread_id)
            if th is not None:
                return th
            try:
                session = self.store.open(thread_session_id(thread_id), write=False)
            except cairn.SessionNotFound:
                self._seen[thread_id] = 1
                return None
            try:
                th = self._load(thread_id, session)
                self._seen[thread_id] = len(session)
                return th
            finally:
                session.close()

    @contextmanager
    def _borrowed(self, thread_id: str) -> Iterator[Optional[_Thread]]:
        """The thread opened for writing for one maintenance call, released
        after it unless this saver already held it."""
        with self._lock:
            held = thread_id in self._threads
        th = self._thread(thread_id, create=False, fresh=False)
        try:
            yield th
        finally:
            if th is not None and not held:
                with self._lock:
                    self._threads.pop(thread_id, None)
                th.session.close()

    def _thread_ids(self) -> List[str]:
        ids = []
        for summary in self.store.list():
            title = summary.get("title") or ""
            if title.startswith(TITLE_PREFIX):
                tid = title[len(TITLE_PREFIX) :]
                if thread_session_id(tid) == summary["id"]:
                    ids.append(tid)
        return ids

    def close(self) -> None:
        """Releases every thread this saver writes."""
        with self._lock:
            for th in self._threads.values():
                th.session.close()
            self._threads.clear()

    def __enter__(self) -> "CairnSaver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- values ------------------------------------------------------------

    def _dump(self, value: Any) -> Typed:
        t, b = self.serde.dumps_typed(value)
        return [t, _b64(b)]

    def _load_typed(self, typed: Typed) -> Any:
        return self.serde.loads_typed((typed[0], base64.b64decode(typed[1])))

    def _value(self, th: _Thread, ns: str, channel: str, version: str) -> Tuple[bool, Any]:
        """(present, value) of a channel at a version."""
        latest = th.latest.get((ns, channel))
        if latest is not None and latest[0] == version:
            v = latest[1]
            return True, (list(v) if isinstance(v, list) else self._copy(v))
        chain: List[_Blob] = []
        v = version
        while True:
            blob = th.blobs.get((ns, channel, v))
            if blob is None:
                if chain:
                    raise cairn.ReadError(
                        f"thread {th.thread_id!r}: channel {channel!r} version {v} is missing "
                        "(a stored delta names a base that was never stored)"
                    )
                return False, None
            chain.append(blob)
            if blob.base is None:
                break
            v = blob.base
        root = chain[-1]
        if root.empty:
            return False, None
        value = self._load_typed(root.full) if root.full is not None else []
        for blob in reversed(chain[:-1]):
            value = list(value) + [self._load_typed(t) for t in blob.append or []]
        if th.last_version.get((ns, channel)) == version:
            # The next delta's base: read once, kept (a list as a copy).
            th.latest[(ns, channel)] = (version, list(value) if isinstance(value, list) else value)
            if isinstance(value, list):
                return True, list(value)
            return True, self._copy(value)
        return True, value

    def _base(self, th: _Thread, ns: str, channel: str) -> Optional[Tuple[str, Any]]:
        """The version stored last for a channel and its value: what the next
        value of the channel is compared with."""
        base = th.latest.get((ns, channel))
        if base is None and (ns, channel) in th.last_version:
            self._value(th, ns, channel, th.last_version[(ns, channel)])
            base = th.latest.get((ns, channel))
        return base

    def _copy(self, v: Any) -> Any:
        # Non-list values are handed out fresh each time, as if read from disk.
        return self._load_typed(self._dump(v))

    def _tuple(self, th: _Thread, ns: str, cid: str, cp: _Checkpoint) -> CheckpointTuple:
        checkpoint: Checkpoint = self._load_typed(cp.checkpoint)
        values: Dict[str, Any] = {}
        for ch, ver in checkpoint["channel_versions"].items():
            present, value = self._value(th, ns, ch, str(ver))
            if present:
                values[ch] = value
        writes = th.writes.get((ns, cid), {})
        pending = [
            (w[0], w[1], self._load_typed(w[2]))
            for k, w in sorted(writes.items(), key=lambda kw: writes_sort_key(kw[1][3], *kw[0]))
        ]
        return CheckpointTuple(
            config={"configurable": {"thread_id": th.thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self._metadata(cp),
            parent_config=(
                {"configurable": {"thread_id": th.thread_id, "checkpoint_ns": ns, "checkpoint_id": cp.parent}}
                if cp.parent
                else None
            ),
            pending_writes=pending,
        )

    def _metadata(self, cp: _Checkpoint) -> Any:
        return self._load_typed(cp.metadata)

    # -- BaseCheckpointSaver -----------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        conf = config["configurable"]
        th = self._reader(str(conf["thread_id"]))
        if th is None:
            return None
        ns = conf.get("checkpoint_ns", "")
        with th.lock:
            cps = th.checkpoints.get(ns)
            if not cps:
                return None
            cid = get_checkpoint_id(config)
            if cid:
                cp = cps.get(cid)
                if cp is None:
                    return None
            else:
                cid = max(cps)
                cp = cps[cid]
            return self._tuple(th, ns, cid, cp)

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        if config is not None:
            thread_ids = [str(config["configurable"]["thread_id"])]
            ns_filter = config["configurable"].get("checkpoint_ns")
            id_filter = get_checkpoint_id(config)
        else:
            thread_ids = self._thread_ids()
            ns_filter = None
            id_filter = None
        before_id = get_checkpoint_id(before) if before else None
        for tid in thread_ids:
            th = self._reader(tid)
            if th is None:
                continue
            with th.lock:
                found = [
                    (cid, ns, cp)
                    for ns, cps in th.checkpoints.items()
                    if ns_filter is None or ns == ns_filter
                    for cid, cp in cps.items()
                    if (id_filter is None or cid == id_filter) and (before_id is None or cid < before_id)
                ]
                found.sort(key=lambda x: x[0], reverse=True)
                out = []
                for cid, ns, cp in found:
                    if limit is not None and limit <= 0:
                        break
                    if filter:
                        md = self._metadata(cp)
                        if not all(md.get(k) == v for k, v in filter.items()):
                            continue
                    if limit is not None:
                        limit -= 1
                    out.append(self._tuple(th, ns, cid, cp))
            yield from out
            if limit is not None and limit <= 0:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        th = self._writer(thread_id)
        c: Dict[str, Any] = dict(checkpoint)
        values: Dict[str, Any] = c.pop("channel_values")
        with th.lock:
            stored: Dict[str, Dict[str, Any]] = {}
            latest: Dict[Tuple[str, str], Tuple[str, Any]] = {}
            for ch, ver in new_versions.items():
                version = str(ver)
                if ch not in values:
                    stored[ch] = {"v": version, "empty": True}
                    continue
                value = values[ch]
                base = self._base(th, ns, ch)
                if (
                    isinstance(value, list)
                    and base is not None
                    and isinstance(base[1], list)
                    and base[0] != version
                    and len(value) >= len(base[1]) > 0
                    and value[: len(base[1])] == base[1]
                ):
                    stored[ch] = {
                        "v": version,
                        "base": base[0],
                        "append": [self._dump(item) for item in value[len(base[1]) :]],
                    }
                else:
                    stored[ch] = {"v": version, "full": self._dump(value)}
                latest[(ns, ch)] = (version, list(value) if isinstance(value, list) else value)
            content = {
                "ns": ns,
                "id": checkpoint["id"],
                "parent": conf.get("checkpoint_id"),
                "checkpoint": self._dump(c),
                "metadata": self._dump(get_checkpoint_metadata(config, metadata)),
                "values": stored,
            }
            th.session.add_custom(NS_CHECKPOINT, content)
            th.fold(content, NS_CHECKPOINT)
            th.latest.update(latest)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        cid = conf["checkpoint_id"]
        th = self._writer(thread_id)
        with th.lock:
            have = th.writes.get((ns, cid), {})
            new = []
            for i, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, i)
                # Regular writes are kept once per (task, idx); the special
                # channels (error, interrupt, …) are replaced.
                if idx >= 0 and (task_id, idx) in have:
                    continue
                new.append([idx, channel, self._dump(value)])
            if not new:
                return
            content = {"ns": ns, "checkpoint": cid, "task": task_id, "path": task_path, "writes": new}
            th.session.add_custom(NS_WRITES, content)
            th.fold(content, NS_WRITES)

    def delete_thread(self, thread_id: str) -> None:
        tid = str(thread_id)
        sid = thread_session_id(tid)
        with self._lock:
            th = self._threads.pop(tid, None)
            self._seen.pop(tid, None)
            if th is not None:
                th.session.close()
            try:
                self.store.remove(sid)
            except cairn.SessionNotFound:
                pass
            except cairn.SessionInUse as e:
                raise self._busy(tid, e) from e

    def _delete_where(
        self, thread_id: str, doomed: Callable[[Dict[str, _Checkpoint], str], bool], why: str
    ) -> None:
        """Deletes the checkpoints of a thread that ``doomed(checkpoints of
        the namespace, id)`` picks, in one ``langgraph.deleted`` record (none
        when it picks nothing, or the thread does not exist)."""
        with self._borrowed(thread_id) as th:
            if th is None:
                return
            with th.lock:
                picked = [
                    [ns, cid] for ns, cps in th.checkpoints.items() for cid in cps if doomed(cps, cid)
                ]
                if not picked:
                    return
                content = {"checkpoints": picked, "why": why}
                th.session.add_custom(NS_DELETED, content)
                th.fold(content, NS_DELETED)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return
        for tid in self._thread_ids():
            self._delete_where(
                tid,
                lambda cps, cid: self._metadata(cps[cid]).get("run_id") in runs,
                "delete_for_runs",
            )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        src, dst = str(source_thread_id), str(target_thread_id)
        with self._borrowed(src) as th:
            if th is not None:
                self._copy_thread(th, src, dst)

    def _copy_thread(self, th: _Thread, src: str, dst: str) -> None:
        with th.lock:
            if th.session.leaf is None:
                return
            with self._lock:
                sid = thread_session_id(dst)
                exists = cairn.SessionExists(
                    f"cannot copy thread {src!r} to {dst!r}: the target thread already exists "
                    "(delete_thread it first)"
                )
                if dst in self._threads or self.store.exists(sid):
                    raise exists
                try:
                    fork = self.store.fork(th.session, title=TITLE_PREFIX + dst, id=sid)
                except (cairn.SessionExists, cairn.SessionInUse) as e:
                    raise exists from e
                fork.close()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for tid in thread_ids:
            if strategy == "delete":
                self.delete_thread(tid)
                continue
            self._delete_where(str(tid), lambda cps, cid: cid != max(cps), "prune")

    def get_next_version(self, current: Optional[str], channel: None) -> str:
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    # -- async: the sync methods in a worker thread --------------------------

    aget_tuple = _in_thread(get_tuple)
    aput = _in_thread(put)
    aput_writes = _in_thread(put_writes)
    adelete_thread = _in_thread(delete_thread)
    adelete_for_runs = _in_thread(delete_for_runs)
    acopy_thread = _in_thread(copy_thread)
    aprune = _in_thread(prune)

    async def alist(
        self, config: Optional[RunnableConfig], **kwargs: Any
    ) -> AsyncIterator[CheckpointTuple]:
        # A generator cannot cross threads: the page is read whole there.
        items = await asyncio.to_thread(lambda: [*self.list(config, **kwargs)])
        for item in items:
            yield item
