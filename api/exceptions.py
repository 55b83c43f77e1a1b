"""Errors of the API stage; each knows the HTTP status and the code it answers with."""

from pulsegraph.base.errors import PulsegraphError


class ApiError(PulsegraphError):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code
        self.headers = headers


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class RequestTimeout(ApiError):
    status = 408
    code = "request_timeout"


class Unprocessable(ApiError):
    """The request breaks the schema in a way the route itself checks (a batch over its maxItems)."""

    status = 422
    code = "invalid_request"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class Unavailable(ApiError):
    """The server cannot do it now (a sink is down); not the client's fault."""

    status = 503
    code = "unavailable"


class Conflict(ApiError):
    """The request is well formed but the server's state refuses it (a bound already reached)."""

    status = 409
    code = "conflict"


class AlertRulesError(PulsegraphError):
    """The alert rules file cannot be read or written."""
