"""A real OpenID Connect provider as a child process (``tests/support/oidc_provider.mjs``: panva's
oidc-provider from ``make test-deps``, in ``.npm-agents``), on a free loopback port."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.probes import wait_serving
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / ".npm-agents" / "node_modules" / "oidc-provider" / "lib" / "index.js"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID = "dspark-console"
CLIENT_SECRET = "console-client-secret-for-tests-only"


class OidcProvider:
    """The provider at ``issuer``, its one client (:data:`CLIENT_ID`) allowed to come back to
    ``redirect_uris``; output to ``log_path``. Start it before signing in, after the gateways whose
    callbacks it names: a gateway reads the provider only when someone signs in."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def settings(self, gateway_port: int) -> dict[str, object]:
        """The settings of a gateway on ``gateway_port`` that signs in with this provider (``groups``
        holding gateway-admins), the provider's answer coming back to that gateway."""
        return {
            "port": gateway_port,
            "oidc_redirect_url": f"http://127.0.0.1:{gateway_port}/console/oidc/callback",
            "oidc_issuer": self.issuer,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret": CLIENT_SECRET,
            "oidc_scopes": "openid email groups",
            "oidc_admin_values": ("gateway-admins",),
            "oidc_label": "the test provider",
        }

    def start(self, redirect_uris: Sequence[str], id_token_ttl_s: int = 3600) -> OidcProvider:
        """Serving, its ID tokens good for ``id_token_ttl_s`` seconds (a console session lasts as long)."""
        node = shutil.which("node")
        assert node and MODULE.exists(), "oidc-provider is not installed: run `make test-deps`"
        config = {"port": self.port, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                  "redirect_uris": list(redirect_uris), "id_token_ttl_s": id_token_ttl_s}  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [node, str(SCRIPT), MODULE.as_uri(), json.dumps(config)], stdout=log, stderr=log
            )
        wait_serving(
            self.process, self.issuer + "/.well-known/openid-configuration", self.log_path, 30, "oidc"
        )
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
