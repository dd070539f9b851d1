"""Issue 8, attack 3, at the API: an offline model's options are bounded and its fault switches
are refused unless the operator runs in testing mode — 422 naming
``models.<name>.options.<option>``, nothing stored. (That a worker refuses them again is
``tests/integration/test_offline_model.py``.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, func, select

from storage.models import Plan
from tests.e2e.test_api import ApiServer, assert_error, board


def _plan(options: dict[str, Any]) -> dict[str, Any]:
    return board(models={"default": {"provider": "offline", "options": options}})


def _stored(settings: Any) -> int:
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(Plan)).scalar_one())
    finally:
        engine.dispose()


def test_options_out_of_bounds_and_fault_switches_are_refused_at_the_api(settings: Any, tmp_path: Path) -> None:
    production = settings.model_copy(update={"testing": False})  # plans may define models; no testing mode
    server = ApiServer(production, tmp_path)
    try:
        cases = [
            ({"words": 3_000_000, "latency": 0}, {"words": "less than or equal to 50000"}),
            ({"latency": 1e300}, {"latency": "less than or equal to 2"}),
            ({"chunk_chars": 0, "verbose": True}, {"chunk_chars": "greater than or equal to 4",
                                                   "verbose": "unknown option"}),
            ({"hang": ["Dana"], "first_chunk_delay": 30, "fail": True},
             {"hang": "CONCLAVE_TESTING", "first_chunk_delay": "CONCLAVE_TESTING", "fail": "CONCLAVE_TESTING"}),
            ({"break_after_chars": 10, "malformed_divergence": True, "hang_seconds": 1},
             {"break_after_chars": "CONCLAVE_TESTING", "malformed_divergence": "CONCLAVE_TESTING",
              "hang_seconds": "CONCLAVE_TESTING"}),
        ]
        for options, expected in cases:
            r = httpx.post(f"{server.url}/v1/plans", json=_plan(options))
            err = assert_error(r, 422)
            assert err["code"] == "plan.invalid"
            got = {d["field"]: d["message"] for d in err["details"]}
            assert set(got) == {f"models.default.options.{option}" for option in expected}, got
            for option, words in expected.items():
                assert words in got[f"models.default.options.{option}"], got
        assert _stored(production) == 0
        ok = httpx.post(f"{server.url}/v1/plans", json=_plan({"latency": 0.5, "words": 300, "first_chunk_delay": 1}))
        assert ok.status_code == 201, ok.text  # demo options need no testing mode
    finally:
        server.stop()
    assert "Traceback" not in server.log()

    testing = ApiServer(settings, tmp_path)  # the operator's test cluster: fault switches accepted
    try:
        r = httpx.post(f"{testing.url}/v1/plans", json=_plan({"hang": ["Dana"], "fail": True}))
        assert r.status_code == 201, r.text
        bounded = httpx.post(f"{testing.url}/v1/plans", json=_plan({"words": 3_000_000}))
        assert assert_error(bounded, 422)["details"][0]["field"] == "models.default.options.words"  # still bounded
    finally:
        testing.stop()
