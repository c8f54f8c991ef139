"""Numbers a client writes as text: a Content-Length header, a figure's round count. `str.isdigit()` says yes to "²",
"٣" and to 5,000 nines, which `int()` refuses (the first two are not ASCII; the third is over Python's 4,300-digit
limit). A 5,000-digit Content-Length was a 500 from the ASGI body-limit middleware, and `continuation_rounds.²` a 500
from the figure's request list; the JSON parser and the API's error handler read the header the same way, behind
Django and DRF's own reading of it. Now a header that is not a plain number is no number, a longer one than any body
could have is over every limit, and the answer is a 4xx that says why.
"""

import asyncio

import pytest

from controlplane.asgi import application
from controlplane.lib.body_limit import declared_length
from controlplane.lib.errors import InvalidField
from controlplane.replays.figure_selectors import figure_requests
from tests.factories import pools, template_with_versions
from tests.replays.factories import finished_run

NOT_NUMBERS = ["²", "٣٤", "1²", "", " 12", "-1", "1e3", "0x10"]


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_a_header_that_is_not_ascii_digits_is_no_number(text):
    assert declared_length(text) is None
    assert declared_length(text.encode("utf-8")) is None


def test_a_longer_number_than_int_reads_is_over_every_limit():
    assert declared_length("9" * 5_000) == 10**30
    assert declared_length(b"9" * 5_000) == 10**30
    assert declared_length("2621440") == 2_621_440


@pytest.mark.django_db
@pytest.mark.parametrize("length", ["²", "٣٤", "9" * 5_000])
def test_the_api_answers_a_strange_content_length_with_a_4xx(api_for, length):
    answer = api_for("agent").post(
        "/api/v1/validate/", {"document": {"inference_params": {}}}, format="json", CONTENT_LENGTH=length
    )
    assert answer.status_code in {400, 413}, answer.content
    assert "error" in answer.json()


async def _asgi_post(length: bytes) -> tuple[int, bytes]:
    """One POST through the whole ASGI application (body-limit middleware, then Django) with this Content-Length."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/validate/",
        "raw_path": b"/api/v1/validate/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), (b"content-length", length)],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    inbox = asyncio.Queue()
    await inbox.put({"type": "http.request", "body": b"{}", "more_body": False})
    sent = []

    async def send(message):
        sent.append(message)

    await asyncio.wait_for(application(scope, inbox.get, send), 30)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body


@pytest.mark.django_db(transaction=True)
def test_the_body_limit_middleware_refuses_a_5000_digit_content_length():
    status, body = asyncio.run(_asgi_post(b"9" * 5_000))
    assert status == 413, body
    assert b"over the limit of" in body


@pytest.mark.django_db
@pytest.mark.parametrize("rounds", ["²", "٣", "9" * 5_000])
def test_a_figure_with_a_strange_round_count_is_an_unknown_figure(agent, sre, rounds):
    _, (v1, _) = template_with_versions(agent, temperatures=(0.3, 0.2))
    run = finished_run(actor=agent, pool=pools(sre)[0], version=v1, n=20)
    with pytest.raises(InvalidField, match="figure: unknown figure"):
        figure_requests(run=run, figure=f"continuation_rounds.{rounds}")
