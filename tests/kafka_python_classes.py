"""kafka-python 3.0.12's protocol classes, found by walking its packages: the independent referee
the codec and conformance tests hold our bytes to."""

from __future__ import annotations

import importlib
import pkgutil
import warnings

with warnings.catch_warnings():  # kafka-python's import trips a DeprecationWarning
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol
    import kafka.protocol.old as kafka_old
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.old.api import Request as OldRequest
    from kafka.protocol.old.api import Response as OldResponse


def old_classes() -> dict[tuple[int, int, str], type]:
    """The hand-written 2.x classes by (api_key, version, "request" or "response")."""
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for info in pkgutil.iter_modules(kafka_old.__path__):
            module = importlib.import_module(f"{kafka_old.__name__}.{info.name}")
            for obj in vars(module).values():
                if not isinstance(obj, type) or not hasattr(obj, "SCHEMA"):
                    continue
                if issubclass(obj, OldRequest):
                    direction = "request"
                elif issubclass(obj, OldResponse):
                    direction = "response"
                else:
                    continue
                if isinstance(obj.API_KEY, int) and isinstance(obj.API_VERSION, int):
                    found[(obj.API_KEY, obj.API_VERSION, direction)] = obj
    return found


def json_classes() -> dict[tuple[int, str], type]:
    """The classes generated from Kafka's JSON message schemas by (api_key, direction)."""
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
            if ".old" in info.name:
                continue
            try:
                module = importlib.import_module(info.name)
            except ImportError:
                continue
            for obj in vars(module).values():
                if (isinstance(obj, type) and issubclass(obj, ApiMessage)
                        and obj is not ApiMessage
                        and isinstance(getattr(obj, "API_KEY", None), int)):
                    found[(obj.API_KEY, obj.type)] = obj
    return found
