"""An ASGI application whose consumer names a policy that does not exist (only it imports it)."""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import URLRouter
from django.urls import path

from django_rl.contrib.channels import RateLimitMixin


class Nowhere(RateLimitMixin, AsyncWebsocketConsumer):
    message_policies = ("ws_nowhere",)


application = URLRouter([path("ws/", Nowhere.as_asgi())])
