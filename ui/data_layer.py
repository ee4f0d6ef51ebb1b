"""Chainlit data layer on our history database (MongoDB when MONGO_URL is set, montydb otherwise).

Threads, steps, elements, feedback and users live in their own collections next to `chat_message`;
a thread's id is also the query graph's session id, so deleting a thread deletes its chat history,
and the thread's user owns that session for the API too (nobody else can read or continue it).
Every call runs in a worker thread (the database is synchronous) behind one FIFO lock, so that
Chainlit's fire-and-forget writes of one step (create, then updates) land in the order they were made.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from chainlit.data.base import BaseDataLayer
from chainlit.data.utils import queue_until_user_message
from chainlit.types import Feedback, PageInfo, PaginatedResponse, Pagination, ThreadDict, ThreadFilter
from chainlit.user import PersistedUser, User
from chainlit.utils import utc_now

from services.history_store import get_database, get_history_store
from services.settings import get_settings

if TYPE_CHECKING:
    from chainlit.element import Element, ElementDict
    from chainlit.step import StepDict

log = logging.getLogger("ui.data_layer")

USERS, THREADS, STEPS, ELEMENTS, FEEDBACK = "cl_user", "cl_thread", "cl_step", "cl_element", "cl_feedback"
MAX_INLINE_TEXT = 512 * 1024  # text elements (sources) are kept in the database, served as data: URLs


def _plain(doc: dict | None) -> dict | None:
    if doc is None:
        return None
    return {k: v for k, v in doc.items() if k != "_id"}


def _json_safe(value: Any) -> Any:
    """What the document database can store: plain JSON (step metadata may hold anything)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=lambda o: None))


def _with_url(element: dict) -> dict:
    element = dict(element)
    content = element.pop("content", None)
    if content is not None and not element.get("url"):
        encoded = base64.b64encode(content.encode("utf-8")).decode("ascii")
        element["url"] = f"data:{element.get('mime') or 'text/plain'};charset=utf-8;base64,{encoded}"
    return element


