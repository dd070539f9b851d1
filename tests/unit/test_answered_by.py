"""Which model answered: a phase whose first model failed and whose expert's
``fallback_models`` answered names the model that wrote it, and the ones that failed first, in
the view (JSON, API), on the page's card and in the terminal's panel; a phase its first model
answered names that model alone."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from orchestrator.api.ui.plan_page import card
from orchestrator.api.ui.snapshot import Timing
from orchestrator.client.console import MeetingView
from storage.status import PlanStatus
from tests.unit.planes import Planes
from tests.unit.test_deliberation_flow import offline, team


class _Texts:
    """The one read the terminal's panels make: a phase's stored text."""

    def __init__(self, planes: Planes) -> None:
        self.planes = planes

    def phase_text(self, plan_id: str, key: str) -> str | None:
        return self.planes.text(plan_id, key)


def test_a_phase_answered_by_a_fallback_model_names_it_everywhere(testing_planes: Planes) -> None:
    planes = testing_planes
    doc: dict[str, Any] = team(models={"default": offline(), "broken": offline(fail=True)})
    doc["experts"][0] |= {"model": "broken", "fallback_models": ["default"]}  # Ada's first model fails
    plan_id = planes.coordinator.submit(doc).plan_id
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    view = planes.coordinator.reads.view(plan_id)
    ada, bo = view.phase("ada"), view.phase("bo")
    assert (ada.model, ada.fell_back_from) == ("offline:default", ["offline:broken"])
    assert (bo.model, bo.fell_back_from) == ("offline:default", [])
    assert view.phase("decision").model is None  # a tally: no model wrote it
    assert view.to_dict()["phases"][0]["model"] == "offline:default"  # the JSON the API and --json give

    shown = str(card(ada, Timing(None, None)))
    assert 'data-role="model">offline:default (fallback: offline:broken failed)</span>' in shown
    assert 'data-role="model">offline:default</span>' in str(card(bo, Timing(None, None)))

    console = Console(record=True, width=200)
    meeting = MeetingView(console, _Texts(planes), plan_id)  # type: ignore[arg-type]
    meeting._print_finished(view)
    printed = console.export_text()
    assert "(answered by offline:default after offline:broken failed)" in printed
    assert printed.count("answered by") == 1  # only the phase that fell back says so


def test_status_names_the_fallback_that_answered(testing_planes: Planes) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import cli

    planes = testing_planes
    doc: dict[str, Any] = team(models={"default": offline(), "broken": offline(fail=True)})
    doc["experts"][0] |= {"model": "broken", "fallback_models": ["default"]}
    plan_id = planes.coordinator.submit(doc).plan_id
    planes.run_all()
    shown = CliRunner(env={"CONCLAVE_DATABASE_URL": planes.settings.database_url, "COLUMNS": "200"}).invoke(
        cli, ["status", plan_id])
    assert shown.exit_code == 0, shown.output
    [ada] = [line for line in shown.output.splitlines() if " ada " in line]
    assert ada.endswith("answered by offline:default (fallback: offline:broken failed)")
    assert sum("answered by" in line for line in shown.output.splitlines()) == 1
