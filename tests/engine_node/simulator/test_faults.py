"""Fault injection through /sim/faults and SIMULATOR_FAULTS: errors, failing health, crash, a wedged engine, a GPU
memory leak."""

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.subprocess


def test_error_rate_one_fails_every_completion_while_health_stays_up(start_simulator):
    simulator = start_simulator()

    assert simulator.post("/sim/faults", {"error_rate": 1.0}).json["error_rate"] == 1.0
    failures = [simulator.chat(f"try {i}", max_tokens=2) for i in range(5)]
    assert {r.status for r in failures} == {500}
    assert failures[0].json["error"]["type"] == "InternalServerError"
    assert simulator.get("/health").status == 200

    simulator.post("/sim/faults", {"error_rate": 0.0})
    assert simulator.chat("again", max_tokens=2).status == 200


def test_unhealthy_fault_turns_health_503_and_delete_clears_it(start_simulator):
    simulator = start_simulator()

    simulator.post("/sim/faults", {"unhealthy": True})
    assert simulator.get("/health").status == 503
    assert simulator.get("/sim/faults").json["unhealthy"] is True

    assert simulator.request("DELETE", "/sim/faults").json["unhealthy"] is False
    assert simulator.get("/health").status == 200


def test_latency_factor_slows_steps(start_simulator):
    simulator = start_simulator(profile={"latency": {"time_scale": 0.5}})
    simulator.post("/sim/faults", {"latency_factor": 20.0})

    with pytest.raises(TimeoutError):
        # 10 decode steps of ~5 ms each take ~1 s at 20x; the client gives up after 0.3 s.
        simulator.chat("slow", max_tokens=10, ignore_eos=True, timeout=0.3)
    simulator.post("/sim/faults", {"latency_factor": 1.0})
    assert simulator.chat("fast", max_tokens=10, ignore_eos=True, timeout=2).status == 200


def test_crash_fault_exits_70_right_away(start_simulator):
    simulator = start_simulator()

    with contextlib.suppress(OSError):  # the process may die before its reply is read
        simulator.post("/sim/faults", {"crash": True}, timeout=2)
    assert simulator.process.wait(timeout=5) == 70
    assert "simulated crash fault" in simulator.log()


def test_hang_fault_never_answers_while_health_says_200(start_simulator):
    simulator = start_simulator()
    simulator.post("/sim/faults", {"hang": True})

    with pytest.raises(TimeoutError):
        simulator.chat("are you there?", max_tokens=2, timeout=0.5)
    assert simulator.get("/health", timeout=2).status == 200
    assert simulator.get("/v1/models", timeout=2).status == 200

    simulator.post("/sim/faults", {"hang": False})
    assert simulator.chat("now?", max_tokens=2, timeout=2).status == 200


def test_faults_from_the_environment_apply_at_start(start_simulator):
    simulator = start_simulator(env={"SIMULATOR_FAULTS": json.dumps({"unhealthy": True, "latency_factor": 2.0})})

    assert simulator.get("/health").status == 503
    assert simulator.get("/sim/faults").json == {
        "latency_factor": 2.0, "error_rate": 0.0, "memory_leak_mb_per_s": 0.0, "unhealthy": True, "crash": False,
        "hang": False, "spec_acceptance_rate": None,
    }  # fmt: skip


def test_faults_from_the_profile_apply_at_start(start_simulator):
    simulator = start_simulator(profile={"faults": {"error_rate": 1.0}})

    assert simulator.chat("fails", max_tokens=2).status == 500


@pytest.mark.parametrize(
    "body",
    [{"error_rate": 2}, {"hang": "yes"}, {"explode": True}, [1], {"memory_leak_mb_per_s": -1},
     {"memory_leak_mb_per_s": "fast"}],
)  # fmt: skip
def test_invalid_faults_are_refused(simulator, body):
    result = simulator.post("/sim/faults", body)

    assert result.status == 400
    assert simulator.get("/sim/faults").json["error_rate"] == 0.0


def test_memory_leak_raises_memory_used_and_lowers_utilisation_until_the_memory_is_allocated_again(start_simulator):
    """The simulated GPU (simulated figures): memory used is vLLM's reservation plus what leaked; under a steady load
    the leak's allocator waits leave the GPU idle, so utilisation falls; sleep + wake-up allocates from scratch."""
    simulator = start_simulator(profile={"latency": {"time_scale": 0.5}})

    def gpu() -> tuple[float, float]:
        return simulator.metric("sim:gpu_utilization_ratio"), simulator.metric("sim:gpu_memory_used_ratio")

    def busy_gpu() -> tuple[float, float]:
        # A long reply keeps the engine stepping for the whole reading.
        with ThreadPoolExecutor(1) as pool:
            reply = pool.submit(simulator.chat, "busy", max_tokens=200, ignore_eos=True, timeout=30)
            time.sleep(1.2)
            reading = gpu()
            assert reply.result().status == 200
        return reading

    util_before, memory_before = busy_gpu()
    assert memory_before == pytest.approx(0.9)  # the reservation, nothing leaked
    assert util_before > 0.5
    # The default profile's 16 GiB GPU: its 10 % headroom (1.6 GiB) leaks away in about three seconds.
    simulator.post("/sim/faults", {"memory_leak_mb_per_s": 500.0})
    time.sleep(1.5)
    util_after, memory_after = busy_gpu()
    assert memory_after > memory_before + 0.04
    assert util_after < util_before * 0.6
    assert simulator.get("/sim/faults").json["memory_leak_mb_per_s"] == 500.0

    simulator.post("/sim/faults", {"memory_leak_mb_per_s": 0.0})
    assert simulator.post("/sleep?level=1").status == 200
    assert simulator.post("/wake_up").status == 200
    assert gpu()[1] == pytest.approx(0.9)
