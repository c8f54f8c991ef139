"""A study's run against a pool whose node never answers: each candidate is saved and published with the study as the
reason, each trial fails naming why, the study says no trial was measured, and the pool goes back to its version."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.runner import study_run
from controlplane.tuning.services import study_create
from tests.tuning.conftest import study_args

pytestmark = pytest.mark.django_db


def test_trials_whose_nodes_never_ack_fail_and_the_pool_returns_to_its_version(tuning_world, sre, settings):
    settings.TUNING_APPLY_TIMEOUT_S = 1
    study = study_create(actor=sre, **study_args(tuning_world, budget=2, sampler="grid", seed=4))
    study_run(study.pk)
    study.refresh_from_db()
    assert study.status == "failed" and study.trials_done == 2 and study.best_trial is None
    assert study.error.startswith("no trial was measured; the last: 0 of 0 connected nodes ran the candidate")
    trials = list(study.trials.order_by("number"))
    assert [t.state for t in trials] == ["failed", "failed"]
    for trial in trials:
        version = trial.version
        assert version.template == tuning_world["template"] and version.author == sre
        assert version.params["engine"]["max_num_seqs"] == trial.params["engine.max_num_seqs"]
        # The base version's other fields are kept.
        assert version.params["temperature"]["strict"] == 0.2
        assert version.comment.startswith(f"study {study.pk} trial {trial.number} (from chat v2)")
    assert len({t.params["engine.max_num_seqs"] for t in trials}) == 2
    publishes = AuditEntry.objects.filter(action="pool.publish").order_by("id")
    reasons = [e.reason for e in publishes]
    assert reasons[-3:] == [
        f"study {study.pk} trial 1: find max_num_seqs for the festival",
        f"study {study.pk} trial 2: find max_num_seqs for the festival",
        f"study {study.pk} ended: back to chat v1",
    ]
    assert Pool.objects.get(name="staging").desired_version == tuning_world["v1"]
    # Production was never touched.
    assert Pool.objects.get(name="prod-main").desired_version is None
    assert TemplateVersion.objects.filter(template=tuning_world["template"]).count() == 4


def test_a_claimed_study_is_not_run_twice(tuning_world, sre):
    study = study_create(actor=sre, **study_args(tuning_world))
    TuningStudy.objects.filter(pk=study.pk).update(status="cancelled")
    study_run(study.pk)
    assert not study.trials.exists()
