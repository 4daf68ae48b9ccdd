"""The gateway's address as the command line takes it: one option, ``--url`` (environment
``DSPARK_URL``), for the admin commands, which call ``<root>/admin/…``, and for ``bench`` and
``proof``, which call the OpenAI API at ``<root>/v1``. Either form is accepted from either: the
address is split into both, and a note says which one a command uses when it is not the form given.
Pure: strings in, strings out."""

from __future__ import annotations

from dataclasses import dataclass

#: The environment variable of ``--url``.
URL_ENV = "DSPARK_URL"


@dataclass(frozen=True, slots=True)
class GatewayUrl:
    """``root`` (``http://head:8080``) and ``api`` (``http://head:8080/v1``) of one address, and
    whether it was given with ``/v1``."""

    root: str
    api: str
    given_api: bool

    @classmethod
    def parse(cls, url: str) -> GatewayUrl:
        """``ValueError`` for an address without ``http://`` or ``https://``."""
        if not url.strip().startswith(("http://", "https://")):
            raise ValueError(f"--url must start with http:// or https://, as http://{url.strip()} does")
        trimmed = url.strip().rstrip("/")
        given_api = trimmed.endswith("/v1")
        root = trimmed.removesuffix("/v1") if given_api else trimmed
        return cls(root, root + "/v1", given_api)

    def root_note(self) -> str | None:
        """What an admin command says when it was given the API's address."""
        if not self.given_api:
            return None
        return f"note: using {self.root} (--url is the gateway's address; its admin API is not under /v1)"

    def api_note(self) -> str | None:
        """What ``bench`` and ``proof`` say when they were given the gateway's own address."""
        if self.given_api:
            return None
        return f"note: using {self.api} (the OpenAI API of the gateway at --url)"
