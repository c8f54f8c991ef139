"""Tuning staff in Chromium ask the version page what a gateway would do with a customer message, and why."""

import pytest

from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _explain(page, message, **fields):
    form = page.locator("#explain-form")
    form.locator("textarea[name=message]").fill(message)
    for name, value in fields.items():
        selector = f"select[name={name}]" if name == "pool" else f"input[name={name}]"
        if name == "pool":
            form.locator(selector).select_option(value)
        else:
            form.locator(selector).fill(value)
    form.locator("button[type=submit]").click()


def _value(page, name):
    return page.locator(f'#explain-result tr[data-value="{name}"]').inner_text()


def test_try_a_message_explains_tier_max_tokens_and_rules(seeded, server_url, new_page, shot):
    page = new_page()
    open_signed_in(page, server_url, "agent", "/templates/chat-default/v1/")
    _explain(page, "我付了¥299.00怎么还显示未支付，订单号 DD20241111887766")
    page.locator("#explain-result").wait_for()
    assert "strict" in _value(page, "tier") and "regex" in _value(page, "tier")
    assert "¥299.00" in _value(page, "regex hits")
    assert "0.3" in _value(page, "temperature")
    shot(page, "40-try-a-message-strict")

    legal_question = "你们的隐私政策里关于个人信息共享的条款是什么"
    _explain(page, legal_question, pool="prod-main", max_tokens="1500", granted_tags="legal_policy")
    page.wait_for_function(
        "document.querySelector('#explain-result tr[data-value=max_tokens]').innerText.includes('1500')"
    )
    assert "whitelist legal" in _value(page, "max_tokens")
    assert "legal_policy" in _value(page, "intent")

    _explain(page, "hi", business_tag="bad tag")
    error = page.locator("#explain-error")
    error.wait_for()
    assert "business_tag" in error.inner_text()
    shot(page, "41-try-a-message-error")
