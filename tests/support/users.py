"""Locust users the tests share."""

from __future__ import annotations

from locust import User, task


class Idle(User):
    """A user that does nothing: a runner with users, without load."""

    @task
    def nothing(self):
        pass
