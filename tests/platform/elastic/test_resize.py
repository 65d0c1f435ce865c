"""The resize policy of elastic trials (``platform/elastic/resize.py``): its decisions, pure."""

from __future__ import annotations

from typing import Any

import pytest

from hyperfleet.platform.elastic.resize import ElasticKnobs, ElasticTrial, Resize, decide


def trial(number: int, size: int, **kw: Any) -> ElasticTrial:
    """An elastic trial of 1 to 8 devices, resizable now (past the interval) unless told."""
    values: dict[str, Any] = {"low": 1, "high": 8, "reports_since_resize": 3}
    return ElasticTrial(number, size, **{**values, **kw})


ALL = ElasticKnobs(share=1.0)
"""The best-ranked trial takes every idle device it may (no sharing): the rank order alone."""


def test_idle_devices_go_to_the_best_ranked_trial_first_rung_then_value() -> None:
    trials = [
        trial(0, 1, rung=1, score=-0.2),
        trial(1, 1, rung=2, score=-0.9),  # the furthest rung wins over a better value
        trial(2, 1, rung=1, score=-0.1),
    ]
    assert decide(4, [], trials, ALL) == [Resize(1, 1, 5)]
    assert decide(9, [], trials, ALL) == [Resize(1, 1, 8), Resize(2, 1, 3)]
    # within a rung, the better value; a trial without a value yet comes last
    same_rung = [trial(0, 1, score=None), trial(1, 1, score=-0.5), trial(2, 1, score=-0.4)]
    assert decide(7, [], same_rung, ALL) == [Resize(2, 1, 8)]
    assert decide(14, [], same_rung, ALL) == [Resize(2, 1, 8), Resize(1, 1, 8)]


def test_idle_devices_are_shared_down_the_ranks_by_default() -> None:
    trials = [trial(0, 1, score=-0.3), trial(1, 1, score=-0.1), trial(2, 1, score=-0.2)]
    # one half (rounded up) of those left to each while a trial after it could take some:
    # 8 -> 4 to the best, 2 of the 4 left to the next, the last 2 to the last
    assert decide(8, [], trials) == [Resize(1, 1, 5), Resize(2, 1, 3), Resize(0, 1, 3)]
    assert decide(1, [], trials) == [Resize(1, 1, 2)]  # one device: the best-ranked's
    # a trial alone takes all it may; the share is of the devices, within each one's max
    assert decide(8, [], [trial(0, 1)]) == [Resize(0, 1, 8)]
    capped = [trial(0, 1, high=2, score=1.0), trial(1, 1, high=8)]
    assert decide(10, [], capped) == [Resize(0, 1, 2), Resize(1, 1, 8)]
    # another share: two thirds of those left; a size the batch does not split is skipped
    third = ElasticKnobs(share=2 / 3)
    assert decide(9, [], trials, third) == [Resize(1, 1, 7), Resize(2, 1, 3), Resize(0, 1, 2)]
    powers = [trial(0, 1, score=1.0, sizes=(1, 2, 4, 8)), trial(1, 1)]
    assert decide(6, [], powers) == [Resize(0, 1, 4), Resize(1, 1, 4)]
    with pytest.raises(ValueError, match="share must be above 0 and at most 1"):
        ElasticKnobs(share=0)
    with pytest.raises(ValueError, match="share must be above 0 and at most 1"):
        ElasticKnobs(share=1.5)


def test_a_trial_grows_no_further_than_its_max_and_only_to_sizes_it_may_run_at() -> None:
    assert decide(10, [], [trial(0, 2, high=4)]) == [Resize(0, 2, 4)]
    assert decide(10, [], [trial(0, 4, high=4)]) == []
    powers = trial(0, 1, sizes=(1, 2, 4, 8))
    assert decide(2, [], [powers]) == [Resize(0, 1, 2)]
    assert decide(6, [], [powers]) == [Resize(0, 1, 4)]


