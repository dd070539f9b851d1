"""Fixtures of the service-free tier."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.unit.planes import Planes

# tests.unit.planes (the whole control plane) is imported by the fixtures that use it, not here: a
# test process that needs none of it (a mutation's, `pytest tests/unit/test_x.py`) starts a second sooner

# SQLite files live in memory-backed storage when the machine has it: a commit there costs
# no disk flush, so a whole plan runs in a fraction of a second.
SHM = Path("/dev/shm")


@pytest.fixture(scope="session")
def fast_dir() -> Iterator[Path]:
    if SHM.is_dir() and os.access(SHM, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="conclave-unit-", dir=SHM))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="conclave-unit-"))
        yield path
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(fast_dir: Path) -> Path:
    from tests.unit.planes import migrated_template

    return migrated_template(fast_dir)


@pytest.fixture(scope="session")
def sqlite_template(template_db: Path) -> Path:
    """tests/conftest.py's ``sqlite_template`` (behind ``sqlite_url``) is this tier's template:
    one migration per test process, not two."""
    return template_db


@pytest.fixture()
def home(template_db: Path, tmp_path: Path) -> Path:
    """A Conclave home (``Settings(home=...)``) whose database is already at head: a copy of the
    template. An embedded backend still runs its upgrade at start, which finds nothing to do
    (~0.1 s, where migrating a new file costs ~0.3 s of CPU and seconds of disk flushes)."""
    path = tmp_path / "home"
    path.mkdir()
    shutil.copyfile(template_db, path / "conclave.db")
    return path


def _planes(template_db: Path, fast_dir: Path, **settings: object) -> Iterator[Planes]:
    from tests.unit.planes import Planes

    directory = Path(tempfile.mkdtemp(dir=fast_dir))
    p = Planes.open(template_db, directory, **settings)
    yield p
    p.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture()
def planes(template_db: Path, fast_dir: Path) -> Iterator[Planes]:
    yield from _planes(template_db, fast_dir)


@pytest.fixture()
def testing_planes(template_db: Path, fast_dir: Path) -> Iterator[Planes]:
    """Planes in testing mode (``CONCLAVE_TESTING``): plans may use the offline model's fault switches."""
    yield from _planes(template_db, fast_dir, testing=True)
