"""Static files the dashboard takes from installed packages rather than from the repository."""

from pathlib import Path

import plotly
from django.contrib.staticfiles import finders
from django.core.files.storage import FileSystemStorage

PLOTLY_PREFIX = "vendor/plotly"
PLOTLY_FILE = "plotly.min.js"


class PlotlyFinder(finders.BaseFinder):
    """Finds `vendor/plotly/plotly.min.js` in the pinned `plotly` package, for collectstatic and WhiteNoise.

    Only that one file: the package's data folder also holds a 4.8 MB widget bundle and sample data sets,
    which a FileSystemFinder entry would copy and serve as well.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=Path(plotly.__file__).parent / "package_data")
        self.storage.prefix = PLOTLY_PREFIX

    def find(self, path, find_all=False, **kwargs):
        if path == f"{PLOTLY_PREFIX}/{PLOTLY_FILE}":
            found = self.storage.path(PLOTLY_FILE)
            return [found] if find_all else found
        return [] if find_all else None

    def list(self, ignore_patterns):
        yield PLOTLY_FILE, self.storage
