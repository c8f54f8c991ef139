"""The background loops' health record: states, and a failing loop logged once, reminded, and its recovery logged."""

import logging
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from controlplane.lib import loop_health


@pytest.fixture
def loop(monkeypatch):
    monkeypatch.setattr(loop_health, "_records", {})
    monkeypatch.setattr(loop_health, "_logs", {})
    loop_health.loop_register("test-loop", description="every 1 s", period_s=1.0)
    return "test-loop"


def state_of(name: str, now=None) -> dict:
    return next(loop for loop in loop_health.loops_report(now, with_error=True)["loops"] if loop["loop"] == name)


def test_a_failure_is_logged_once_with_its_context_then_reminded_and_the_recovery_logged(loop, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="controlplane.loops")
    for _ in range(5):
        loop_health.loop_failed(loop, OperationalError("database is locked"), context="periodic task t")
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR and errors[0].exc_info is not None
    assert "test-loop failed (periodic task t)" in errors[0].getMessage()
    failing = state_of(loop)
    assert (failing["state"], failing["failures"]) == ("failing", 5)
    assert failing["last_error"] == "periodic task t: OperationalError: database is locked"
    assert loop_health.loops_report()["status"] == "failing"

    monkeypatch.setattr(loop_health, "REMIND_EVERY_S", 0.0)
    loop_health.loop_failed(loop, OperationalError("database is locked"), context="periodic task t")
    reminder = caplog.records[-1]
    assert reminder.levelno == logging.WARNING and reminder.exc_info is None
    assert "still failing: 6 failure(s) in a row" in reminder.getMessage()
    assert "4 more failure(s) since the last line" in reminder.getMessage()

    loop_health.loop_succeeded(loop)
    assert "test-loop recovered after 6 failure(s)" in caplog.records[-1].getMessage()
    recovered = state_of(loop)
    assert (recovered["state"], recovered["failures"]) == ("ok", 0)
    assert recovered["last_success_at"] is not None and recovered["last_error"]
    lines = len(caplog.records)
    loop_health.loop_succeeded(loop)
    assert len(caplog.records) == lines, "a success after a success logs nothing"


def test_a_failure_the_log_did_not_show_has_no_recovery_line(loop, caplog):
    caplog.set_level(logging.INFO, logger="controlplane.loops")
    loop_health.loop_failed(loop, OperationalError("locked"), context="a")
    loop_health.loop_succeeded(loop)
    lines = len(caplog.records)
    # Within the minute: counted on the record, not logged; nor is its recovery.
    loop_health.loop_failed(loop, OperationalError("locked"), context="a")
    assert state_of(loop)["state"] == "failing"
    loop_health.loop_succeeded(loop)
    assert len(caplog.records) == lines


def test_a_periodic_loop_without_a_run_stalls_and_a_stopped_one_shows_stopped(loop):
    later = timezone.now() + timedelta(seconds=loop_health.STALL_MIN_S + 1)
    assert state_of(loop)["state"] == "ok"
    assert state_of(loop, later)["state"] == "stalled"
    loop_health.loop_running(loop)
    assert state_of(loop)["state"] == "ok"
    loop_health.loop_stopped(loop, RuntimeError("thread ended"))
    stopped = state_of(loop)
    assert stopped["state"] == "stopped" and stopped["last_error"] == "stopped: RuntimeError: thread ended"


def test_records_name_their_process_and_the_public_report_carries_no_error_text(loop):
    loop_health.loop_failed(loop, OperationalError("secret detail"), context="node x")
    report = loop_health.loops_report()
    assert report["process"] == loop_health.process_name()
    assert all("last_error" not in entry for entry in report["loops"])
    assert {entry["process"] for entry in report["loops"]} == {loop_health.process_name()}
