"""URL patterns of the API, one module per resource, gathered by ``api/urls.py``."""
