"""The trio engine of the client: ``AsyncProducer``, ``AsyncConsumer``, ``AsyncAdmin``."""

from client.aio.admin import AsyncAdmin
from client.aio.consumer import AsyncConsumer
from client.aio.producer import AsyncProducer

__all__ = ["AsyncAdmin", "AsyncConsumer", "AsyncProducer"]
