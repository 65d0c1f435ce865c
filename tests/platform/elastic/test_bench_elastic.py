"""The elastic trials' benchmark at its smallest size (``benchmarks/bench_elastic.py --quick``):
the policy of ``platform/elastic/resize.py`` on the simulated launcher and a virtual clock."""

from __future__ import annotations

from benchmarks.bench_elastic import QUICK, compare, table
from benchmarks.elastic_sim import ElasticSim


def test_the_smallest_case_runs_both_ways_and_elastic_fills_the_tail() -> None:
    results = compare(QUICK)
    fixed, elastic = results["fixed"], results["elastic"]
    for r in (fixed, elastic):
        assert r.completed + r.pruned == QUICK.trials and r.completed >= 1
        assert 0 < r.utilisation <= 1 and 0 < r.tail_utilisation <= 1
        assert 0 < r.tail_start_s < r.wall_s and 0 < r.best_done_s <= r.wall_s
    assert fixed.resizes == 0 and elastic.resizes > 0
    assert elastic.tail_utilisation > fixed.tail_utilisation
    assert elastic.wall_s < fixed.wall_s
    text = table(QUICK, results)
    assert "| elastic |" in text and "| fixed |" in text and "tail utilisation" in text


def test_an_elastic_trial_resizes_only_at_its_reports_and_records_each_step_once() -> None:
    sim = ElasticSim(QUICK, elastic=True)
    sim.run()
    assert sim.pool.free == QUICK.devices and sim.reserved == 0  # every lease back
    resized = [t for t in sim.ended if len(t.sizes) > 1]
    assert resized, "no trial was resized"
    assert any(max(t.sizes) > QUICK.low for t in resized)
    for t in sim.ended:
        assert t.steps == list(range(1, t.last_step + 1)), (t.number, t.steps)
        assert all(QUICK.low <= s <= QUICK.high for s in t.sizes)
