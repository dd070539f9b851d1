"""The options of an offline model (``spec.options``), validated — the one type every
module of the offline model shares, so none of them needs the provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.llm.errors import ProviderMisconfigured
from tasks.llm.offline.text import slug_of

STANCES = ("support", "oppose", "conditional")


@dataclass(frozen=True)
class OfflineOptions:
    """``spec.options`` of an offline model, validated."""

    latency: float = 0.02
    first_chunk_delay: float = 0.02
    chunk_chars: int = 24
    words: int = 110
    hang_all: bool = False
    hang: frozenset[str] = frozenset()  # slugs
    hang_seconds: float = 3600.0
    fail_all: bool = False
    fail: frozenset[str] = frozenset()  # slugs
    break_after_chars: int | None = None
    stances: Mapping[str, str] = field(default_factory=dict)  # slug -> stance
    malformed_divergence: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> OfflineOptions:
        try:
            latency = float(options.get("latency", 0.02))
            first = float(options.get("first_chunk_delay", latency))
            chunk_chars = int(options.get("chunk_chars", 24))
            words = int(options.get("words", 110))
            hang_seconds = float(options.get("hang_seconds", 3600.0))
            brk = options.get("break_after_chars")
            break_after = None if brk is None else int(brk)
        except (TypeError, ValueError) as exc:
            raise ProviderMisconfigured(f"offline provider: bad numeric option ({exc})") from exc
        if (
            min(latency, first, hang_seconds) < 0
            or words < 1
            or (break_after is not None and break_after < 0)
        ):
            raise ProviderMisconfigured("offline provider: options must not be negative (words >= 1)")
        hang_all, hang = cls._names(options.get("hang"), "hang")
        fail_all, fail = cls._names(options.get("fail"), "fail")
        raw_stances = options.get("stances") or {}
        if not isinstance(raw_stances, Mapping):
            raise ProviderMisconfigured("offline provider: 'stances' must map expert names to stances")
        stances: dict[str, str] = {}
        for name, stance in raw_stances.items():
            value = str(stance).strip().lower()
            if value not in STANCES:
                raise ProviderMisconfigured(
                    f"offline provider: stance {stance!r} for {name!r} is not one of {', '.join(STANCES)}"
                )
            stances[slug_of(str(name))] = value
        return cls(
            latency=latency,
            first_chunk_delay=first,
            chunk_chars=chunk_chars,
            words=words,
            hang_all=hang_all,
            hang=hang,
            hang_seconds=hang_seconds,
            fail_all=fail_all,
            fail=fail,
            break_after_chars=break_after,
            stances=stances,
            malformed_divergence=bool(options.get("malformed_divergence", False)),
        )

    @staticmethod
    def _names(value: Any, key: str) -> tuple[bool, frozenset[str]]:
        if value is None or value is False:
            return False, frozenset()
        if value is True:
            return True, frozenset()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, Sequence | set | frozenset):
            raise ProviderMisconfigured(f"offline provider: {key!r} must be true or a list of expert names")
        return False, frozenset(slug_of(str(v)) for v in value)

    def hangs(self, speaker: str | None) -> bool:
        return self.hang_all or (speaker is not None and slug_of(speaker) in self.hang)

    def fails(self, speaker: str | None) -> bool:
        return self.fail_all or (speaker is not None and slug_of(speaker) in self.fail)
