"""A JSON body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused with the API's 413 before it is parsed, on the real server.

Django's own refusal (RequestDataTooBig) used to reach clients as a bare 400 outside the API's error shape.
"""

import json

import httpx2 as httpx
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from tests.conftest import make_user
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]


def test_an_oversized_json_body_is_a_413_without_parsing(tmp_path):
    token = Token.objects.create(user=make_user("agent")).key
    server = Daphne(tmp_path)
    server.start()
    try:
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        big = json.dumps({"document": {"inference_params": {"x": "a" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE}}})
        response = httpx.post(f"{server.url}/api/v1/validate/", content=big, headers=headers, timeout=60)
        assert response.status_code == 413
        assert response.headers["Content-Type"] == "application/json"
        assert response.json()["error"].startswith("body: ")
        small = json.dumps({"document": {"inference_params": {}}})
        assert httpx.post(f"{server.url}/api/v1/validate/", content=small, headers=headers).status_code == 200
    finally:
        server.stop()
