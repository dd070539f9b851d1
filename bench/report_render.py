"""How long the report of a large eval takes to render (issue 19: under a second): build_report,
its table and JSON, and the eval page, for synthetic outcomes of 1,000 items x 3 arms, the panels
of 5 experts over 2 rounds with a review each.

Usage: python bench/report_render.py [--items 1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.api.ui.eval_page import eval_page
from orchestrator.evaluation.outcomes import ItemOutcome
from orchestrator.evaluation.report import build_report

EXPERTS = ["Ada", "Bo", "Cy", "Di", "Ed"]
LABELS = ["A", "B", "C", "D"]
SIMULATED = {"skill": 0.7, "options": 2}


def outcomes(items: int, rnd: random.Random) -> list[ItemOutcome]:
    out = []
    for arm in ("panel", "single", "self_consistency"):
        for i in range(items):
            rounds: list[dict[str, Any]] = ([{"s": "1"}] if arm == "single" else
                                            [{e: "1" if rnd.random() < 0.7 else "2" for e in EXPERTS}
                                             for _ in range(2)])
            reviews = [{"reviewer": e, "labels": LABELS, "authors": [x for x in EXPERTS if x != e],
                        "ranking": rnd.sample(LABELS, 4)} for e in EXPERTS] if arm == "panel" else []
            out.append(ItemOutcome(
                arm=arm, item_id=str(i), expected="1", answer="1" if rnd.random() < 0.8 else "2",
                correct=rnd.random() < 0.8, plan_id=f"plan-{arm}-{i}", status="completed", tokens=1000,
                rounds=rounds, rounds_correct=[{e: a == "1" for e, a in r.items()} for r in rounds],
                rounds_planned=2, reviews=reviews))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args()
    record = {"name": "render", "arms": [
        {"name": "panel", "kind": "panel", "baseline": False, "experts": 5, "simulation": SIMULATED},
        {"name": "single", "kind": "single", "baseline": True, "experts": 1, "simulation": SIMULATED},
        {"name": "self_consistency", "kind": "self_consistency", "baseline": True, "experts": 5,
         "simulation": SIMULATED}]}
    given = outcomes(args.items, random.Random(1))
    t0 = time.perf_counter()
    report = build_report(record, given)
    t1 = time.perf_counter()
    report.table()
    report.as_json()
    t2 = time.perf_counter()
    eval_page(report, viewer=None, auth=False)
    t3 = time.perf_counter()
    print(f"{args.items} items x 3 arms (5 experts, 2 rounds, reviews): build {1000 * (t1 - t0):.0f} ms, "
          f"table and JSON {1000 * (t2 - t1):.0f} ms, page {1000 * (t3 - t2):.0f} ms")
    print(f"RATIO report render time / goal: {(t3 - t0):.3f} s / 1 s")


if __name__ == "__main__":
    main()
