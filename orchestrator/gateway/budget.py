"""Context budgeting: the request a model receives fits its window.

``fit_request`` guarantees that the request a model receives fits
``spec.context_window`` with ``spec.max_output_tokens`` reserved for the answer,
measured over the WHOLE rendered request (system, every context block with its
heading, prompt) in estimated tokens (:mod:`orchestrator.gateway.tokens`). When it
does not fit, the OLDEST context blocks are replaced, one by one, by summaries (same
``source`` and title, ``summarised=True``) until it does. Summaries come from a
caller-supplied summariser (the gateway routes it through the same hooks, retries and
stream guard as any call) and each summariser request is itself fitted: material too
long for one request is cut into pieces, summarised piecewise and the partial
summaries summarised again. If the request cannot fit even then, ``ContextOverflow``
says why. Nothing is ever silently truncated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from orchestrator.gateway.failures import ContextOverflow
from orchestrator.gateway.tokens import MESSAGE_OVERHEAD, estimate_tokens, request_tokens
from orchestrator.gateway.types import ChatRequest, Completion, ContextBlock, ModelSpec

logger = logging.getLogger(__name__)

_MIN_SUMMARY_ROOM = 64  # below this many free tokens a summariser request is pointless
_MAX_ROUNDS = 4  # map-reduce rounds before giving up on shrinking one block

_SUMMARY_SYSTEM = (
    "You condense earlier discussion material for a reader with a limited context window. "
    "Keep every claim, number, decision, disagreement and who said what; drop repetition."
)

Summarise = Callable[[ChatRequest], Completion]


def fits(spec: ModelSpec, request: ChatRequest) -> bool:
    return request_tokens(request) + spec.max_output_tokens <= spec.context_window


def fit_request(spec: ModelSpec, request: ChatRequest, summarise: Summarise) -> ChatRequest:
    """``request`` unchanged if it fits, else with its oldest blocks summarised."""
    if fits(spec, request):
        return request
    bare = replace(request, context=())
    if not fits(spec, bare):
        raise ContextOverflow(
            f"model {spec.name!r}: system prompt and instructions alone need ~{request_tokens(bare)} "
            f"tokens plus {spec.max_output_tokens} reserved for output; the window is {spec.context_window}"
        )
    blocks = list(request.context)
    for index, block in enumerate(blocks):
        if fits(spec, replace(request, context=tuple(blocks))):
            break
        if block.summarised:
            continue
        summary = _summarise_text(spec, request, block, block.text, summarise)
        if estimate_tokens(summary) >= estimate_tokens(block.text):
            logger.info("action=summarise_skipped source=%s reason=not_shorter", block.source)
            continue
        blocks[index] = replace(block, text=summary, summarised=True)
        logger.info(
            "action=context_summarised model=%s source=%s tokens_before=%d tokens_after=%d",
            spec.name,
            block.source,
            estimate_tokens(block.text),
            estimate_tokens(summary),
        )
    fitted = replace(request, context=tuple(blocks))
    if not fits(spec, fitted):
        raise ContextOverflow(
            f"model {spec.name!r}: ~{request_tokens(fitted)} input tokens plus {spec.max_output_tokens} "
            f"reserved for output exceed the window of {spec.context_window} even with all "
            f"{len(blocks)} context block(s) summarised"
        )
    return fitted


def _summary_request(parent: ChatRequest, block: ContextBlock, text: str, part: str) -> ChatRequest:
    target = max(32, estimate_tokens(text) // 4)
    return ChatRequest(
        system=_SUMMARY_SYSTEM,
        prompt=(
            f"Summarise the material above{part} in at most {target} words. "
            "Write the summary only, in the language of the material."
        ),
        context=(ContextBlock(source=block.source, title=block.title, text=text),),
        purpose="summarise",
        hints={"kind": "summarise", "source": block.source, "title": block.title, "for": parent.purpose},
    )


def _room(spec: ModelSpec, parent: ChatRequest, block: ContextBlock) -> int:
    """How many tokens of material one summariser request can carry."""
    empty = _summary_request(parent, block, "", " (part 99 of 99)")
    return spec.context_window - spec.max_output_tokens - request_tokens(empty) - MESSAGE_OVERHEAD


def _summarise_text(
    spec: ModelSpec, parent: ChatRequest, block: ContextBlock, text: str, summarise: Summarise
) -> str:
    room = _room(spec, parent, block)
    if room < _MIN_SUMMARY_ROOM:
        raise ContextOverflow(
            f"model {spec.name!r}: the window of {spec.context_window} tokens with {spec.max_output_tokens} "
            f"reserved for output leaves no room to summarise context block {block.source!r}"
        )
    for _round in range(_MAX_ROUNDS):
        pieces = _split(text, room)
        summaries = []
        for number, piece in enumerate(pieces, 1):
            part = f" (part {number} of {len(pieces)})" if len(pieces) > 1 else ""
            completion = summarise(_summary_request(parent, block, piece, part))
            if completion.truncated:
                logger.warning("action=summary_truncated source=%s", block.source)
            summaries.append(completion.text.strip())
        joined = "\n\n".join(summaries)
        if len(pieces) == 1 or estimate_tokens(joined) <= room:
            return joined
        if len(joined) >= len(text):
            break
        text = joined
    raise ContextOverflow(
        f"model {spec.name!r}: context block {block.source!r} could not be summarised small enough "
        f"for a window of {spec.context_window} tokens"
    )


def _split(text: str, max_tokens: int) -> list[str]:
    """Pieces of at most ``max_tokens`` (estimated), cut at paragraph or line breaks
    where possible."""
    pieces: list[str] = []
    while estimate_tokens(text) > max_tokens:
        max_chars = max_tokens * 4
        while max_chars > 1 and estimate_tokens(text[:max_chars]) > max_tokens:
            max_chars = max(1, max_chars * max_tokens // estimate_tokens(text[:max_chars]))
        cut = max(text.rfind("\n\n", 0, max_chars), text.rfind("\n", 0, max_chars))
        if cut <= max_chars // 2:
            cut = text.rfind(" ", 0, max_chars)
        if cut <= max_chars // 2:
            cut = max_chars
        pieces.append(text[:cut])
        text = text[cut:].lstrip()
    pieces.append(text)
    return pieces