def test_a_waiting_trial_takes_devices_back_from_the_lowest_ranked_first() -> None:
    trials = [
        trial(0, 4, rung=2, score=-0.1),
        trial(1, 3, rung=1, score=-0.3),
        trial(2, 3, rung=1, score=-0.2),
    ]
    # one device wanted: the lowest-ranked (trial 1) gives just one
    assert decide(0, [1], trials) == [Resize(1, 3, 2)]
    # four: trial 1 down to its min (2 back), then trial 2 (2 more: to its min)
    assert decide(0, [4], trials) == [Resize(1, 3, 1), Resize(2, 3, 1)]
    # five: then one of the best-ranked trial's
    assert decide(0, [5], trials) == [Resize(1, 3, 1), Resize(2, 3, 1), Resize(0, 4, 3)]
    # free devices count first
    assert decide(1, [2], trials) == [Resize(1, 3, 2)]
    assert decide(2, [2], trials) == []


def test_no_trial_gives_back_what_cannot_make_the_waiting_trial_fit() -> None:
    trials = [trial(0, 3, low=2), trial(1, 2, low=2)]
    assert decide(0, [2], trials) == []  # one device spare in all
    assert decide(1, [2], trials) == [Resize(0, 3, 2)]


def test_the_queue_is_served_in_order_and_nothing_grows_while_a_trial_waits() -> None:
    trials = [trial(0, 4, score=-0.1), trial(1, 4, score=-0.2)]
    assert decide(0, [2, 7], trials) == [Resize(1, 4, 2)]  # the second cannot fit after it
    assert decide(0, [2, 2], trials) == [Resize(1, 4, 1), Resize(0, 4, 3)]
    assert decide(3, [10], trials) == []  # more than all can give: nothing shrinks or grows


def test_a_trial_resizes_at_most_once_per_min_interval_reports() -> None:
    knobs = ElasticKnobs(min_interval=4)
    fresh = trial(0, 1, reports_since_resize=3)
    assert decide(4, [], [fresh], knobs) == []
    assert decide(4, [], [trial(0, 1, reports_since_resize=4)], knobs) == [Resize(0, 1, 5)]
    # the interval holds for shrinking too, and a pending resize is never stacked on
    assert decide(0, [1], [trial(0, 4, reports_since_resize=2)], knobs) == []
    assert decide(0, [1], [trial(0, 4, pending=True)]) == []
    assert decide(4, [], [trial(0, 4, pending=True)]) == []


def test_disabled_the_policy_decides_nothing_and_the_interval_is_checked() -> None:
    off = ElasticKnobs(enabled=False)
    assert decide(8, [], [trial(0, 1)], off) == []
    assert decide(0, [1], [trial(0, 4)], off) == []
    with pytest.raises(ValueError, match="min_interval must be at least 1"):
        ElasticKnobs(min_interval=0)


def test_a_fixed_range_or_a_trial_at_its_bounds_is_left_alone() -> None:
    assert decide(8, [], [trial(0, 2, low=2, high=2)]) == []
    assert decide(0, [1], [trial(0, 1)]) == []  # at its min: nothing to give
    grown = decide(8, [], [trial(0, 1), trial(1, 8, score=1.0)])
    assert grown == [Resize(0, 1, 8)]  # the better one is at its max already


def test_a_pending_growth_may_be_enlarged_but_a_pending_shrink_is_kept() -> None:
    # trial 0 grows to 4 at its next report (pending); 3 more devices fell idle since
    growing = trial(0, 4, score=1.0, pending=True, growing=True, reports_since_resize=0)
    assert decide(3, [], [growing, trial(1, 1)], ALL) == [Resize(0, 4, 7)]
    assert decide(6, [], [growing, trial(1, 1)], ALL) == [Resize(0, 4, 8), Resize(1, 1, 3)]
    assert decide(6, [], [growing, trial(1, 1)]) == [Resize(0, 4, 7), Resize(1, 1, 4)]
    shrinking = trial(0, 2, score=1.0, pending=True, reports_since_resize=0)
    assert decide(3, [], [shrinking, trial(1, 1)]) == [Resize(1, 1, 4)]
