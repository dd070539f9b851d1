"""The client's HTTP backend: the calls of :class:`~orchestrator.client.conclave.Conclave`,
made over the HTTP API (docs/api.md) by a program that reaches a cluster only through it.

    from orchestrator import Conclave

    with Conclave.connect("https://conclave.example.com", token=os.environ["CONCLAVE_TOKEN"]) as conclave:
        plan_id = conclave.submit("examples/board.yaml")
        for message in conclave.watch(plan_id):       # stored events and live text chunks
            ...
        print(conclave.result(plan_id))

What a program can count on, whichever backend it runs over (:mod:`orchestrator.client.backend`):

- the same return types with the same contents (:class:`PlanView`, :class:`SubmitResult`,
  :class:`CancelResult`, :class:`ResumeResult`, :class:`EventRecord`);
- the same errors: the API's ``{"error": {"code", "message", "details"}}`` is raised as the
  :mod:`orchestrator.core.errors` class of its code, with its ``details`` (they name the field). A
  code this client does not know (a newer server, a proxy's page) falls back on the class of
  its HTTP status and keeps the server's code;
- briefing ``path`` entries are read here, on the user's side, and sent as text.

Over HTTP only: a transport failure is :class:`ServiceUnavailable` naming the URL, and
:meth:`HttpBackend.watch` reconnects after a broken connection with ``Last-Event-ID``, so
every stored event arrives exactly once, in id order (text chunks sent while it was away are
lost: :meth:`HttpBackend.phase_text` has the full text). The token travels only in the
``Authorization`` header: it is never logged, printed or part of a ``repr``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import MISSING, fields
from datetime import datetime
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from orchestrator.briefing.documents import ChunkSpan, CitationView, DocumentSummary, DocumentView
from orchestrator.client.backend import PlanSource
from orchestrator.client.local_briefing import load_local_plan
from orchestrator.control.coordinator import CancelResult, ForkResult, ResumeResult, SubmitResult
from orchestrator.control.people import AnswerResult, ApprovalResult, SendBackResult, SteerResult
from orchestrator.control.plan_query import Moment, Values
from orchestrator.core import errors
from orchestrator.core.errors import (
    ConclaveError,
    Forbidden,
    InvalidConfiguration,
    InvalidRequest,
    NotReady,
    PhaseNotFound,
    ServiceUnavailable,
    TooManyStreams,
    Unauthorized,
)
from orchestrator.core.settings import Settings
from orchestrator.gateway.providers.sse import SSEDecoder, SSEEvent
from orchestrator.plan.plan_diff import Comparison
from orchestrator.plan.schema import dump_plan
from orchestrator.plan.spending import BudgetView
from orchestrator.plan.views import PhaseView, PlanView, UsageView
from orchestrator.webhooks.endpoints import ROTATION_SECONDS, EndpointSecret
from storage.evals import EvalCreated, EvalRecord, EvalSummary
from storage.read_models import EventRecord
from storage.status import DeliveryStatus, PhaseStatus, PlanStatus
from storage.webhook_outbox import DeliveryPage, DeliveryRecord, EndpointRecord

T = TypeVar("T")
log = logging.getLogger(__name__)

RETRY_MIN, RETRY_MAX = 0.1, 2.0  # seconds between reconnects of the event stream (2.0: the API's `retry:`)


class HttpBackend:
    """:class:`~orchestrator.client.conclave.Conclave` over HTTP (see the module docstring); build
    it with :meth:`Conclave.connect <orchestrator.client.conclave.Conclave.connect>`.
    ``transport`` replaces the network (``httpx.MockTransport``, an in-process ASGI app).

    ``settings`` holds the user's side's limits for reading a plan and its briefing
    (``CONCLAVE_MAX_PLAN_BYTES``, ``CONCLAVE_BRIEFING_*``); the environment's by default.
    ``reconnect_for`` bounds how long :meth:`watch` keeps trying to reconnect."""

    def __init__(self, url: str, *, token: str | None = None, settings: Settings | None = None,
                 timeout: float = 30.0, stream_timeout: float = 60.0, reconnect_for: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = _base_url(url)
        self.settings = settings if settings is not None else Settings()
        self.reconnect_for = reconnect_for
        headers = {"Accept": "application/json", "User-Agent": "conclave-client"}
        if token is not None and token.strip():
            headers["Authorization"] = f"Bearer {_checked_token(token)}"
        connect = min(timeout, 10.0)
        self._stream_timeout = httpx.Timeout(stream_timeout, connect=connect)  # > the API's 10 s keep-alive
        self._http = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(timeout, connect=connect))
        self._subscriptions: set[_StreamSubscription] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HttpBackend({self.url!r})"

    # -------------------------------------------------------------- operations

    def submit_result(self, plan: PlanSource) -> SubmitResult:
        local = load_local_plan(plan, self.settings)
        for skipped in local.skipped:
            log.warning("briefing: skipped %s: %s", skipped.path, skipped.reason,
                        extra={"action": "briefing.skipped"})
        body = self._json("POST", "/v1/plans", json=dump_plan(local.plan))
        return self._read(lambda: SubmitResult(plan_id=str(body["plan_id"]), created=bool(body["created"]),
                                               enqueued=list(body["enqueued"])))

    def get(self, plan_id: str) -> PlanView:
        body = self._json("GET", _plan_path(plan_id))
        return self._read(lambda: plan_view_from_dict(body))

    def result(self, plan_id: str) -> str:
        """The full text of the final phase; :class:`NotReady` while there is none."""
        body = self._json("GET", _plan_path(plan_id, "result"))
        return self._read(lambda: str(body["text"]))

    def phase_text(self, plan_id: str, key: str) -> str | None:
        """A phase's full text; None when it has none (yet), or the plan has no such phase."""
        try:
            body = self._json("GET", _plan_path(plan_id, "phases", key, "content"))
        except (PhaseNotFound, NotReady):
            return None
        return self._read(lambda: str(body["text"]))

    def citations(self, plan_id: str, key: str | None = None) -> list[CitationView]:
        """The briefing citations of the plan's result (or of phase ``key``), resolved or
        flagged ``unresolved``, in text order; [] while there is no text (or no such phase)."""
        path = _plan_path(plan_id, "result") if key is None else _plan_path(plan_id, "phases", key, "content")
        try:
            body = self._json("GET", path)
        except (PhaseNotFound, NotReady):
            return []
        return self._read(lambda: [CitationView(**_known(CitationView, c)) for c in body["citations"]])

    def documents(self, plan_id: str) -> list[DocumentSummary]:
        """The plan's briefing documents, in briefing order."""
        body = self._json("GET", _plan_path(plan_id, "documents"))
        return self._read(lambda: [DocumentSummary(**_known(DocumentSummary, d)) for d in body["documents"]])

    def document(self, plan_id: str, doc_id: str) -> DocumentView:
        """One briefing document, its text and its chunks' spans (UTF-16 offsets);
        :class:`~orchestrator.core.errors.DocumentNotFound` when the plan has none by that id."""
        body = self._json("GET", _plan_path(plan_id, "documents", doc_id))
        return self._read(lambda: DocumentView(**_known(
            DocumentView, body, chunks=[ChunkSpan(**_known(ChunkSpan, c)) for c in body["chunks"]])))

    def update(self, plan_id: str, changes: dict[str, Any]) -> PlanView:
        body = self._json("PATCH", _plan_path(plan_id), json=changes)
        return self._read(lambda: plan_view_from_dict(body))

    def cancel(self, plan_id: str) -> CancelResult:
        body = self._json("POST", _plan_path(plan_id, "cancel"))
        return self._read(lambda: CancelResult(plan_id=str(body["plan_id"]), cancelled=list(body["cancelled"]),
                                               status=PlanStatus(body["status"])))

    def resume(self, plan_id: str, *, retry_failed: bool = False) -> ResumeResult:
        body = self._json("POST", _plan_path(plan_id, "resume"), json={"retry_failed": retry_failed})
        return self._read(lambda: ResumeResult(plan_id=str(body["plan_id"]), enqueued=list(body["enqueued"]),
                                               retried=list(body["retried"]), status=PlanStatus(body["status"]),
                                               reason=_optional_text(body.get("reason"))))

    def answer(self, plan_id: str, key: str, text: str, *, idempotency_key: str | None = None) -> AnswerResult:
        body = self._json("POST", _plan_path(plan_id, "phases", key, "input"),
                          json={"text": text, **({"idempotency_key": idempotency_key} if idempotency_key else {})})
        return self._read(lambda: AnswerResult(
            plan_id=str(body["plan_id"]), phase=str(body["phase"]), status=PhaseStatus(body["status"]),
            answered_by=body.get("answered_by"), answered_at=_optional_text(body.get("answered_at")),
            replayed=bool(body.get("replayed")), enqueued=list(body.get("enqueued") or [])))

    def approve(self, plan_id: str) -> ApprovalResult:
        body = self._json("POST", _plan_path(plan_id, "approve"))
        return self._read(lambda: ApprovalResult(plan_id=str(body["plan_id"]), status=PlanStatus(body["status"]),
                                                 phase=str(body["phase"]), revision=int(body["revision"])))

    def send_back(self, plan_id: str, note: str) -> SendBackResult:
        body = self._json("POST", _plan_path(plan_id, "send-back"), json={"note": note})
        return self._read(lambda: SendBackResult(plan_id=str(body["plan_id"]), status=PlanStatus(body["status"]),
                                                 phase=str(body["phase"]), revision=str(body["revision"]),
                                                 enqueued=list(body.get("enqueued") or [])))

    def steer(self, plan_id: str, note: str) -> SteerResult:
        body = self._json("POST", _plan_path(plan_id, "steer"), json={"note": note})
        return self._read(lambda: SteerResult(plan_id=str(body["plan_id"]), status=PlanStatus(body["status"]),
                                              n=int(body["n"])))

    def fork(self, plan_id: str, from_phase: str, overrides: dict[str, Any] | None = None) -> ForkResult:
        body = self._json("POST", _plan_path(plan_id, "fork"), json={"from": from_phase, "overrides": overrides})
        return self._read(lambda: ForkResult(
            plan_id=str(body["plan_id"]), created=bool(body["created"]), source=str(body["source"]),
            from_phase=str(body["from_phase"]), reused=list(body["reused"]), rerun=list(body["rerun"]),
            enqueued=list(body["enqueued"])))

    def diff(self, a: str, b: str) -> Comparison:
        body = self._json("GET", _plan_path(a, "diff", b))
        return self._read(lambda: Comparison.from_dict(body))

    def list_plans(self, *, status: Values = None, label: Values = None, created_after: Moment = None,
                   created_before: Moment = None, task_id: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> dict[str, Any]:
        """One page of the plans the token may see, newest first: ``{"plans": [...],
        "next_cursor": str | None}``; pass ``next_cursor`` back as ``cursor`` for the next.
        A plan matches any of the statuses and every one of the labels given."""
        given = {"status": status, "label": label, "created_after": created_after,
                 "created_before": created_before, "task_id": task_id, "limit": limit, "cursor": cursor}
        params: list[tuple[str, str]] = []
        for name, value in given.items():
            values = [value] if isinstance(value, str | int | datetime) else list(value or ())
            params += [(name, v.isoformat() if isinstance(v, datetime) else str(v)) for v in values]
        body = self._json("GET", "/v1/plans", params=params)
        if not isinstance(body, dict) or not isinstance(body.get("plans"), list):
            raise self._unexpected("GET /v1/plans", "not a page of plans")
        return body

    def events(self, plan_id: str, after: int = 0) -> Iterator[EventRecord]:
        """The stored events after ``after``, in id order. The API serves them as a stream:
        for a running plan this follows it to its end (``watch`` also gives the chunks)."""
        for message in self.watch(plan_id, after=after):
            if message.get("type") != "chunk":
                yield self._read(partial(event_record, plan_id, message))

    def watch(self, plan_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """Follow ``GET /v1/plans/{id}/events`` until the plan is final: each stored event
        after ``after`` (``{"id", "type", "phase", "data", "created_at"}``) exactly once, in id
        order, and the live text chunks (``{"type": "chunk", "phase", "expert", "seq",
        "text"}``) between them. A broken connection is reopened with ``Last-Event-ID``."""
        return self._follow(plan_id, after, None)

    def subscribe(self, plan_id: str) -> _StreamSubscription:
        """:meth:`watch` read by a background thread, behind the bus's ``get(timeout)`` /
        ``close()`` (what :class:`orchestrator.client.console.MeetingView` reads)."""
        sub = _StreamSubscription(self, plan_id)
        with self._lock:
            self._subscriptions.add(sub)
        return sub

    def create_eval(self, name: str, spec: dict[str, Any]) -> EvalCreated:
        body = self._json("POST", "/v1/evals", json={"name": name, "spec": spec})
        return self._read(lambda: EvalCreated(eval_record(body), bool(body["created"])))

    def get_eval(self, name: str) -> EvalRecord:
        body = self._json("GET", f"/v1/evals/{quote(name, safe='')}")
        return self._read(lambda: eval_record(body))

    def list_evals(self, *, limit: int = 100) -> list[EvalSummary]:
        body = self._json("GET", "/v1/evals", params={"limit": limit})
        return self._read(lambda: [EvalSummary(id=str(e["id"]), tenant=str(e["tenant"]), name=str(e["name"]),
                                               created_at=datetime.fromisoformat(e["created_at"]))
                                   for e in body["evals"]])

    def create_webhook(self, url: str, events: list[str], *, description: str | None = None) -> EndpointSecret:
        given: dict[str, Any] = {"url": url, "events": list(events)}
        if description is not None:
            given["description"] = description
        body = self._json("POST", "/v1/webhooks", json=given)
        return self._read(lambda: EndpointSecret(endpoint_record(body), str(body["secret"])))

    def list_webhooks(self) -> list[EndpointRecord]:
        body = self._json("GET", "/v1/webhooks")
        return self._read(lambda: [endpoint_record(e) for e in body["webhooks"]])

    def get_webhook(self, webhook_id: str) -> EndpointRecord:
        body = self._json("GET", _webhook_path(webhook_id))
        return self._read(lambda: endpoint_record(body))

    def delete_webhook(self, webhook_id: str) -> None:
        self._json("DELETE", _webhook_path(webhook_id))

    def rotate_webhook_secret(self, webhook_id: str, *, previous_valid_for: float = ROTATION_SECONDS) -> EndpointSecret:
        body = self._json("POST", _webhook_path(webhook_id, "rotate"),
                          json={"previous_secret_valid_for": int(previous_valid_for)})
        return self._read(lambda: EndpointSecret(endpoint_record(body), str(body["secret"])))

    def webhook_deliveries(self, webhook_id: str, *, status: str | None = None, limit: int = 50,
                           cursor: str | int | None = None) -> DeliveryPage:
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status
        if cursor is not None:
            params["cursor"] = str(cursor)
        body = self._json("GET", _webhook_path(webhook_id, "deliveries"), params=params)
        return self._read(lambda: DeliveryPage(
            [delivery_record(d) for d in body["deliveries"]],
            None if body["next_cursor"] is None else int(body["next_cursor"])))

    def close(self) -> None:
        with self._lock:
            subs, self._subscriptions = list(self._subscriptions), set()
        for sub in subs:
            sub.close()
        self._http.close()

    # -------------------------------------------------------------- the event stream

    def _follow(self, plan_id: str, after: int, stop: threading.Event | None) -> Iterator[dict[str, Any]]:
        last, delay, failing_since = after, RETRY_MIN, None
        while True:
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": str(last)} if last else {})}
            problem: Exception
            try:
                with self._http.stream("GET", _plan_path(plan_id, "events"), headers=headers,
                                       timeout=self._stream_timeout) as response:
                    if response.status_code != 200:
                        response.read()
                        raise self._error(response)
                    failing_since, finished, decoder = None, False, SSEDecoder()
                    for data in response.iter_bytes():
                        if stop is not None and stop.is_set():
                            return
                        for event in decoder.feed(data):
                            message = _message(event)
                            if message is None:
                                continue
                            if message.get("type") != "chunk":
                                if message["id"] <= last:  # already seen before a reconnect
                                    continue
                                last, finished = message["id"], message.get("type") == "plan_finished"
                            delay = RETRY_MIN
                            yield message
                # the whole answer: the API ends the stream once the plan is final and its end was sent
                if finished or self.get(plan_id).final:
                    return
                problem = ConnectionAbortedError("the stream ended while the plan runs")
            except (httpx.TransportError, ServiceUnavailable, TooManyStreams) as exc:  # worth reconnecting for
                problem = exc
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > self.reconnect_for:
                if isinstance(problem, ConclaveError):
                    raise problem
                raise self._unreachable(problem)
            log.info("event stream of %s broke after event %d (%s); reconnecting", plan_id, last,
                     type(problem).__name__, extra={"action": "remote.reconnect"})
            if stop is not None:
                if stop.wait(delay):
                    return
            else:
                time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    # -------------------------------------------------------------- requests and answers

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        if response.status_code >= 400:
            raise self._error(response)
        try:
            return response.json()
        except ValueError:
            raise self._unexpected(f"{method} {path}", "not JSON") from None

    def _read(self, build: Callable[[], T]) -> T:
        """An answer's fields into our types; a missing or mistyped field is the server's fault."""
        try:
            return build()
        except (KeyError, TypeError, ValueError) as exc:
            raise self._unexpected("answer", f"{type(exc).__name__}: {exc}") from None

    def _error(self, response: httpx.Response) -> ConclaveError:
        """The exception of an error answer (see the module docstring)."""
        status = response.status_code
        try:
            body = response.json()["error"]
            code, message, details = str(body["code"]), str(body["message"]), body.get("details")
        except (ValueError, KeyError, TypeError):
            code, message = "", f"HTTP {status} from {self.url}"
            details = [{"field": "url", "message": f"HTTP {status}"}]
        cls = error_class(code, status)
        if status >= 500 and response.headers.get("x-request-id"):
            message = f"{message} (request {response.headers['x-request-id']})"
        exc = cls(message, details=details)
        if code and code != cls.code:
            exc.code = code  # keep what the server said (http.not_found, internal, …)
        return exc

    def _unreachable(self, exc: Exception) -> ServiceUnavailable:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ServiceUnavailable(f"cannot reach the Conclave API at {self.url}: {reason}",
                                  details=[{"field": "url", "message": "unreachable"}])

    def _unexpected(self, what: str, problem: str) -> ConclaveError:
        return ConclaveError(f"unexpected {what} from the Conclave API at {self.url}: {problem}",
                             details=[{"field": "url", "message": "not a Conclave API, or another version"}])


class _StreamSubscription:
    """:meth:`HttpBackend.subscribe`: a daemon thread reads the stream into a queue.
    ``close()`` stops it at the stream's next message or keep-alive (within seconds)."""

    def __init__(self, remote: HttpBackend, plan_id: str) -> None:
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, args=(remote, plan_id), daemon=True,
                                        name=f"conclave-events-{plan_id[:12]}")
        self._thread.start()

    def _pump(self, remote: HttpBackend, plan_id: str) -> None:
        try:
            for message in remote._follow(plan_id, 0, self._stop):
                self._queue.put(message)
        except Exception as exc:  # a reader polls the record anyway; never a traceback from a thread
            if not self._stop.is_set():
                log.warning("event stream of %s ended: %s", plan_id,
                            exc.message if isinstance(exc, ConclaveError) else type(exc).__name__,
                            extra={"action": "remote.stream_ended"})

    def get(self, timeout: float) -> dict[str, Any] | None:
        try:
            return self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        self._stop.set()


# ------------------------------------------------------------------ errors and shapes


def _error_classes() -> dict[str, type[ConclaveError]]:
    """Every code of :mod:`orchestrator.core.errors`, to its class."""
    found: dict[str, type[ConclaveError]] = {}
    pending: list[type[ConclaveError]] = [ConclaveError]
    while pending:
        cls = pending.pop(0)
        if cls.__module__ == errors.__name__:
            found.setdefault(cls.code, cls)
        pending += cls.__subclasses__()
    return found


BY_CODE = _error_classes()


def error_class(code: str, status: int) -> type[ConclaveError]:
    """The class of an error code; for a code we do not know, the class of its HTTP status."""
    if code in BY_CODE:
        return BY_CODE[code]
    if status == 401:
        return Unauthorized
    if status == 403:
        return Forbidden
    if status in (502, 503, 504):
        return ServiceUnavailable
    return InvalidRequest if 400 <= status < 500 else ConclaveError


def _message(event: SSEEvent) -> dict[str, Any] | None:
    """A stream event's payload: a chunk, or a stored event with its integer ``id``."""
    try:
        message = json.loads(event.data)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    if message.get("type") != "chunk" and not isinstance(message.get("id"), int):
        return None
    return message


def _known(cls: type[Any], data: dict[str, Any], **converted: Any) -> dict[str, Any]:
    """The fields of dataclass ``cls`` found in ``data`` (a newer server may send more)."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in converted:
            out[f.name] = converted[f.name]
        elif f.name in data:
            out[f.name] = data[f.name]
        elif f.default is MISSING and f.default_factory is MISSING:
            raise KeyError(f.name)
    return out


def plan_view_from_dict(data: dict[str, Any]) -> PlanView:
    """The :class:`PlanView` whose ``to_dict()`` is ``data`` (``GET /v1/plans/{id}``)."""
    phases = [PhaseView(**_known(PhaseView, p, status=PhaseStatus(p["status"]), usage=_usage(p["usage"])))
              for p in data["phases"]]
    budget = BudgetView(**_known(BudgetView, data["budget"])) if data.get("budget") else None
    return PlanView(**_known(PlanView, data, status=PlanStatus(data["status"]), usage=_usage(data["usage"]),
                             phases=phases, budget=budget))


def event_record(plan_id: str, message: dict[str, Any]) -> EventRecord:
    """The stored event a stream message carries."""
    return EventRecord(id=int(message["id"]), plan_id=plan_id, phase_key=message["phase"], type=str(message["type"]),
                       data=dict(message["data"]), created_at=datetime.fromisoformat(message["created_at"]))


def eval_record(data: dict[str, Any]) -> EvalRecord:
    """The :class:`EvalRecord` whose ``to_dict()`` is ``data`` (``GET /v1/evals/{name}``)."""
    if not isinstance(data.get("spec"), dict):
        raise TypeError("spec is not an object")
    return EvalRecord(id=str(data["id"]), tenant=str(data["tenant"]), name=str(data["name"]), spec=data["spec"],
                      created_at=datetime.fromisoformat(data["created_at"]))


def _when(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def endpoint_record(data: dict[str, Any]) -> EndpointRecord:
    """The :class:`EndpointRecord` whose ``to_dict()`` is ``data`` (``GET /v1/webhooks/{id}``)."""
    return EndpointRecord(id=str(data["id"]), tenant=str(data["tenant"]), url=str(data["url"]),
                          events=tuple(str(e) for e in data["events"]), description=_optional_text(data["description"]),
                          secret_version=int(data["secret_version"]),
                          previous_valid_until=_when(data["previous_secret_valid_until"]),
                          created_by=dict(data["created_by"]) if data.get("created_by") else None,
                          created_at=datetime.fromisoformat(data["created_at"]), rotated_at=_when(data["rotated_at"]))


def delivery_record(data: dict[str, Any]) -> DeliveryRecord:
    """A delivery of ``GET /v1/webhooks/{id}/deliveries``."""
    return DeliveryRecord(id=str(data["id"]), endpoint_id=str(data["endpoint_id"]), event_id=int(data["event_id"]),
                          event_type=str(data["event_type"]), plan_id=str(data["plan_id"]),
                          task_id=_optional_text(data["task_id"]), phase_key=_optional_text(data["phase"]),
                          status=DeliveryStatus(data["status"]), attempts=int(data["attempts"]),
                          next_attempt_at=_when(data["next_attempt_at"]),
                          last_attempt_at=_when(data["last_attempt_at"]),
                          last_status_code=None if data["last_status_code"] is None else int(data["last_status_code"]),
                          last_error=_optional_text(data["last_error"]), delivered_at=_when(data["delivered_at"]),
                          created_at=datetime.fromisoformat(data["created_at"]))


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _usage(data: dict[str, Any]) -> UsageView:
    return UsageView(**_known(UsageView, data))


def _base_url(url: str) -> str:
    """``url`` checked: http(s), a host, no query. Shown in messages, so credentials are refused."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host or parsed.query:
        raise InvalidConfiguration("url: not an http(s) URL such as https://conclave.example.com",
                                   details=[{"field": "url", "message": "not an http(s) URL"}])
    if parsed.userinfo:
        raise InvalidConfiguration("url: credentials belong in the token (CONCLAVE_TOKEN), not in the URL",
                                   details=[{"field": "url", "message": "has credentials"}])
    return str(parsed.copy_with(fragment=None)).rstrip("/")


def _checked_token(token: str) -> str:
    token = token.strip()  # a token read from a file often ends in a newline
    if not token.isascii() or not token.isprintable() or " " in token:
        raise InvalidConfiguration("token: not a bearer token (printable ASCII, no spaces)",
                                   details=[{"field": "token", "message": "not a bearer token"}])
    return token


def _plan_path(plan_id: str, *parts: str) -> str:
    return "/".join(["/v1/plans", *(quote(p, safe="") for p in (plan_id, *parts))])


def _webhook_path(webhook_id: str, *parts: str) -> str:
    return "/".join(["/v1/webhooks", *(quote(p, safe="") for p in (webhook_id, *parts))])
