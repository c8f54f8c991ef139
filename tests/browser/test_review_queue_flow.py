"""The review queue in Chromium: messages the gateway of a real agent (serving the simulator) was unsure of arrive
masked, are labelled with the keyboard (a digit, Enter for the prediction, u to undo), and become a new version of the
intent dataset. The replies come from the simulator; only the policy's decisions matter here."""

import re

import pytest
from openai import OpenAI

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.nodes.models import EngineNode
from controlplane.params.schema import INTENT_LABELS
from controlplane.reviews.models import ReviewItem
from engine_node.policy.intent import IntentClassifier
from engine_node.policy.rules import Policy
from engine_node.review_sampling import ReviewSampler
from tests.browser.sessions import open_signed_in
from tests.browser.test_review_loop_publish import base_dataset_csv
from tests.engine_node.fleet import TEST_CLIENT_KEY, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Vague or mixed messages, each with personal data the node must mask; the test keeps those the shipped model is
# unsure of (the model may change, the behaviour under test does not).
CANDIDATES = [
    "嗯嗯 那个 我手机13812345678 你们看着办吧",
    "hmm ok so what now, call me +44 20 7946 0958",
    "the cup arrived broken, what are you going to do? order #A1234567",
    "is this moisturiser ok for eczema? my email is jane@example.com",
    "这个能用吗 寄到北京市朝阳区建国路88号",
    "还行吧 卡号4111 1111 1111 1111",
    "so uh yeah 123 Main St",
    "你好在吗 身份证110101199003074578",
]
SECRETS = ["13812345678", "7946 0958", "A1234567", "jane@", "建国路88号", "4111 1111", "123 Main St", "110101199003"]


def unsure_messages(params: dict) -> list[str]:
    policy, sampler = Policy(params, None, IntentClassifier.load()), ReviewSampler()
    return [text for text in CANDIDATES if sampler.reasons(policy.decide(text))][:5]


