"""Reading a plan's local briefing paths — on the user's side only.

The CLI (``conclave run``/``submit``) and the Python client in embedded mode call
:func:`load_local_plan` before submitting: every ``path`` entry becomes inline
documents, so what is stored, and anything sent over the network, carries contents and
never a path. Nothing on a server calls this module (a server refuses ``path`` entries:
:mod:`orchestrator.briefing.ingest`).

Path safety (failure report R-09). Relative paths resolve against the plan file's
folder (the working directory for a plan given as text or a mapping), and:

- the path a plan names must resolve (``Path.resolve()``) inside that folder — ``..`` or
  a symbolic link that leaves it is refused with a field error;
- every file is resolved and must stay inside the resolved folder the entry names (a
  single file: its own folder); a symbolic link leading outside is skipped and reported,
  never followed, and so are broken links and link loops;
- folders reached through symbolic links are not entered; hidden files and folders,
  files that are not ``.md``/``.markdown``/``.txt``, that are not UTF-8 text, or that are
  over ``CONCLAVE_BRIEFING_MAX_DOCUMENT_BYTES`` are skipped and reported.

A file named directly by a plan is not skipped quietly: if it cannot be used, the plan
is refused with a field error naming ``briefing[i].path``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.briefing.entries import MARKDOWN_SUFFIXES, TEXT_SUFFIXES, BriefingDocument, unique_slug
from orchestrator.briefing.ingest import Limits
from orchestrator.core.errors import InvalidPlan
from orchestrator.core.settings import Settings
from orchestrator.plan.schema import BoardPlan, TeamPlan, load_plan, parse_plan, plan_file

MAX_SCANNED = 100_000  # entries looked at in one folder tree before giving up


@dataclass(frozen=True)
class Skipped:
    """A file or folder left out of the briefing, and why (shown to the user)."""

    path: str  # relative to the plan's folder
    reason: str


@dataclass(frozen=True)
class LocalPlan:
    """A plan whose briefing is all inline, and what was left out reading it."""

    plan: BoardPlan | TeamPlan
    skipped: list[Skipped] = field(default_factory=list)


def load_local_plan(source: Any, settings: Settings, *, base_dir: Path | None = None) -> LocalPlan:
    """Load and validate a plan (a path, YAML/JSON text, a mapping or a plan object) and
    read its briefing paths. ``base_dir`` defaults to the plan file's folder, or the
    working directory."""
    plan = load_plan(source, max_bytes=settings.max_plan_bytes)
    if base_dir is None:
        named = plan_file(source)
        base_dir = named.parent if named is not None else Path.cwd()
    return read_briefing(plan, base_dir, Limits.from_settings(settings))


def read_briefing(plan: BoardPlan | TeamPlan, base_dir: Path, limits: Limits) -> LocalPlan:
    """``plan`` with every ``path`` entry replaced by the documents it names."""
    if all(d.path is None for d in plan.briefing):
        return LocalPlan(plan)
    try:
        base = base_dir.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise InvalidPlan(f"cannot read the plan's folder {str(base_dir)!r}: {exc}",
                          details=[{"field": "briefing", "message": "the plan's folder cannot be read"}]) from None
    reader = _Reader(base, limits, taken={d.id for d in plan.briefing if d.id})
    entries: list[dict[str, Any]] = []
    for i, d in enumerate(plan.briefing):
        if d.path is None:
            entries.append(d.model_dump(mode="json", exclude_none=True))
        else:
            entries += reader.read(i, d, already=len(entries))
    data = plan.model_dump(mode="json")
    data["briefing"] = entries
    return LocalPlan(parse_plan(data), reader.skipped)


class _Reader:
    def __init__(self, base: Path, limits: Limits, taken: set[str]) -> None:
        self.base = base
        self.limits = limits
        self.taken = taken
        self.skipped: list[Skipped] = []
        self.total_bytes = 0

    def read(self, i: int, entry: BriefingDocument, *, already: int) -> list[dict[str, Any]]:
        assert entry.path is not None
        fld = f"briefing[{i}].path"
        named = self.base / entry.path
        try:
            target = named.resolve(strict=True)
        except FileNotFoundError:
            _refuse(fld, f"no such file or folder: {entry.path}")
        except (OSError, RuntimeError) as exc:
            _refuse(fld, f"cannot resolve {entry.path}: {exc}")
        if not target.is_relative_to(self.base):
            _refuse(fld, f"{entry.path} leads outside the plan's folder; a briefing reads only files inside it")
        if target.is_dir():
            if entry.id is not None or entry.title is not None:
                _refuse(f"briefing[{i}].{'id' if entry.id is not None else 'title'}",
                        "id and title name one file; the documents of a folder are named after their files")
            return self._folder(fld, target, already)
        root = named.parent.resolve()
        if not target.is_relative_to(root):
            _refuse(fld, f"{entry.path} is a symbolic link leading outside its folder; it is not followed")
        problem, doc = self._file(target, target.name)
        if doc is None:
            _refuse(fld, f"{entry.path}: {problem}")
        text, fmt = doc
        self._count(fld, already + 1, len(text.encode("utf-8")))
        doc_id = entry.id or unique_slug(Path(entry.path).stem, self.taken)
        self.taken.add(doc_id)
        return [{"id": doc_id, "title": entry.title or entry.path[-300:], "text": text, "format": fmt}]

    def _folder(self, fld: str, root: Path, already: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        scanned = 0
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            here = Path(dirpath)
            scanned += len(dirnames) + len(filenames)
            if scanned > MAX_SCANNED:
                _refuse(fld, f"the folder holds more than {MAX_SCANNED} entries")
            kept = []
            for name in sorted(dirnames):
                if name.startswith("."):
                    self._skip(here / name, "hidden folder: not read")
                elif (here / name).is_symlink():
                    self._skip(here / name, "symbolic link to a folder: not followed")
                else:
                    kept.append(name)
            dirnames[:] = kept
            for name in sorted(filenames):
                path = here / name
                if name.startswith("."):
                    self._skip(path, "hidden file: not read")
                    continue
                try:
                    real = path.resolve(strict=True)
                except (OSError, RuntimeError) as exc:  # Python 3.11 reports a loop as RuntimeError
                    loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
                    self._skip(path, "symbolic link loop: not followed" if loop else "broken symbolic link")
                    continue
                if not real.is_relative_to(root):
                    self._skip(path, f"symbolic link to {real}, outside {self._shown(root)}/: not followed")
                    continue
                problem, doc = self._file(real, name)
                if doc is None:
                    self._skip(path, problem)
                    continue
                text, fmt = doc
                self._count(fld, already + len(out) + 1, len(text.encode("utf-8")))
                rel = path.relative_to(root).with_suffix("").as_posix()
                doc_id = unique_slug(rel, self.taken)
                self.taken.add(doc_id)
                out.append({"id": doc_id, "title": self._shown(path), "text": text, "format": fmt})
        if not out:
            _refuse(fld, "the folder holds no readable .md, .markdown or .txt file")
        return out

    def _file(self, real: Path, name: str) -> tuple[str, tuple[str, str] | None]:
        """``(problem, None)`` or ``("", (text, format))`` for a resolved file."""
        suffix = Path(name).suffix.lower()
        if name.startswith("."):
            return "hidden file: not read", None
        if suffix not in MARKDOWN_SUFFIXES + TEXT_SUFFIXES:
            return "not a .md, .markdown or .txt file", None
        limit = self.limits.max_document_bytes
        try:
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                info = os.fstat(f.fileno())
                if not stat.S_ISREG(info.st_mode):
                    return "not a regular file", None
                data = f.read(limit + 1) if info.st_size <= limit else b""
        except OSError as exc:
            return f"cannot be read: {exc.strerror}", None
        if info.st_size > limit or len(data) > limit:
            size = max(info.st_size, len(data))
            return f"{size} bytes, over the limit of {limit} (CONCLAVE_BRIEFING_MAX_DOCUMENT_BYTES)", None
        if b"\x00" in data:
            return "not text (binary content)", None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return "not UTF-8 text", None
        if not text.strip():
            return "empty", None
        return "", (text, "text" if suffix in TEXT_SUFFIXES else "markdown")

    def _count(self, fld: str, documents: int, size: int) -> None:
        if documents > self.limits.max_documents:
            _refuse(fld, f"more than {self.limits.max_documents} documents (CONCLAVE_BRIEFING_MAX_DOCUMENTS)")
        self.total_bytes += size
        if self.total_bytes > self.limits.max_bytes:
            _refuse(fld, f"the briefing's files add up to more than {self.limits.max_bytes} bytes "
                         "(CONCLAVE_BRIEFING_MAX_BYTES)")

    def _skip(self, path: Path, reason: str) -> None:
        self.skipped.append(Skipped(self._shown(path), reason))

    def _shown(self, path: Path) -> str:
        """A path as the user wrote it: relative to the plan's folder, '/'-separated."""
        try:
            shown = path.relative_to(self.base).as_posix()
        except ValueError:
            shown = str(path)
        return shown[-300:]


def _refuse(fld: str, message: str) -> NoReturn:
    raise InvalidPlan(f"invalid plan: {fld}: {message}", details=[{"field": fld, "message": message}])
