"""Shared by the task-set tests."""
import socket

import pytest


@pytest.fixture
def no_network(monkeypatch):
    """Task loaders are offline: any connection attempt fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("task loaders must not touch the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
