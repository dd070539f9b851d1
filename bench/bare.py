"""The bare Celery peers of Conclave's canvases: the same Celery configuration (broker, result
backend, acks_late, prefetch, task events, threads pool), no database of Conclave's.

``celery -A bench.bare worker -Q bare`` runs them. Two canvases with the shape of a board's
(``opening → chord(turns) → summary → chord(turns) → summary → final → done``), whose last
task stores the time it ran under a Redis key:

- :func:`board_canvas`: no-op tasks — what Celery alone costs per step;
- :func:`working_canvas`: the same work as a board's phases without durability — each task
  makes the same offline model call (the requests a Conclave board made, with the earlier
  speeches passed along as Celery results instead of read from Postgres), publishes every
  chunk to Redis as it streams, and stores the text with one INSERT. Against it, the ratio
  is what durability costs (the claim, the lease, the usage row, the fenced completion).

And the peer of a team plan calling a real OpenAI-compatible server (``bench/cpu.py``):
:func:`team_canvas` is ``chord(experts x stream_call, stream_call(synthesis))``; each
:func:`stream_call` makes the streamed ``/chat/completions`` call Conclave's OpenAI provider
makes (same body: messages, ``max_tokens``, ``stream_options.include_usage``) through ONE
``httpx.Client`` shared by every thread of the process (keep-alive, a pool above 32), publishes
every chunk to Redis as it arrives (one PUBLISH each, the shape of Conclave's chunk messages,
on the plan's channel; or nothing, with ``publish=False``) and stores the text with one INSERT.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis
from celery import chain, chord

from orchestrator.core.settings import Settings
from orchestrator.fleet.celery_app import build_app

QUEUE = "bare"

settings = Settings()
app = build_app(settings)
app.conf.update(task_default_queue=QUEUE, include=[])


@app.task(name="bare.noop")
def noop() -> None:
    return None


@app.task(name="bare.done")
def done(key: str) -> None:
    redis.Redis.from_url(settings.broker_url or "").set(key, repr(time.time()), ex=600)


_local = threading.local()


def _clients() -> tuple[Any, Any]:
    """This thread's Redis client and Postgres connection (the threads pool: one per slot)."""
    if not hasattr(_local, "redis"):
        import psycopg

        _local.redis = redis.Redis.from_url(settings.broker_url or "")
        _local.pg = psycopg.connect(os.environ["BENCH_PG_URL"], autocommit=True)
    return _local.redis, _local.pg


@app.task(name="bare.speak")
def speak(prior: Any, call: dict[str, Any]) -> dict[str, list[str]]:
    """One phase's work without durability. ``prior``: the texts so far, ``{source: [title,
    text]}`` (a list of them after a chord); ``call``: the request a Conclave phase made."""
    from orchestrator.gateway.providers.offline.provider import OfflineProvider
    from orchestrator.gateway.types import ChatRequest, ContextBlock, ModelSpec, TextDelta

    texts: dict[str, list[str]] = {}
    for part in prior if isinstance(prior, list) else [prior or {}]:
        texts.update(part)
    blocks = tuple(ContextBlock(src, texts[src][0], texts[src][1]) for src in call["sources"] if src in texts)
    request = ChatRequest(call["system"], call["prompt"], blocks, hints=call["hints"])
    r, pg = _clients()
    out: list[str] = []
    spec = ModelSpec("offline", "offline", options=call["options"], trusted=True)
    for seq, event in enumerate(OfflineProvider().stream(spec, request)):
        if isinstance(event, TextDelta):
            out.append(event.text)
            r.publish(call["channel"], json.dumps({"type": "chunk", "phase": call["key"], "seq": seq,
                                                   "text": event.text}))
    text = "".join(out)
    pg.execute("INSERT INTO bare_results (key, text) VALUES (%s, %s)", (call["key"], text))
    return {**texts, call["key"]: [call["title"], text]}


_http: dict[int, Any] = {}  # pid -> the process's one httpx client
_http_lock = threading.Lock()


