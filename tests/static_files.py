"""WhiteNoise's scan of the static files, done once per configuration in the test process.

WhiteNoise reads every static file the finders list (about 190: stat, content type, headers) when Django builds its
middleware chain, and Django's test `Client` builds a chain for each instance: a test that signs in as six roles paid
about 40 ms a client, most of a request's cost, thousands of times a run. The scan's result depends only on the static
files and the settings below, none of which a test changes while the process runs but those the key names, so the
first scan of each configuration is kept and copied into every later middleware. What is served, with which headers,
is the scan's own result; daphne and other processes scan for themselves as in production.
"""

from django.conf import settings
from whitenoise.middleware import WhiteNoiseMiddleware

_scan = WhiteNoiseMiddleware.add_files_from_finders
_scanned: dict[tuple, dict] = {}


def _key(middleware: WhiteNoiseMiddleware) -> tuple:
    return (
        tuple(settings.STATICFILES_FINDERS),
        tuple(str(path) for path in settings.STATICFILES_DIRS),
        repr(getattr(settings, "STORAGES", {}).get("staticfiles")),
        settings.STATIC_URL,
        middleware.static_prefix,
        middleware.max_age,
        middleware.allow_all_origins,
        middleware.charset,
        middleware.index_file,
        middleware.add_headers_function,
        getattr(settings, "WHITENOISE_IMMUTABLE_FILE_TEST", None),
        getattr(settings, "WHITENOISE_MIMETYPES", None) and repr(settings.WHITENOISE_MIMETYPES),
    )


def _add_files_from_finders(self: WhiteNoiseMiddleware) -> None:
    key = _key(self)
    if key not in _scanned:
        before = dict(self.files)
        _scan(self)
        _scanned[key] = {url: file for url, file in self.files.items() if before.get(url) is not file}
    self.files.update(_scanned[key])


def scan_static_files_once() -> None:
    WhiteNoiseMiddleware.add_files_from_finders = _add_files_from_finders
