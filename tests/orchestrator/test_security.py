"""Security defaults end to end: API keys, public paths, CORS, body limit, no file names.

The server under test is a real ``lucerna serve --config`` on the qwen3 test model.
Its daemon runs behind a ``launcher`` that tees every command line the daemon
receives into a file, so the test can read exactly what HTTP input turned into.
"""

from __future__ import annotations

import hmac
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from daemons.native import NativeBuild
from orchestrator.api.security import APIKeyMiddleware
from orchestrator.app import build_app
from orchestrator.config import ServerSettings
from orchestrator.models import ModelRegistry
from protocol import parse_command_line
from tests.conftest import LucernaServer

KEY = "test-key-0123456789"
ORIGIN = "http://localhost:3000"
N_CTX = 128
MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def daemon_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("daemon") / "stdin.log"


@pytest.fixture(scope="module")
def secured(native: NativeBuild, test_models: dict[str, Path], daemon_input: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("secured")
    (folder / "keys").write_text(f"# the test's key\n{KEY}\n")
    config = folder / "lucerna.toml"
    config.write_text(f"""
[server]
api_key_file = "keys"
cors_origins = ["{ORIGIN}"]
max_body_bytes = 8192

[[models]]
name = "qwen3"
path = "{test_models['qwen3']}"
n_ctx = {N_CTX}
# One sequence: a request's bound is n_ctx itself (with several it may use the pool,
# docs/batching.md), and one daemon's input is teed.
parallel = 1
launcher = ["sh", "-c", 'tee -a "$0" | "$@"', "{daemon_input}"]
""")
    server = LucernaServer(folder / "serve.log", "--config", str(config))
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def raw_request(server: LucernaServer, method: str, path: str,
                headers: dict[str, str] | None = None, body: bytes = b"") -> tuple[int, bytes]:
    """One request with the path exactly as given: no client normalises ``..`` or ``//``."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


UNAUTHENTICATED_PATHS = [
    "/v1/models", "/v1/chat/completions", "/metrics", "/status", "/nope",
    "//v1/models", "///health", "/health/", "/HEALTH", "/Health", "/health/../v1/models",
    "/health/%2e%2e/v1/models", "/health%2F..%2Fv1%2Fmodels", "/v1/../health", "/./health",
    "/health;x", "/v1/models/", "/V1/MODELS",
]


@pytest.mark.parametrize("path", UNAUTHENTICATED_PATHS)
def test_every_path_but_health_needs_the_key(secured: LucernaServer, path: str) -> None:
    status, body = raw_request(secured, "GET", path)
    assert status == 401, (path, body)
    assert b'"authentication_error"' in body


def test_health_is_public_and_exact(secured: LucernaServer) -> None:
    assert raw_request(secured, "GET", "/health")[0] == 200
    assert raw_request(secured, "GET", "/health?verbose=1")[0] == 200
    # With the key, the odd spellings are not aliases of real routes either.
    auth = {"Authorization": f"Bearer {KEY}"}
    assert raw_request(secured, "GET", "//v1/models", auth)[0] == 404
    assert raw_request(secured, "GET", "/HEALTH", auth)[0] == 404


def test_both_header_styles_are_accepted_and_wrong_keys_are_not(secured: LucernaServer) -> None:
    url = f"{secured.base_url}/v1/models"
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer {KEY}"},
                    {"x-api-key": KEY}, {"X-Api-Key": KEY, "Authorization": "Bearer wrong"}):
        assert httpx.get(url, headers=headers).status_code == 200, headers
    for headers in ({"Authorization": KEY}, {"Authorization": f"Basic {KEY}"},
                    {"Authorization": f"Bearer {KEY}x"}, {"x-api-key": KEY[:-1]},
                    {"Authorization": "Bearer"}, {"x-api-key": ""}):
        assert httpx.get(url, headers=headers).status_code == 401, headers


def test_401_has_each_dialects_error_shape(secured: LucernaServer) -> None:
    client = openai.OpenAI(base_url=f"{secured.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        client.chat.completions.create(model="qwen3", messages=MESSAGES)  # type: ignore[arg-type]
    assert refused.value.code == "invalid_api_key"
    assert refused.value.type == "authentication_error"

    claude = anthropic.Anthropic(base_url=secured.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused_too:
        claude.messages.create(model="qwen3", max_tokens=8, messages=MESSAGES)  # type: ignore[arg-type]
    assert refused_too.value.body == {"type": "error", "error": {
        "type": "authentication_error", "message": refused_too.value.body["error"]["message"]}}  # type: ignore[index]
    status, body = raw_request(secured, "POST", "/v1/messages/count_tokens")
    assert status == 401 and body.startswith(b'{"type": "error"')


def test_cors_answers_configured_origins_only(secured: LucernaServer) -> None:
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    url = f"{secured.base_url}/v1/chat/completions"
    allowed = httpx.options(url, headers={"Origin": ORIGIN, **preflight})
    assert allowed.status_code == 200  # answered without a key: preflights carry none
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.options(url, headers={"Origin": "http://evil.test", **preflight})
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    # A 401 still carries CORS headers, so a browser client can read why it failed.
    refused = httpx.get(f"{secured.base_url}/v1/models", headers={"Origin": ORIGIN})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ORIGIN


async def test_cors_is_off_unless_configured() -> None:
    app = build_app(ModelRegistry([]), ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://lucerna") as client:
        preflight = await client.options("/v1/chat/completions", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
        plain = await client.get("/health", headers={"Origin": ORIGIN})
    assert preflight.status_code == 405
    assert not any(h.startswith("access-control-") for h in preflight.headers)
    assert not any(h.startswith("access-control-") for h in plain.headers)


async def test_every_configured_key_is_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real_compare = hmac.compare_digest

    def compare(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr("orchestrator.api.security.hmac.compare_digest", compare)
    app = build_app(ModelRegistry([]), ServerSettings(api_keys=("first", "second")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://lucerna") as client:
        response = await client.get("/v1/models", headers={"x-api-key": "first"})
    assert response.status_code == 200
    # No early exit on the match: both keys were compared.
    assert compared == [(b"first", b"first"), (b"first", b"second")]
    with pytest.raises(ValueError, match="at least one non-empty key"):
        APIKeyMiddleware(app, keys=[""])


def test_bodies_over_the_limit_get_413(secured: LucernaServer) -> None:
    url = f"{secured.base_url}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {KEY}"}
    big = {"model": "qwen3", "messages": [{"role": "user", "content": "x" * 9000}]}
    response = httpx.post(url, json=big, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        yield b'{"model": "qwen3", "messages": [{"role": "user", "content": "'
        yield b"y" * 9000
        yield b'"}]}'

    assert httpx.post(url, content=chunks(), headers=headers).status_code == 413


@pytest.mark.slow
def test_max_tokens_is_clamped_to_the_context(secured: LucernaServer) -> None:
    # The daemon rounds the context up (to 256 here); what it reports is the bound.
    headers = {"Authorization": f"Bearer {KEY}"}
    n_ctx = httpx.get(f"{secured.base_url}/v1/models", headers=headers).json()["data"][0][
        "meta"]["n_ctx"]
    assert n_ctx >= N_CTX
    client = openai.OpenAI(base_url=f"{secured.base_url}/v1", api_key=KEY, max_retries=0)
    long_prompt = [{"role": "user", "content": "lamp " * (n_ctx - 40)}]  # leaves a little room
    response = client.chat.completions.create(
        model="qwen3", messages=long_prompt, max_tokens=1_000_000, temperature=0)  # type: ignore[arg-type]
    # The random-weight model never stops on its own here: the clamped limit ends the
    # request, with the context exactly full (a clamp short of it, or none, fails).
    assert response.usage is not None
    assert response.choices[0].finish_reason == "length"
    assert response.usage.total_tokens == n_ctx


def test_no_request_field_names_a_file(secured: LucernaServer, daemon_input: Path) -> None:
    client = openai.OpenAI(base_url=f"{secured.base_url}/v1", api_key=KEY, max_retries=0)
    hostile = ["/etc/passwd", "ids:1,2,3", "text:hi", "file:///etc/passwd", "../../etc/passwd",
               "./model.gguf", "@/etc/shadow", "x\nquit\ntokenize /etc/passwd", "%2Fetc%2Fpasswd"]
    for name in hostile:
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=name, messages=MESSAGES)  # type: ignore[arg-type]
    before = daemon_input.read_text()
    prompts = [" ".join(hostile), "/etc/passwd", "ids:1,2,3", "text:/etc/passwd",
               "a\nquit\n", "/etc/passwd " * 400]  # the last one travels as a text file
    for prompt in prompts:
        try:
            client.chat.completions.create(
                model="qwen3", messages=[{"role": "user", "content": prompt}], max_tokens=2,
                temperature=0, stop=["STOPMARK/etc/passwd", "ids:7", "text:STOPMARK"])
        except openai.BadRequestError as exc:  # the long one is beyond the context
            assert exc.code == "context_length_exceeded"
    scratch = Path(tempfile.gettempdir(), "lucerna-").as_posix()
    # tee hands a line to the daemon before it appends it to the log: wait for the last.
    deadline = time.monotonic() + 5
    while f"tokenize {scratch}" not in daemon_input.read_text()[len(before):]:
        assert time.monotonic() < deadline, "the long prompt never reached the daemon"
        time.sleep(0.05)
    lines = daemon_input.read_text()[len(before):].splitlines()
    texts: list[str] = []
    for line in lines:
        command, args, options = parse_command_line(line)
        assert command != "quit", line  # a newline in a prompt never ends a command
        for arg in args:
            if arg.startswith("text:"):
                texts.append(arg)
            elif arg.startswith(("/", ".", "~", "file:", "@")):
                assert arg.startswith(scratch), line  # only the client's own scratch files
            assert "STOPMARK" not in arg, line  # stop strings stay in the front end
        for value in options.values():
            assert "passwd" not in value and "STOPMARK" not in value, line
    assert any("/etc/passwd" in text for text in texts)  # it arrived, as text
