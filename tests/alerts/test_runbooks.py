"""Runbooks: one per default rule plus the seed's two guides, rendered safely at /runbooks/<slug>/."""

import re

import pytest
from django.test import Client

from controlplane.alerts.defaults import DEFAULT_RULES
from controlplane.alerts.runbooks import render_markdown, runbook_get, runbook_slugs


def test_every_default_rule_and_both_seed_guides_have_a_runbook():
    slugs = set(runbook_slugs())
    assert {spec["runbook"] for spec in DEFAULT_RULES} <= slugs
    assert {"batch-timeout-exceeded", "gpu-memory-leak"} <= slugs
    timeout = runbook_get("batch-timeout-exceeded").text
    # The seed's steps, translated, with the original terms kept.
    for original in ("检查当前平均输入长度", "临时调低 batch_size 上限", "分析是否有异常长文本涌入", "伴随吞吐量骤降"):
        assert original in timeout
    leak = runbook_get("gpu-memory-leak").text
    for original in (
        "GPU-Util 持续下降",
        "但显存占用缓慢上升",
        "引入显存池化机制",
        "增加请求生命周期监控",
        "设置强制回收定时器",
    ):
        assert original in leak


def test_runbooks_name_their_rules_link_only_runbooks_that_exist_and_promise_nothing_missing():
    for spec in DEFAULT_RULES:
        assert f"`{spec['name']}`" in runbook_get(spec["runbook"]).text, spec["name"]
    for slug in runbook_slugs():
        text = runbook_get(slug).text
        assert "not available yet" not in text, slug
        for linked in re.findall(r"\]\(/runbooks/([a-z0-9-]+)/\)", text):
            assert runbook_get(linked) is not None, (slug, linked)


def test_rendering_escapes_everything_and_keeps_the_markdown_subset():
    html = render_markdown(
        "# Title <script>\n\nText with `code <b>` and **bold** and [a link](/runbooks/x/) "
        "and [bad](javascript:alert(1)).\n\n- one\n- two <img src=x onerror=alert(1)>\n\n1. first\n2. second\n\n"
        "```\nrm -rf <dir>\n```\n"
    )
    assert "<script>" not in html and "<img" not in html
    assert "<h1>Title &lt;script&gt;</h1>" in html
    assert "<code>code &lt;b&gt;</code>" in html and "<strong>bold</strong>" in html
    assert '<a href="/runbooks/x/">a link</a>' in html
    assert "javascript:" in html and 'href="javascript' not in html
    assert "<ul>\n<li>one</li>\n<li>two &lt;img src=x onerror=alert(1)&gt;</li>\n</ul>" in html
    assert "<ol>\n<li>first</li>\n<li>second</li>\n</ol>" in html
    assert "<pre><code>rm -rf &lt;dir&gt;</code></pre>" in html


@pytest.mark.django_db
def test_runbook_page_renders_and_links_the_rules_using_it(users, default_rules):
    client = Client()
    client.force_login(users["oncall"])
    page = client.get("/runbooks/node-lost/").content.decode()
    assert "<h1>Node lost</h1>" in page and 'href="/alert-rules/node-lost/"' in page
    assert client.get("/runbooks/no-such-book/").status_code == 404
    assert client.get("/runbooks/..%2Fsettings/").status_code == 404
