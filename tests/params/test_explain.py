"""The "try a message" reading of a version: same policy code as the gateway, with the pool's bundle."""

import datetime

import pytest
from django.urls import reverse
from django.utils import timezone

from controlplane.nodes.services.pools import pool_create
from controlplane.operations.models import ConversationOverride
from controlplane.params.models import Whitelist
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create

pytestmark = pytest.mark.django_db


def make_version(params=None, *, name="chat"):
    from controlplane.accounts.models import User

    actor = User.objects.get(role="admin")
    if not Whitelist.objects.filter(name="legal").exists():
        whitelist_create(actor=actor, name="legal", scenarios=["legal", "legal_policy"])
    template = template_create(actor=actor, name=name)
    return template_version_create(
        actor=actor, template=template, document={"inference_params": params or {}}, base_number=None
    )


def _explain(client, version, **body):
    url = reverse("api:template-version-explain", args=[version.template.name, version.number])
    return client.post(url, body, format="json")


def test_a_payment_amount_is_strict_and_a_recommendation_creative(api_for, users):
    version = make_version()
    client = api_for("agent")
    decision = _explain(client, version, message="我付了¥299.00怎么还显示未支付").json()["decision"]
    assert (decision["tier"], decision["tier_rule"], decision["temperature"]) == ("strict", "regex", 0.3)
    assert decision["regex_hits"][0]["match"] == "¥299.00"
    decision = _explain(client, version, message="有什么适合送女朋友的生日礼物推荐吗").json()["decision"]
    assert (decision["tier"], decision["intent"]) == ("creative", "product_recommendation")
    assert decision["max_tokens"] == 256 and decision["queue"] == "short"


def test_the_version_s_own_parameters_decide(api_for, users):
    version = make_version(params={"max_tokens": {"default": 200}, "temperature": {"creative": 1.1}})
    decision = _explain(api_for("oncall"), version, message="有什么推荐的手机", max_tokens=999).json()["decision"]
    assert (decision["temperature"], decision["max_tokens"]) == (1.1, 200)


def test_a_pool_brings_its_overrides(api_for, users):
    version = make_version()
    pool = pool_create(actor=users["admin"], name="prod-main", is_production=True)
    ConversationOverride.objects.create(
        pool=pool, conversation_id="c-42", tier="creative", reason="VIP", created_by=users["agent"],
        expires_at=timezone.now() + datetime.timedelta(minutes=30),
    )  # fmt: skip
    client = api_for("agent")
    reply = _explain(client, version, message="我付了¥299.00", conversation_id="c-42", pool="prod-main").json()
    assert (reply["decision"]["tier_rule"], reply["pool"]) == ("override", "prod-main")
    assert (
        _explain(client, version, message="我付了¥299.00", conversation_id="c-42").json()["decision"]["tier"]
        == "strict"
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": ""}, "message"),
        ({"message": "hi", "max_tokens": 0}, "max_tokens"),
        ({"message": "hi", "business_tag": "bad tag"}, "business_tag"),
        ({"message": "hi", "pool": "nowhere"}, "pool"),
        ({"message": "hi", "colour": "red"}, "colour"),
    ],
)
def test_bad_input_names_the_field(api_for, users, body, field):
    response = _explain(api_for("agent"), make_version(), **body)
    assert response.status_code == 400
    assert field in response.json()["error"]


def test_a_whitelisted_legal_question_keeps_the_clients_max_tokens_for_a_key_granted_it(api_for, users):
    question, version = {"message": "你们的隐私政策条款怎么说", "max_tokens": 1500}, make_version()
    decision = _explain(api_for("agent"), version, **question, granted_tags=["legal_policy"]).json()
    assert (decision["decision"]["max_tokens"], decision["decision"]["whitelist"]) == (1500, "legal")
    ungranted = _explain(api_for("agent"), version, **question).json()["decision"]
    assert (ungranted["intent"], ungranted["max_tokens"], ungranted["whitelist"]) == ("legal_policy", 256, None)


def test_granted_tags_must_be_tag_names(api_for, users):
    response = _explain(api_for("agent"), make_version(), message="hi", granted_tags=["bad tag"])
    assert response.status_code == 400
    assert "granted_tags" in response.json()["error"]


@pytest.mark.parametrize(
    ("granted_tags", "problem"),
    [([0], "item 0 must be a string"), (["legal", 7], "item 1 must be a string"), ("legal", "must be a list")],
)
def test_granted_tags_must_be_a_list_of_strings_in_json(api_for, users, granted_tags, problem):
    """A JSON body keeps its documented types: 0 is no tag name, as the API description says (it was once read as
    the tag "0")."""
    response = _explain(api_for("agent"), make_version(), message="hi", granted_tags=granted_tags)
    assert response.status_code == 400
    assert response.json()["detail"] == {"granted_tags": [problem]}
