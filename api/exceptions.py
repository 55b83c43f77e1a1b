"""Errors of the API stage; each knows the HTTP status and the code it answers with."""

from pulsegraph.errors import PulsegraphError


class ApiError(PulsegraphError):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


class NotFound(ApiError):
    status = 404
    code = "not_found"
