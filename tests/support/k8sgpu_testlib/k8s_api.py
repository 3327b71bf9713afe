"""Small helpers over the Kubernetes Python client for the lab tests."""
from __future__ import annotations

from typing import Any, Callable

from kubernetes.client.exceptions import ApiException


def ignore_404(call: Callable, *args: Any, **kwargs: Any) -> None:
    """call(*args, **kwargs), where an object already gone (404) is what the caller wanted: a clean-up's delete."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise
