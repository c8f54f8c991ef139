"""Live study progress over the real ASGI app: a study's page and the list get `tuning.progress` on a cancel (an
on-call engineer may watch); anonymous browsers are refused."""

import pytest

from controlplane.tuning.consumers import FORBIDDEN
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.services import study_cancel
from tests.datasets.test_training import session_headers
from tests.progress_sockets import anonymous_connect, events_on_change
from tests.tuning.conftest import study_args

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancel_reaches_the_study_page_and_the_list(tuning_world, users):
    sre = users["sre"]
    # A queued study as a row (the service would hand it to its task at once).
    args = study_args(tuning_world)
    study = TuningStudy.objects.create(
        pool=args["pool"],
        base_version=args["base_version"],
        log=args["log"],
        space=args["space"],
        objective="min_p99",
        constraints={"p99_max_s": 1.8, "error_rate_max": 0.005},
        budget=3,
        replay_spec={"qps": 20, "duration_s": 5, "selection": "all", "arrival": "poisson"},
        reason="x",
        created_by=sre,
    )
    headers = session_headers(users["oncall"])

    events, nothing = events_on_change(
        headers,
        f"/ws/tuning/{study.pk}/",
        "/ws/tuning/",
        f"/ws/tuning/{study.pk + 1}/",
        lambda: study_cancel(actor=sre, study=study, reason="wrong log"),
    )
    assert [(e["type"], e["study_id"], e["status"], e["budget"]) for e in events] == [
        ("tuning.progress", study.pk, "cancelled", 3)
    ] * 2
    assert nothing


def test_anonymous_browsers_are_refused(db):
    assert anonymous_connect("/ws/tuning/") == (False, FORBIDDEN)