def _http_client() -> Any:
    import httpx

    with _http_lock:
        client = _http.get(os.getpid())
        if client is None:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=30.0)
            client = _http[os.getpid()] = httpx.Client(http1=True, trust_env=False, limits=limits,
                                                       timeout=httpx.Timeout(31.0, connect=10.0))
        return client


def _publish_chunk(r: Any, channel: str, message: dict[str, Any]) -> None:
    r.publish(channel, json.dumps(message))


@app.task(name="bare.stream_call")
def stream_call(prior: list[str] | None, call: dict[str, Any]) -> str:
    """One streamed model call without durability. ``prior``: the texts a synthesis reads (a
    chord's results); ``call``: ``key``, ``plan``, ``expert``, ``system``, ``prompt``, ``url``,
    ``publish`` (whether each chunk is published)."""
    prompt = call["prompt"]
    for i, text in enumerate(prior or []):
        prompt += f"\n\n## Input {i + 1}\n{text}"
    body = {"model": "bench", "max_tokens": 1024, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": call["system"]}, {"role": "user", "content": prompt}]}
    r, pg = _clients()
    channel, out, seq = f"conclave:plan:{call['plan']}", [], 0
    with _http_client().stream("POST", call["url"], json=body, headers={"Accept": "text/event-stream"}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    out.append(piece)
                    if call["publish"]:
                        _publish_chunk(r, channel, {"type": "chunk", "phase": call["key"], "expert": call["expert"],
                                                    "seq": seq, "text": piece})
                    seq += 1
    text = "".join(out)
    pg.execute("INSERT INTO bare_results (key, text) VALUES (%s, %s)", (f"{call['plan']}/{call['key']}", text))
    return text


def team_canvas(sender: Any, plan: str, experts: list[tuple[str, str]], question: str, url: str, *,
                publish: bool = True) -> Any:
    """A team plan of ``experts`` side by side, then a synthesis of their texts (by the first);
    ``publish=False``: the peer that publishes nothing."""

    def call(key: str, name: str, role: str, prompt: str) -> dict[str, Any]:
        return {"key": key, "plan": plan, "expert": name, "url": url, "publish": publish,
                "system": f"You are {name}, {role}. Answer as that expert, concretely.",
                "prompt": f"Question: {question}\n\nTask: {prompt}"}

    turns = [sender.signature("bare.stream_call", args=(None, call(f"e{i}", n, r, f"Analyse it as the {r}.")),
                              immutable=True, queue=QUEUE) for i, (n, r) in enumerate(experts)]
    lead, role = experts[0]
    synthesis = sender.signature("bare.stream_call", args=(call("synthesis", lead, role, "Synthesise the inputs."),),
                                 queue=QUEUE)
    return chord(turns, synthesis)


def working_canvas(sender: Any, calls: list[dict[str, Any]], experts: int, key: str) -> Any:
    """The board's canvas doing the board's work: ``calls`` are its phases' requests in
    plan order (opening, a round's turns, its summary, …, final)."""

    def task(name: str, *args: Any, immutable: bool = False) -> Any:
        return sender.signature(name, args=args, immutable=immutable, queue=QUEUE)

    steps: list[Any] = [task("bare.speak", {}, calls[0])]
    i = 1
    while i < len(calls) - 1:
        turns, summary = calls[i:i + experts], calls[i + experts]
        steps.append(chord([task("bare.speak", c) for c in turns], task("bare.speak", summary)))
        i += experts + 1
    steps += [task("bare.speak", calls[-1]), task("bare.done", key, immutable=True)]
    return chain(*steps)


def board_canvas(sender: Any, experts: int, rounds: int, key: str) -> Any:
    """The canvas, for ``sender`` (a Celery app on the same broker) to send by task name.
    Critical path: 1 + 2 * rounds + 2 steps (7 for two rounds), like a board's canvas."""

    def task(name: str, *args: Any) -> Any:
        return sender.signature(name, args=args, immutable=True, queue=QUEUE)

    steps: list[Any] = [task("bare.noop")]
    for _ in range(rounds):
        steps.append(chord([task("bare.noop") for _ in range(experts)], task("bare.noop")))
    steps += [task("bare.noop"), task("bare.done", key)]
    return chain(*steps)
