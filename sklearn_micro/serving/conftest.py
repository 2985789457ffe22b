"""The doctests of this package's modules need the serve extra; without it they are skipped."""

import importlib.util

_SERVE = ("starlette", "uvicorn", "prometheus_client", "orjson")
collect_ignore_glob = [] if all(importlib.util.find_spec(m) for m in _SERVE) else ["*.py"]