def test_unsure_messages_arrive_masked_and_are_labelled_with_the_keyboard(staging_served, new_page, shot):
    server = staging_served("gpu-q1")
    node = EngineNode.objects.get(name="gpu-q1")
    messages = unsure_messages(node.applied_version.effective_params)
    assert len(messages) >= 3, "the shipped model is sure of nearly every candidate: pick vaguer ones"
    client = OpenAI(base_url=f"{node.gateway_url}/v1", api_key=TEST_CLIENT_KEY, max_retries=0)
    for text in messages:
        client.chat.completions.create(
            model="simulated-chat-model", messages=[{"role": "user", "content": text}], max_tokens=8
        )
    # The agent sends its batch with a metric sample, at most every 5 s.
    wait_until(lambda: ReviewItem.objects.count() == len(messages), 30, "the sampled messages to be stored")

    # A customer-service agent overrides a conversation's tier; its next message is sampled for that reason, however
    # sure the classifier was.
    page = new_page()
    open_signed_in(page, server.url, "agent", "/overrides/")
    page.select_option("#override-form select[name=pool]", "staging")
    page.fill("#override-form input[name=conversation]", "conv-review-1")
    page.select_option("#override-form select[name=tier]", "strict")
    page.fill("#override-form input[name=reason]", "customer disputes a charge")
    page.click("#override-form button[type=submit]")

    def overridden() -> bool:
        reply = client.chat.completions.with_raw_response.create(
            model="simulated-chat-model",
            messages=[{"role": "user", "content": "那我的包裹到底什么时候到"}],
            max_tokens=8,
            extra_headers={"X-Conversation-Id": "conv-review-1"},
        )
        return reply.headers.get("X-Policy-Rule") == "override"

    wait_until(overridden, 30, "the override to reach the node")
    wait_until(lambda: ReviewItem.objects.filter(reasons__contains=["override"]).exists(), 30, "the overridden one")
    messages.append("那我的包裹到底什么时候到")

    page.goto(f"{server.url}/intents/")
    page.click("[data-testid=review-queue-link]")
    page.wait_for_url(f"{server.url}/intents/review/")
    rows = page.locator("[data-testid=review-pending] tbody tr[data-id]")
    assert rows.count() == len(messages)
    table = page.locator("[data-testid=review-pending]").inner_text()
    for secret in SECRETS:
        assert secret not in table
    assert re.search(r"<(PHONE|ORDER|EMAIL|ADDRESS|CARD|ID)>", table)
    assert "gpu-q1" in table and "staging" in table
    assert "below the floor" in table or "close runner-up" in table
    assert "agent override" in table
    shot(page, "review-queue-pending")

    first, second, third = (rows.nth(i).get_attribute("data-id") for i in range(3))
    predicted = rows.nth(1).get_attribute("data-predicted")
    page.keyboard.press("2")  # the second label, on the selected (first) row
    page.locator(f'tr[data-id="{first}"].done').wait_for()
    page.locator(f'tr[data-id="{second}"].selected').wait_for()
    page.keyboard.press("Enter")  # the prediction, on the row the cursor moved to
    page.locator(f'tr[data-id="{second}"].done').wait_for()
    page.locator(f'tr[data-id="{third}"].selected').wait_for()
    page.keyboard.press("ArrowUp")
    page.locator(f'tr[data-id="{second}"].selected').wait_for()
    page.keyboard.press("j")
    page.locator(f'tr[data-id="{third}"].selected').wait_for()
    page.keyboard.press("7")  # the third gets the seventh label ...
    page.keyboard.press("u")  # ... taken back at once, before the label's call has even returned
    page.locator(f'tr[data-id="{third}"]:not(.done)').wait_for()
    # The calls go out in the order of the keys: once the undo is stored, so are the three labels before it.
    wait_until(lambda: AuditEntry.objects.filter(action="review_item.undo").exists(), 15, "the undo to be stored")
    assert ReviewItem.objects.filter(status="labelled").count() == 2
    assert page.locator("[data-count=labelled]").inner_text() == "2"
    shot(page, "review-queue-labelled")

    assert ReviewItem.objects.get(pk=first).label == INTENT_LABELS[1]
    assert ReviewItem.objects.get(pk=second).label == predicted
    assert ReviewItem.objects.get(pk=third).status == "pending"
    actions = list(AuditEntry.objects.filter(action__startswith="review_item.").values_list("action", "actor_name"))
    assert sorted(actions) == sorted([("review_item.label", "agent")] * 3 + [("review_item.undo", "agent")])

    # The labels become a new version of an intent dataset, trained as any dataset is: a slice of the demo's
    # (its 21,600 messages took ~10 s to train for one epoch; the slice's 1,080 take about one).
    intent_dataset_create(
        actor=User.objects.get(username="sre"), name="shop-slice", content=base_dataset_csv(), fmt="csv"
    )
    page.goto(f"{server.url}/intents/review/")
    page.select_option("select[name=base]", "shop-slice")
    page.fill("input[name=name]", "shop-slice-r2")
    page.click("[data-testid=review-dataset-form] button")
    page.wait_for_url(f"{server.url}/intents/datasets/shop-slice-r2/")
    assert "2 reviewed messages" in page.content()
    shot(page, "review-dataset-version")
    created = AuditEntry.objects.filter(action="intent_dataset.create").order_by("-id").first()
    assert (created.actor_id, created.after["name"]) == (User.objects.get(username="agent").pk, "shop-slice-r2")

    # Trained as today; the model page then sets it beside staging's current model on the queue's messages.
    page.fill("#train-form input[name=epochs]", "1")
    page.click("#train-form button[type=submit]")
    page.wait_for_url(f"{server.url}/intents/datasets/shop-slice-r2/models/1/")
    comparison = page.locator("[data-testid=review-comparison]")
    comparison.wait_for(timeout=240_000)
    summary = comparison.locator("[data-testid=comparison-summary]").inner_text()
    assert "current: built-in model" in summary.lower() and "candidate: shop-slice-r2 #1" in summary.lower()
    assert "Accuracy on 2 reviewed messages" in summary
    assert f"{len(messages)} sampled messages" in summary
    assert (
        comparison.locator("[data-testid=comparison-trained-on]")
        .inner_text()
        .startswith("The candidate's dataset holds 2 of the 2")
    )
    assert comparison.locator("[data-testid=comparison-per-label] tbody tr").count() == len(INTENT_LABELS)
    shot(page, "review-model-comparison")
