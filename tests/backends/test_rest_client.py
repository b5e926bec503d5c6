"""One error translation for every REST backend (drill/backends/rest.py), at the transport seam (httpx's
MockTransport): Toxiproxy's client and the admin clients word a failure the same way, each with its own error
class, its server's name and its hints."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from drill.backends.stack_admin import RouterAdminClient, StackAdminClient
from drill.backends.toxiproxy import ToxiproxyClient
from drill.errors import AdminApiError, HttpApiError, ToxiproxyError

Call = Callable[[httpx.MockTransport], object]

CLIENTS: dict[str, tuple[type[HttpApiError], str, Call]] = {
    "toxiproxy": (
        ToxiproxyError,
        "Toxiproxy",
        lambda t: ToxiproxyClient("http://toxiproxy.test", transport=t).proxies(),
    ),
    "replica admin": (
        AdminApiError,
        "the replica admin API",
        lambda t: StackAdminClient("http://replica.test", "token", transport=t).clear_stall(),
    ),
    "router admin": (
        AdminApiError,
        "the router admin API",
        lambda t: RouterAdminClient("http://router.test/admin", "token", transport=t).config(),
    ),
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    "body",
    [
        {"error": "the server's words"},  # Toxiproxy's shape
        {"error": {"message": "the server's words", "type": "BadRequestError", "code": 400}},  # vLLM's shape
    ],
)
def test_an_unexpected_status_names_the_server_the_status_and_its_words(client: str, body: dict) -> None:
    error, who, call = CLIENTS[client]
    with pytest.raises(error) as info:
        call(httpx.MockTransport(lambda request: httpx.Response(400, json=body)))
    assert isinstance(info.value, HttpApiError) and info.value.status == 400
    assert f"{who} answered HTTP 400: the server's words" in info.value.message


@pytest.mark.parametrize("client", CLIENTS)
def test_a_body_without_an_error_field_is_quoted_as_text(client: str) -> None:
    error, who, call = CLIENTS[client]
    with pytest.raises(error) as info:
        call(httpx.MockTransport(lambda request: httpx.Response(502, text="  bad gateway\n" + "x" * 1000)))
    assert info.value.status == 502 and f"{who} answered HTTP 502: bad gateway" in info.value.message
    assert len(info.value.message) < 400  # the body's text is cut, not pasted whole


@pytest.mark.parametrize("client", CLIENTS)
def test_an_answer_that_is_not_json_is_the_backends_error(client: str) -> None:
    error, who, call = CLIENTS[client]
    with pytest.raises(error, match=f"{who} answered non-JSON: 'not json'") as info:
        call(httpx.MockTransport(lambda request: httpx.Response(200, text="not json")))
    assert info.value.status == 200


@pytest.mark.parametrize("client", CLIENTS)
def test_no_connection_is_the_backends_error_without_a_status(client: str) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    error, who, call = CLIENTS[client]
    with pytest.raises(error, match=f"cannot reach {who} at http://") as info:
        call(httpx.MockTransport(refuse))
    assert info.value.status is None and info.value.hint
    assert isinstance(info.value.__cause__, httpx.ConnectError)
