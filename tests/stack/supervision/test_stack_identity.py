"""How the launcher tells its own stack's servers from another's at the same port (no process started here)."""

from __future__ import annotations

import httpx
import pytest

from drill.stack.supervision.launcher import PortTakenError, _own

URL = "http://127.0.0.1:47591"


def test_an_admin_api_that_refuses_the_token_is_another_server() -> None:
    with pytest.raises(PortTakenError, match="refuses this stack's admin token"):
        _own(httpx.Response(401), URL, "replica-0")


def test_a_replica_that_gives_another_name_is_another_server() -> None:
    with pytest.raises(PortTakenError, match="'replica-1', not 'replica-0'"):
        _own(httpx.Response(200, json={"name": "replica-1"}), URL, "replica-0")


def test_its_own_answer_a_container_s_admin_api_and_not_yet_ready() -> None:
    assert _own(httpx.Response(200, json={"name": "replica-0"}), URL, "replica-0")
    assert _own(httpx.Response(200, json={"replicas": []}), URL, None)  # the router names no replica
    assert _own(httpx.Response(403), URL, "replica-0")  # not loopback to it (Docker): its health decides
    assert not _own(httpx.Response(503), URL, "replica-0")  # starting: polled again
