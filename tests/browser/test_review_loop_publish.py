"""The review loop closed in Chromium on a real agent (simulated replies; the gateway's classifier and policy are the
real ones): messages the shipped model is unsure of reach the review queue masked, a reviewer labels each with the
keyboard, the labels become a dataset version, it is trained and compared, published to the pool from the model
page, the node takes the model, and the pool page's live share of requests below the confidence floor falls for the
same traffic. The keyboard details (Enter, undo, j/k) and the override reason: tests/browser/test_review_queue_flow.py.

The messages are picked at run time by the shipped classifier (those below the floor), so the test follows the model.
"""

import json
import time
import urllib.request

import pytest

from controlplane.datasets.models import IntentModel
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.reviews.models import ReviewItem
from engine_node.policy.dataset import load_examples
from engine_node.policy.intent import IntentClassifier
from tests.browser.conftest import off_this_thread
from tests.browser.sessions import open_signed_in
from tests.conftest import SHORT_SAMPLE_WINDOW_S
from tests.engine_node.fleet import AgentProcess, wait_until
from tests.engine_node.served_pool import served_pool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FLOOR = 0.8
PROFILE = """
latency:
  time_scale: 0.05
reply_length:
  median: 6
  sigma: 0.2
  min: 4
  max: 8
"""
DOCUMENT = {
    "inference_params": {
        "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16, "continuation_max_rounds": 0},
        "degradation": {"max_tokens": 16},
        # A small base dataset trains in seconds; its held-out accuracy is judged against this line, not the 0.92
        # a production pool asks for.
        "intent": {"confidence_floor": FLOOR, "accuracy_floor": 0.5},
    }
}
# Wording a shop's model was not trained on, each with the intent a reviewer would give it; one carries a phone number
# the node must mask before it leaves (the reviewer sees it masked and labels it by what is left).
CANDIDATES = [
    ("嗯嗯 那个 你们看着办吧", "other"),
    ("the cup arrived broken, what are you going to do", "return_refund"),
    ("is this moisturiser ok for eczema", "product_recommendation"),
    ("这个能用吗 我手机13812345678", "product_recommendation"),
    ("hmm ok so what now", "other"),
    ("还行吧 就这样", "other"),
    ("lorem ipsum dolor", "other"),
    ("xkcd 1234 blorp", "other"),
    ("嘿", "other"),
]
MASKED = {"这个能用吗 我手机<PHONE>": "product_recommendation"}
INTENT_TRACE_BELOW_FLOOR = 10  # static/js/metrics_charts.js: ten confidence buckets, then the share below the floor


def unsure(classifier: IntentClassifier) -> list[tuple[str, str]]:
    chosen = [(text, label) for text, label in CANDIDATES if classifier.classify(text).confidence < FLOOR]
    assert len(chosen) >= 3, "the shipped model is sure of nearly every candidate: add vaguer ones"
    return chosen


def base_dataset_csv(per_label: int = 120) -> str:
    """A stratified slice of the shipped training data (whole templates kept together), small enough to train fast."""
    taken: dict[str, int] = {}
    lines = ["text,label,lang,template"]
    for example in load_examples():
        if taken.get(example.label, 0) >= per_label:
            continue
        taken[example.label] = taken.get(example.label, 0) + 1
        text = example.text.replace('"', '""')
        lines.append(f'"{text}",{example.label},{example.lang},{example.template}')
    return "\n".join(lines) + "\n"


@pytest.fixture
def served(tmp_path, sre, short_sample_window):
    """The pool's nodes and daphne on 2 s sample windows (tests/conftest.py), so a share turns over in seconds."""
    with off_this_thread(
        served_pool(tmp_path, sre, document=DOCUMENT, profile=PROFILE, reason="review loop test")
    ) as served:
        yield served


