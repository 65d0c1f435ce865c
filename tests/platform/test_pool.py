"""The local device pool: leases, best fit, device specs."""

from __future__ import annotations

import pytest

from hyperfleet.errors import ConfigError, PoolError
from hyperfleet.platform.pool import Device, LocalPool, parse_devices


def test_leases_are_disjoint_and_returned() -> None:
    pool = LocalPool.from_spec("cpu:4")
    a = pool.try_acquire(2)
    b = pool.try_acquire(2)
    assert a and b and not set(a.devices) & set(b.devices)
    assert pool.try_acquire(1) is None
    pool.release(a)
    c = pool.try_acquire(2)
    assert c is not None and c.devices == a.devices  # lowest indices first


def test_a_lease_of_named_devices_only_when_all_of_them_are_free() -> None:
    pool = LocalPool.from_spec("cpu:4")
    cpu = [Device("cpu", i) for i in range(4)]
    held = pool.try_acquire(1)
    assert held is not None and held.devices == (cpu[0],)
    assert pool.try_acquire_these((cpu[0], cpu[2])) is None  # cpu:0 is held
    assert pool.free == 3
    got = pool.try_acquire_these((cpu[3], cpu[1]))
    assert got is not None and got.devices == (cpu[1], cpu[3])
    assert pool.free == 1 and pool.try_acquire(2) is None
    pool.release(got)
    pool.release(held)
    assert pool.free == 4


def test_lease_context_manager_releases_on_error() -> None:
    pool = LocalPool.from_spec("cpu:2")
    with pytest.raises(RuntimeError), pool.lease(2):
        raise RuntimeError("trial crashed")
    assert pool.free == 2


def test_release_twice_is_a_bug() -> None:
    pool = LocalPool.from_spec("cpu:2")
    lease = pool.try_acquire(1)
    pool.release(lease)
    with pytest.raises(AssertionError):
        pool.release(lease)


def test_trial_larger_than_pool_is_an_error() -> None:
    with pytest.raises(PoolError, match="needs 3 devices but the pool has 2"):
        LocalPool.from_spec("cpu:2").try_acquire(3)


def test_cuda_spec_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # a host with 4 GPUs
    devices = parse_devices("cuda:3,1")
    assert devices == [Device("cuda", 1), Device("cuda", 3)]
    lease = LocalPool(devices).try_acquire(2)
    assert lease.env(4) == {"CUDA_VISIBLE_DEVICES": "1,3"}


def test_cpu_lease_hides_gpus_and_caps_threads() -> None:
    lease = LocalPool.from_spec("cpu:2").try_acquire(1)
    env = lease.env(3)
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["OMP_NUM_THREADS"] == "3"


def test_auto_without_gpus_gives_enough_cpu_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    devices = parse_devices("auto", min_cpu_slots=64)
    assert len(devices) == 64 and {d.kind for d in devices} == {"cpu"}


@pytest.mark.parametrize("spec", ["gpu:1", "cpu:", "cpu:0", "cuda:a"])
def test_bad_device_spec(spec: str) -> None:
    with pytest.raises(ConfigError, match="--devices"):
        parse_devices(spec)


def test_gpus_that_are_not_there_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a host without GPUs
    with pytest.raises(ConfigError, match=r"names GPUs this host doesn't have \(it has no GPU\)"):
        parse_devices("cuda:0,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match="it has GPUs 0-1"):
        parse_devices("cuda:1,2")
    assert len(parse_devices("cuda:0,1")) == 2


# -- shares: trial.resources.per_device ----------------------------------------------------------


def test_k_shares_fill_one_slot_and_the_next_waits_for_one_back() -> None:
    pool = LocalPool.from_spec("cpu:1")
    leases = [pool.try_acquire(1, per_device=4) for _ in range(4)]
    assert all(lease is not None for lease in leases)
    assert [(str(x.devices[0]), x.share, x.per_device) for x in leases if x] == [
        ("cpu:0", 0, 4),
        ("cpu:0", 1, 4),
        ("cpu:0", 2, 4),
        ("cpu:0", 3, 4),
    ]
    assert pool.try_acquire(1, per_device=4) is None, "a fifth share does not fit"
    assert pool.try_acquire(1) is None, "nor a whole-device trial"
    second = leases[1]
    assert second is not None
    pool.release(second)
    again = pool.try_acquire(1, per_device=4)
    assert again is not None and again.share == 1, "the freed lane is taken again"
    with pytest.raises(AssertionError, match="released twice"):
        pool.release(second)


def test_shares_pack_one_device_before_the_next_and_leave_whole_devices_free() -> None:
    pool = LocalPool.from_spec("cpu:3")
    whole = pool.try_acquire(1)
    assert whole is not None and str(whole.devices[0]) == "cpu:0"
    shares = [pool.try_acquire(1, per_device=2) for _ in range(3)]
    assert [str(x.devices[0]) for x in shares if x] == ["cpu:1", "cpu:1", "cpu:2"]
    assert pool.free == 0 and pool.try_acquire(1) is None
    assert pool.try_acquire(1, per_device=2) is not None, "cpu:2 has room for one more half"


def test_shares_of_different_sizes_add_up_to_one_device_at_most() -> None:
    pool = LocalPool.from_spec("cpu:1")
    half = pool.try_acquire(1, per_device=2)
    quarters = [pool.try_acquire(1, per_device=4) for _ in range(2)]
    assert half is not None and all(quarters)
    assert [q.share for q in quarters if q] == [1, 2]
    assert pool.try_acquire(1, per_device=4) is None, "1/2 + 1/4 + 1/4 is the whole device"
    pool.release(half)
    assert pool.try_acquire(1, per_device=2) is not None


def test_a_share_of_a_cpu_slot_gets_its_share_of_the_threads() -> None:
    pool = LocalPool.from_spec("cpu:1")
    lease = pool.try_acquire(1, per_device=4)
    assert lease is not None
    assert lease.env(8)["OMP_NUM_THREADS"] == "2"
    assert lease.env(2)["OMP_NUM_THREADS"] == "1", "never below one thread"


def test_first_leases_plan_shares_without_holding_them() -> None:
    pool = LocalPool.from_spec("cpu:2")
    held = pool.try_acquire(1, per_device=3)
    first = pool.first_leases(1, per_device=3, n=8)
    assert [(str(x.devices[0]), x.share) for x in first] == [
        ("cpu:0", 1), ("cpu:0", 2), ("cpu:1", 0), ("cpu:1", 1), ("cpu:1", 2),
    ]  # fmt: skip
    assert held is not None and pool.free == 1, "planning took nothing"
