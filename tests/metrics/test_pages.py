"""The charts on the overview, pool and node pages, and Plotly served from the app (no CDN)."""

import re
from pathlib import Path

import plotly
import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from controlplane.accounts.roles import Role

pytestmark = pytest.mark.django_db

PLOTLY_URL = "/static/vendor/plotly/plotly.min.js"


def page(user, url_name: str, **kwargs) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse(url_name, kwargs=kwargs))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("role", Role.values)
@pytest.mark.parametrize(
    ("name", "kwargs", "ws_path", "history"),
    [
        ("dashboard:overview", {}, "/ws/metrics/fleet/", "/api/v1/metrics/fleet/fleet/"),
        (
            "dashboard:pool-detail",
            {"name": "prod-main"},
            "/ws/metrics/pools/prod-main/",
            "/api/v1/metrics/pool/prod-main/",
        ),
        ("dashboard:node-detail", {"name": "gpu-1"}, "/ws/metrics/nodes/gpu-1/", "/api/v1/metrics/node/gpu-1/"),
    ],
)
def test_every_role_gets_the_live_charts(users, fleet_nodes, role, name, kwargs, ws_path, history):
    html = page(users[role], name, **kwargs)
    assert f'data-ws-path="{ws_path}"' in html
    assert f'data-history-url="{history}"' in html
    for chart in ("latency", "qps", "kv", "efficiency", "spec", "fragmentation", "length"):
        assert f'id="chart-{chart}"' in html
    assert 'data-testid="stream-state"' in html
    assert PLOTLY_URL in html and "/static/js/metrics_charts.js" in html
    # Plotly is served by the control plane, never fetched from a CDN (the page's CSRF token may spell "cdn")
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html), "an external script or stylesheet"


def test_simulated_figures_are_labelled(users, fleet_nodes):
    sre = users[Role.SRE]
    assert "simulated: 1 of 3 nodes" in page(sre, "dashboard:overview")
    assert 'data-testid="simulated-label"' in page(sre, "dashboard:pool-detail", name="staging")
    assert 'data-testid="simulated-label"' in page(sre, "dashboard:node-detail", name="sim-1")
    assert 'data-testid="simulated-label"' not in page(sre, "dashboard:pool-detail", name="prod-main")
    assert 'data-testid="simulated-label"' not in page(sre, "dashboard:node-detail", name="gpu-1")


def test_plotly_is_served_from_the_installed_package(client):
    response = client.get(PLOTLY_URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith(("text/javascript", "application/javascript"))
    body = b"".join(response.streaming_content)
    assert body == (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


def test_collectstatic_copies_plotly_and_nothing_else_of_the_package(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", "--noinput", verbosity=0)
    assert (tmp_path / "vendor/plotly/plotly.min.js").stat().st_size > 1_000_000
    assert sorted(p.name for p in (tmp_path / "vendor/plotly").iterdir()) == ["plotly.min.js"]
    assert (tmp_path / "js/metrics_charts.js").exists()