def model_in_use(agent: AgentProcess) -> str:
    """The sha256 of the intent model the node's gateway decides with (its explain endpoint says)."""
    request = urllib.request.Request(
        f"{agent.url}/v1/policy/explain",
        data=json.dumps({"message": "hello"}).encode(),
        headers={**agent.headers, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["intent_model"]


def send_for(agent: AgentProcess, texts: list[str], seconds: float) -> None:
    """Customers' traffic: the texts in turn for `seconds` (past the node's sample window)."""
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        status, body = agent.chat(texts[sent % len(texts)])
        assert status == 200, body
        sent += 1


def charted_share(page) -> float | None:
    """The newest point of the pool page's 'below the floor' line."""
    return page.evaluate(
        f"(document.getElementById('chart-intent').data || [])[{INTENT_TRACE_BELOW_FLOOR}]?.y.slice(-1)[0] ?? null"
    )


def settled_share(page, agent: AgentProcess, texts: list[str]) -> float:
    """Traffic for two sample windows and a second, then the share the pool page charts once a sample has covered
    only that traffic."""
    send_for(agent, texts, 2 * SHORT_SAMPLE_WINDOW_S + 1)
    wait_until(lambda: agent.health().get("sample"), 10, "a sample")
    share = agent.health()["sample"]["m"]["intent_below_floor_share"]
    wait_until(lambda: charted_share(page) == pytest.approx(share, abs=0.02), 15, f"the chart to show {share}")
    return charted_share(page)


def test_unsure_messages_labelled_trained_and_published_in_the_browser_lower_the_pool_share(
    served, sre, new_page, shot
):
    (agent,), pool, server = served
    messages = unsure(IntentClassifier.load())
    texts = [text for text, _ in messages]
    labels = dict(messages) | MASKED

    watch = new_page()  # an on-call engineer's tab on the pool page, open throughout
    open_signed_in(watch, server.url, "oncall", f"/pools/{pool.name}/")
    watch.locator("#stream-state.flowing").wait_for(timeout=15_000)
    before = settled_share(watch, agent, texts)
    assert before > 0.9, before  # the built-in model is unsure of every one of them
    watch.locator("[data-testid=intent-chart]").scroll_into_view_if_needed()
    shot(watch, "review-loop-share-before")

    # The node sampled them, masked, into the queue (a batch goes out with a sample, at most every 5 s).
    wait_until(lambda: ReviewItem.objects.count() >= len(texts), 30, "the sampled messages in the queue")
    # The base the reviewer builds on: a slice of the shop's data, uploaded earlier.
    intent_dataset_create(actor=sre, name="shop-slice", content=base_dataset_csv(), fmt="csv")

    page = new_page()
    open_signed_in(page, server.url, "sre", "/intents/review/")
    rows = page.locator("[data-testid=review-pending] tbody tr[data-id]")
    assert rows.count() == ReviewItem.objects.count()
    assert "13812345678" not in page.locator("[data-testid=review-pending]").inner_text()
    for i in range(rows.count()):
        row = rows.nth(i)
        text = row.locator(".review-text").inner_text()
        key = page.get_attribute(f"[data-key][data-label={labels[text]}]", "data-key")
        page.keyboard.press(key)  # labels the selected row; the cursor moves to the next
        page.locator(f'tr[data-id="{row.get_attribute("data-id")}"].done').wait_for()
    wait_until(lambda: not ReviewItem.objects.filter(status="pending").exists(), 15, "every label stored")
    assert {item.text: item.label for item in ReviewItem.objects.all()} == {
        text: labels[text] for text in ReviewItem.objects.values_list("text", flat=True)
    }

    page.select_option("select[name=base]", "shop-slice")
    page.fill("input[name=name]", "shop-slice-r1")
    page.click("[data-testid=review-dataset-form] button")
    page.wait_for_url(f"{server.url}/intents/datasets/shop-slice-r1/")
    page.fill("#train-form input[name=epochs]", "6")
    page.click("#train-form button[type=submit]")
    page.wait_for_url(f"{server.url}/intents/datasets/shop-slice-r1/models/1/")
    page.locator("[data-testid=review-comparison]").wait_for(timeout=240_000)
    model = IntentModel.objects.get(dataset__name="shop-slice-r1", number=1)
    assert model.status == "succeeded", model.progress_text
    shot(page, "review-loop-candidate")

    page.select_option("#publish-form select[name=pool]", pool.name)
    page.fill("#publish-form textarea[name=reason]", "reviewed messages learned")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#publish-form button[type=submit]")
    page.locator("[data-testid=releases] .badge.state-succeeded").wait_for()
    assert pool.name in page.locator("[data-testid=releases]").inner_text()
    wait_until(lambda: model_in_use(agent) == model.sha256, 30, "the node to use the published model")

    after = settled_share(watch, agent, texts)
    watch.locator("[data-testid=intent-chart]").scroll_into_view_if_needed()
    shot(watch, "review-loop-share-after")
    print(
        f"{len(texts)} messages; charted share below the floor {before:.3f} -> {after:.3f}; "
        f"accuracy {model.accuracy:.3f}"
    )
    assert after < before - 0.5, (before, after)
