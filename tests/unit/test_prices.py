"""What a plan cost in dollars: each call priced when it is made, at its model's price in the
operator's registry (``price: {input, output}``, US dollars per million tokens), stored with
its usage row; the view adds up the counted rows, and knows no cost when a counted call had
no price. A plan cannot say what its calls cost."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.core.errors import InvalidPlan
from orchestrator.plan.schema import load_plan
from storage.status import PlanStatus
from tests.unit.planes import Planes

PRICE = (2.5, 10.0)  # dollars per million input, output tokens


@pytest.fixture()
def priced(template_db: Path, fast_dir: Path) -> Iterator[Planes]:
    directory = Path(tempfile.mkdtemp(dir=fast_dir))
    registry = directory / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": {
        "priced": {"provider": "offline", "options": {"words": 40}, "price": {"input": PRICE[0], "output": PRICE[1]}},
        "free": {"provider": "offline", "options": {"words": 40}}}}))
    p = Planes.open(template_db, directory, models=registry)
    yield p
    p.close()
    shutil.rmtree(directory, ignore_errors=True)


def board(model: str, chair: str | None = None) -> dict[str, object]:
    return {"kind": "board", "title": "Priced", "question": "Ship it?", "rounds": 1,
            "moderator": {"name": "Mo", "role": "Chair", "model": chair or model},
            "experts": [{"name": n, "role": "Analyst", "model": model} for n in ("Ada", "Bo")]}


def run(planes: Planes, plan: dict[str, object]) -> str:
    plan_id = planes.coordinator.submit(load_plan(plan)).plan_id
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    return plan_id


def test_every_call_is_priced_at_the_registry_price_and_the_view_adds_them_up(priced: Planes) -> None:
    plan_id = run(priced, board("priced"))
    rows = priced.usage(plan_id)
    assert rows and all(r.cost_usd == pytest.approx((r.input_tokens * PRICE[0] + r.output_tokens * PRICE[1]) / 1e6)
                        for r in rows)
    view = priced.coordinator.reads.view(plan_id)
    assert view.usage.cost_usd is not None and view.usage.cost_usd > 0
    assert view.usage.cost_usd == pytest.approx(sum(r.cost_usd or 0 for r in rows if r.counted))
    for phase in view.phases:
        assert phase.usage.cost_usd == pytest.approx(
            (phase.usage.input_tokens * PRICE[0] + phase.usage.output_tokens * PRICE[1]) / 1e6)


def test_a_plan_with_an_unpriced_call_has_no_cost_rather_than_a_partial_one(priced: Planes) -> None:
    free = priced.coordinator.reads.view(run(priced, board("free")))
    assert free.usage.cost_usd is None and free.usage.total_tokens > 0
    mixed = priced.coordinator.reads.view(run(priced, board("priced", chair="free")))
    assert mixed.usage.cost_usd is None
    assert all(p.usage.cost_usd is not None for p in mixed.phases if p.expert in ("Ada", "Bo"))


def test_a_plan_cannot_price_its_own_models() -> None:
    plan = {**board("mine"), "models": {"mine": {"provider": "offline", "price": {"input": 0, "output": 0}}}}
    with pytest.raises(InvalidPlan, match="price"):
        load_plan(plan)