class HistoryDataLayer(BaseDataLayer):
    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    # -- plumbing -------------------------------------------------------------------------
    async def _run(self, fn: Callable, *args):
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await asyncio.to_thread(fn, *args)

    @staticmethod
    def _collection(name: str, action: str):
        return get_database(get_settings()).collection(name, action, indexes=[[("id", 1)]])

    async def _upsert(self, name: str, query: dict, update: dict, action: str) -> None:
        def write():
            with self._collection(name, action) as col:
                col.update_one(query, update, upsert=True)
        await self._run(write)

    @classmethod
    def _delete(cls, name: str, query: dict) -> int:
        with cls._collection(name, "删除对话数据") as col:
            # montydb fails on delete_many in a collection that was never written
            if col.find_one(query) is None:
                return 0
            return col.delete_many(query).deleted_count

    # -- users ----------------------------------------------------------------------------
    @staticmethod
    def _persisted(doc: dict) -> PersistedUser:
        return PersistedUser(id=doc["id"], identifier=doc["identifier"], createdAt=doc["createdAt"],
                             metadata=doc.get("metadata") or {}, display_name=doc.get("display_name"))

    async def get_user(self, identifier: str) -> Optional[PersistedUser]:
        def read():
            with self._collection(USERS, "读取用户") as col:
                return col.find_one({"identifier": identifier})
        doc = await self._run(read)
        return self._persisted(doc) if doc else None

    async def create_user(self, user: User) -> Optional[PersistedUser]:
        def write():
            with self._collection(USERS, "保存用户") as col:
                col.update_one({"identifier": user.identifier},
                               {"$setOnInsert": {"id": str(uuid.uuid4()), "identifier": user.identifier,
                                                 "createdAt": utc_now()},
                                "$set": {"metadata": _json_safe(user.metadata or {}),
                                         "display_name": user.display_name}},
                               upsert=True)
                return col.find_one({"identifier": user.identifier})
        return self._persisted(await self._run(write))

    # -- feedback -------------------------------------------------------------------------
    async def upsert_feedback(self, feedback: Feedback) -> str:
        feedback_id = feedback.id or str(uuid.uuid4())
        doc = {"id": feedback_id, "forId": feedback.forId, "threadId": feedback.threadId,
               "value": int(feedback.value), "comment": feedback.comment}
        await self._upsert(FEEDBACK, {"forId": feedback.forId}, {"$set": doc}, "保存反馈")
        return feedback_id

    async def delete_feedback(self, feedback_id: str) -> bool:
        return await self._run(self._delete, FEEDBACK, {"id": feedback_id}) > 0

    # -- elements -------------------------------------------------------------------------
    @queue_until_user_message()
    async def create_element(self, element: "Element"):
        if not element.for_id:
            return
        doc = _json_safe(element.to_dict())
        if element.type == "text" and isinstance(element.content, str) and len(element.content) <= MAX_INLINE_TEXT:
            doc["content"] = element.content
        await self._upsert(ELEMENTS, {"id": element.id}, {"$set": doc}, "保存消息附件")

    async def get_element(self, thread_id: str, element_id: str) -> Optional["ElementDict"]:
        def read():
            with self._collection(ELEMENTS, "读取消息附件") as col:
                return col.find_one({"id": element_id, "threadId": thread_id})
        doc = await self._run(read)
        return _with_url(_plain(doc)) if doc else None

    @queue_until_user_message()
    async def delete_element(self, element_id: str, thread_id: Optional[str] = None):
        query = {"id": element_id, **({"threadId": thread_id} if thread_id else {})}
        await self._run(self._delete, ELEMENTS, query)

    # -- steps ----------------------------------------------------------------------------
    @queue_until_user_message()
    async def create_step(self, step_dict: "StepDict"):
        # $setOnInsert: an update that overtook its create must not be overwritten by the older data
        await self._upsert(STEPS, {"id": step_dict["id"]}, {"$setOnInsert": _json_safe(dict(step_dict))}, "保存消息")

    @queue_until_user_message()
    async def update_step(self, step_dict: "StepDict"):
        await self._upsert(STEPS, {"id": step_dict["id"]}, {"$set": _json_safe(dict(step_dict))}, "更新消息")

    @queue_until_user_message()
    async def delete_step(self, step_id: str):
        await self._run(self._delete, STEPS, {"id": step_id})
        await self._run(self._delete, FEEDBACK, {"forId": step_id})

    async def get_favorite_steps(self, user_id: str) -> List["StepDict"]:
        def read():
            with self._collection(THREADS, "读取会话") as col:
                ids = [t["id"] for t in col.find({"userId": user_id}, {"id": 1})]
            with self._collection(STEPS, "读取收藏") as col:
                steps = [_plain(s) for s in col.find({"threadId": {"$in": ids}, "metadata.favorite": True})]
            return sorted(steps, key=lambda s: s.get("createdAt") or "", reverse=True)
        return await self._run(read)

    # -- threads --------------------------------------------------------------------------
    async def get_thread_author(self, thread_id: str) -> str:
        def read():
            with self._collection(THREADS, "读取会话") as col:
                return col.find_one({"id": thread_id})
        doc = await self._run(read)
        return (doc or {}).get("userIdentifier") or ""

    async def update_thread(self, thread_id: str, name: Optional[str] = None, user_id: Optional[str] = None,
                            metadata: Optional[Dict] = None, tags: Optional[List[str]] = None):
        def write():
            changes: dict = {"updatedAt": utc_now()}
            if name is not None:
                changes["name"] = name
            if tags is not None:
                changes["tags"] = tags
            if user_id is not None:
                with self._collection(USERS, "读取用户") as users:
                    user = users.find_one({"id": user_id})
                changes["userId"] = user_id
                changes["userIdentifier"] = (user or {}).get("identifier")
                if changes["userIdentifier"] and not get_history_store().claim(thread_id, changes["userIdentifier"]):
                    log.warning("thread %s belongs to another user's API session: not attached", thread_id)
                    return
            with self._collection(THREADS, "保存会话") as col:
                if metadata is not None:
                    old = (col.find_one({"id": thread_id}) or {}).get("metadata") or {}
                    changes["metadata"] = _json_safe({**old, **metadata})
                col.update_one({"id": thread_id},
                               {"$set": changes, "$setOnInsert": {"id": thread_id, "createdAt": utc_now()}},
                               upsert=True)
        await self._run(write)

    async def delete_thread(self, thread_id: str):
        def delete():
            for name in (STEPS, ELEMENTS, FEEDBACK):
                self._delete(name, {"threadId": thread_id})
            self._delete(THREADS, {"id": thread_id})
            history = get_history_store()
            if history.recent(thread_id, 1):  # the query graph's history of this conversation
                history.delete_session(thread_id)
        await self._run(delete)

    async def list_threads(self, pagination: Pagination, filters: ThreadFilter) -> PaginatedResponse[ThreadDict]:
        def read():
            query: dict = {"userId": filters.userId}
            with self._collection(THREADS, "读取会话列表") as col:
                threads = [_plain(t) for t in col.find(query)]
            if filters.feedback is not None:
                with self._collection(FEEDBACK, "读取反馈") as col:
                    rated = {f.get("threadId") for f in col.find({"value": int(filters.feedback)})}
                threads = [t for t in threads if t["id"] in rated]
            if filters.search:
                needle = filters.search.lower()
                threads = [t for t in threads if needle in (t.get("name") or "").lower()]
            return sorted(threads, key=lambda t: t.get("createdAt") or "", reverse=True)

        threads = await self._run(read)
        start = 0
        if pagination.cursor:
            start = next((i + 1 for i, t in enumerate(threads) if t["id"] == pagination.cursor), len(threads))
        page = threads[start:start + pagination.first]
        data = [{**t, "steps": [], "elements": []} for t in page]
        return PaginatedResponse(
            data=data,
            pageInfo=PageInfo(hasNextPage=start + pagination.first < len(threads),
                              startCursor=page[0]["id"] if page else None,
                              endCursor=page[-1]["id"] if page else None))

    async def get_thread(self, thread_id: str) -> Optional[ThreadDict]:
        def read():
            with self._collection(THREADS, "读取会话") as col:
                thread = _plain(col.find_one({"id": thread_id}))
            if thread is None:
                return None
            with self._collection(STEPS, "读取消息") as col:
                steps = [_plain(s) for s in col.find({"threadId": thread_id})]
            with self._collection(FEEDBACK, "读取反馈") as col:
                feedback = {f["forId"]: _plain(f) for f in col.find({"threadId": thread_id})}
            with self._collection(ELEMENTS, "读取消息附件") as col:
                elements = [_with_url(_plain(e)) for e in col.find({"threadId": thread_id})]
            for step in steps:
                if step["id"] in feedback:
                    step["feedback"] = feedback[step["id"]]
            steps.sort(key=lambda s: s.get("createdAt") or "")
            return {**thread, "steps": steps, "elements": elements}
        return await self._run(read)

    async def build_debug_url(self) -> str:
        return ""

    async def close(self) -> None:
        return None
