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
