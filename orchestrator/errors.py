"""Errors raised by orchestrator/, each knowing how it looks on the wire.

Hierarchy::

    OrchestratorError
    ├── ConfigError                   bad configuration or command line; names the key and fix
    ├── ClientSetupError              a coding agent (``lucerna clients``) could not be installed
    ├── DaemonUnrecoverableError      a model's daemon failed too often in a row; the server exits
    └── RequestError                  a request cannot be served; has an HTTP status and type
        ├── BadRequestError           400 invalid_request_error (malformed JSON, bad fields)
        │   ├── ChatTemplateError     400: the model's template refused or failed on the messages
        │   └── ContextLengthError    400 code=context_length_exceeded
        ├── ModelNotFoundError        404 model_not_found
        ├── ModelBusyError            409: an unload asked of a model that is serving requests
        ├── ServiceUnavailableError   503: the model's daemon is not running (starting, died)
        │   └── QueueFullError        503: too many requests already wait for this model
        ├── UpstreamError             502: proxy mode's upstream server failed or refused us
        └── ClientGoneError           499: the client disconnected; nothing is sent back
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequestError",
    "ClientGoneError",
    "ClientSetupError",
    "DaemonUnrecoverableError",
    "QueueFullError",
    "ChatTemplateError",
    "ConfigError",
    "ContextLengthError",
    "ModelBusyError",
    "ModelNotFoundError",
    "OrchestratorError",
    "RequestError",
    "ServiceUnavailableError",
    "UpstreamError",
]


class OrchestratorError(Exception):
    """Base of every error raised by orchestrator/."""


class ConfigError(OrchestratorError):
    """The configuration or command line is invalid."""


class ClientSetupError(OrchestratorError):
    """A pinned coding agent could not be installed or does not run; says what to do."""


class DaemonUnrecoverableError(OrchestratorError):
    """A daemon could not be brought back; the server stops with a non-zero exit."""


class RequestError(OrchestratorError):
    status = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def openai_body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class BadRequestError(RequestError):
    status = 400
    error_type = "invalid_request_error"


class ChatTemplateError(BadRequestError):
    code = "chat_template_error"


class ContextLengthError(BadRequestError):
    code = "context_length_exceeded"


class ModelNotFoundError(RequestError):
    status = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class ModelBusyError(RequestError):
    status = 409
    error_type = "invalid_request_error"
    code = "model_busy"


class ServiceUnavailableError(RequestError):
    status = 503
    error_type = "service_unavailable"
    code = "daemon_unavailable"


class QueueFullError(ServiceUnavailableError):
    code = "queue_full"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UpstreamError(RequestError):
    """Proxy mode (orchestrator/prefill): the upstream server failed, timed out or refused us."""

    status = 502
    error_type = "upstream_error"
    code = "upstream_failed"


class ClientGoneError(RequestError):
    """The client went away; what would be sent back goes nowhere (nginx's 499)."""

    status = 499
    error_type = "client_closed_request"
