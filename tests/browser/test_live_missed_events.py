"""A page whose live socket lost an event says so instead of going on showing "live" (static/js/live.js).

The channel layer drops a group event for a browser whose channel is full, and a socket that reconnects misses what
was sent meanwhile. Events to the fleet, a pool and the alerts are numbered per group (controlplane/lib/
event_sequence.py); here a number is taken and its event never sent, as when the layer drops it."""

import threading

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection

from controlplane.lib import event_sequence, realtime
from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NOTHING_CHANGED = {"type": "nodes.updated", "nodes": []}  # the fleet page merges node entries: none here


def off_thread(func, *args):
    """Runs `func` on a thread of its own: Playwright's event loop on this one refuses async_to_sync."""
    box = {}

    def run():
        try:
            box["value"] = func(*args)
        except BaseException as exc:
            box["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def send_numbered(number: int) -> None:
    """One fleet event with a number taken earlier, sent now (as another process would)."""
    event = event_sequence.stamped(realtime.fleet_group(), NOTHING_CHANGED, number)
    async_to_sync(get_channel_layer().group_send)(realtime.fleet_group(), event)


def test_a_dropped_event_turns_live_into_missed_and_a_click_reloads(seeded, server_url, new_page, shot):
    page = new_page()
    open_signed_in(page, server_url, "oncall", "/fleet/")
    badge = page.locator("#live-state")
    page.locator("#live-state.on").wait_for()
    received = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: received.append(frame)))

    # Numbered events in order, then two whose numbers were taken by two processes and arrive swapped: no gap.
    for _ in range(2):
        off_thread(realtime.send, [realtime.fleet_group()], NOTHING_CHANGED)
    first, second = off_thread(event_sequence.next_number, "fleet"), off_thread(event_sequence.next_number, "fleet")
    off_thread(send_numbered, second)
    off_thread(send_numbered, first)
    page.wait_for_timeout(3500)  # past the 3 s the page waits for a late number
    assert badge.inner_text() == "live" and "on" in badge.get_attribute("class")

    # A number taken and its event never delivered (a full channel drops it), then the next event.
    off_thread(event_sequence.next_number, "fleet")
    off_thread(realtime.send, [realtime.fleet_group()], NOTHING_CHANGED)
    page.locator("#live-state.missed").wait_for(timeout=8000)
    assert badge.inner_text() == "missed 1 update · reload"
    shot(page, "live-missed-update")

    badge.click()  # reloads: the page is rendered from the stored state again
    page.locator("#live-state.on").wait_for()
    assert badge.inner_text() == "live"


def test_an_event_sent_between_the_render_and_the_subscription_counts_as_missed(seeded, server_url, new_page, shot):
    """The page carries the numbers its view read before the state; the socket, once subscribed, hears the number
    taken so far. An event sent in between reached no socket of this page, and no later event has to come to say so."""
    page = new_page()
    open_signed_in(page, server_url, "oncall", "/templates/")

    dropped = []

    def drop_one_then_subscribe(socket):
        if not dropped:  # the first socket only; the reload below subscribes as usual
            dropped.append(off_thread(event_sequence.next_number, "fleet"))  # an event sent now reaches no socket
        socket.connect_to_server()  # then the page's socket joins, as it would a moment after the render

    page.route_web_socket("**/ws/pools/", drop_one_then_subscribe)
    page.goto(f"{server_url}/fleet/")
    badge = page.locator("#live-state")
    page.locator("#live-state.missed").wait_for(timeout=8000)
    assert badge.inner_text() == "missed 1 update · reload"
    shot(page, "live-missed-before-subscribing")

    badge.click()  # the reload renders the stored state and starts from the number read with it
    page.locator("#live-state.on").wait_for()
    page.wait_for_timeout(3500)
    assert badge.inner_text() == "live"
