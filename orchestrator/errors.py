"""Errors raised by orchestrator/, each knowing how it looks on the wire.

Hierarchy::

    OrchestratorError
    ├── ConfigError                   bad configuration or command line; names the key and fix
    └── RequestError                  a request cannot be served; has an HTTP status and type
        ├── BadRequestError           400 invalid_request_error (malformed JSON, bad fields)
        │   ├── ChatTemplateError     400: the model's template refused or failed on the messages
        │   └── ContextLengthError    400 code=context_length_exceeded
        ├── ModelNotFoundError        404 model_not_found
        └── ServiceUnavailableError   503: the model's daemon is not running (starting, died)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequestError",
    "ChatTemplateError",
    "ConfigError",
    "ContextLengthError",
    "ModelNotFoundError",
    "OrchestratorError",
    "RequestError",
    "ServiceUnavailableError",
]


class OrchestratorError(Exception):
    """Base of every error raised by orchestrator/."""


class ConfigError(OrchestratorError):
    """The configuration or command line is invalid."""


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


class ServiceUnavailableError(RequestError):
    status = 503
    error_type = "service_unavailable"
    code = "daemon_unavailable"
