"""Signing a browser context in without the sign-in form: a session created by Django's own login(), the one the
form's view calls once the password checks out, handed to the context as its cookie. The form itself, and daphne
checking the password, stay covered where the path starts at it (test_dashboard_flow.py's `login`)."""

from django.conf import settings
from django.test import Client

from controlplane.accounts.models import User

# The backend the form's sign-in ends with: axes' backend goes first but only refuses locked pairs.
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


def open_signed_in(page, base: str, username: str, path: str) -> None:
    """Sign `page`'s context in as `username` and open `path` there; the page must name the user signed in."""
    client = Client()
    client.force_login(User.objects.get(username=username), backend=MODEL_BACKEND)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}])
    page.goto(f"{base}{path}")
    assert page.text_content("[data-testid=current-user]") == username
