"""JWT bearer tokens: gateway-minted (HS256) and an external identity provider (RS256 JWKS file)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jose import jwk, jwt

from gateway.auth.tokens import TokenConfig, mint
from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
SECRET = "test-secret-0123456789abcdef0123456789"
CLI = str(Path(sys.executable).parent / "dspark-gateway")


@pytest.fixture(scope="module")
def rsa_keys():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_jwk = jwk.construct(public_pem, "RS256").to_dict()
    public_jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    return pem, public_pem, {"keys": [public_jwk]}


@pytest.fixture
def gateway(start_sim, start_gateway, rsa_keys, tmp_path: Path):
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps(rsa_keys[2]))
    sim = start_sim()
    return start_gateway(
        sim.url,
        jwt_secret=SECRET,
        jwt_jwks_file=str(jwks_file),
        jwt_idp_issuer="https://idp.example",
        jwt_idp_audience="dspark",
    )


def call(gateway, token: str, path: str = "/admin/status") -> httpx.Response:
    return httpx.get(gateway.url + path, headers={"Authorization": f"Bearer {token}"})


def claims(**extra) -> dict:
    now = int(time.time())
    return {
        "iss": "https://idp.example",
        "aud": "dspark",
        "sub": "alice",
        "iat": now,
        "exp": now + 300,
        **extra,
    }


def test_minted_token_from_the_cli(gateway) -> None:
    env = {"GATEWAY_JWT_SECRET": SECRET, "PATH": "/usr/bin:/bin"}
    minted = subprocess.run(
        [CLI, "token", "--sub", "ops", "--scope", "admin", "--ttl", "15m"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert call(gateway, token).status_code == 200
    client_token = subprocess.run(
        [CLI, "token", "--sub", "app"], capture_output=True, text=True, env=env
    ).stdout
    assert call(gateway, client_token.strip()).status_code == 403  # no admin scope
    models = call(gateway, client_token.strip(), "/v1/models")
    assert models.status_code == 200 and models.json()["data"][0]["id"] == MODEL


def test_identity_provider_tokens(gateway, rsa_keys) -> None:
    pem, public_pem, _ = rsa_keys
    good = jwt.encode(claims(scope="admin"), pem, algorithm="RS256", headers={"kid": "k1"})
    assert call(gateway, good).status_code == 200
    limited = jwt.encode(claims(models=["other"]), pem, algorithm="RS256", headers={"kid": "k1"})
    chat = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {limited}"},
    )
    assert chat.status_code == 403
    bad = {
        "expired": jwt.encode(claims(exp=int(time.time()) - 10), pem, algorithm="RS256"),
        "wrong audience": jwt.encode(claims(aud="someone-else"), pem, algorithm="RS256"),
        "wrong issuer": jwt.encode(claims(iss="https://evil.example"), pem, algorithm="RS256"),
        "models not a list": jwt.encode(claims(models="other"), pem, algorithm="RS256"),
        # HS/RS confusion: the IdP's public key used as an HMAC secret
        "hs256 with the public key": _hmac_signed(claims(scope="admin"), public_pem),
        # a gateway-style token signed with a wrong secret
        "hs256 wrong secret": jwt.encode(
            {**claims(), "iss": "dspark-gateway", "aud": "dspark-gateway"}, "nope", algorithm="HS256"
        ),
        "alg none": _unsigned(claims(scope="admin")),
        "garbage": "a.b.c",
    }
    for name, token in bad.items():
        response = call(gateway, token)
        assert response.status_code == 401, name
        assert response.json()["error"]["code"] == "invalid_api_key", name


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(payload: dict) -> str:
    header = {"alg": "none", "typ": "JWT"}
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}."


def _hmac_signed(payload: dict, secret: bytes) -> str:
    """What an attacker sends: HS256 'signed' with the IdP's public key (libraries refuse to make it)."""
    signing_input = (
        f"{_b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(payload).encode())}"
    )
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


@pytest.fixture(scope="module")
def ec_keys():
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_jwk = jwk.construct(public_pem, "ES256").to_dict()
    public_jwk.update({"kid": "e1", "use": "sig"})
    return pem, public_jwk


def test_a_key_set_of_two_types_and_two_algorithms(
    start_sim, start_gateway, rsa_keys, ec_keys, tmp_path
) -> None:
    """An IdP publishing an RSA and an EC key, both algorithms allowed: each legitimate token is
    verified by its own key (python-jose, handed the whole set, failed with a 500 on the key of the
    other type), and every forged or mismatched header is a 401, never a 500."""
    rsa_pem, _, rsa_set = rsa_keys
    ec_pem, ec_jwk = ec_keys
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps({"keys": [*rsa_set["keys"], ec_jwk]}))
    gateway = start_gateway(
        start_sim().url,
        jwt_jwks_file=str(jwks_file),
        jwt_idp_issuer="https://idp.example",
        jwt_idp_audience="dspark",
        jwt_idp_algorithms="RS256,ES256",
    )
    admin = claims(scope="admin")
    good = [
        jwt.encode(admin, rsa_pem, algorithm="RS256", headers={"kid": "k1"}),
        jwt.encode(admin, ec_pem, algorithm="ES256", headers={"kid": "e1"}),
    ]
    assert [call(gateway, token).status_code for token in good] == [200, 200]
    forged = {
        "ES256 naming the RSA key": jwt.encode(admin, ec_pem, algorithm="ES256", headers={"kid": "k1"}),
        "RS256 naming the EC key": jwt.encode(admin, rsa_pem, algorithm="RS256", headers={"kid": "e1"}),
        "an unknown kid": jwt.encode(admin, rsa_pem, algorithm="RS256", headers={"kid": "nope"}),
        "signed by another key": jwt.encode(
            admin,
            ec.generate_private_key(ec.SECP256R1()).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            algorithm="ES256",
            headers={"kid": "e1"},
        ),
        "issued in the future": jwt.encode(
            claims(scope="admin", iat=int(time.time()) + 3600),
            rsa_pem,
            algorithm="RS256",
            headers={"kid": "k1"},
        ),
    }
    for name, token in forged.items():
        response = call(gateway, token)
        assert response.status_code == 401, (name, response.text)
        assert response.json()["error"]["code"] == "invalid_api_key", name


def test_a_short_jwt_secret_is_refused_at_start(tmp_path: Path) -> None:
    """RFC 7518 section 3.2: an HS256 key as long as the hash; ``serve`` does not start with less."""
    env = {"GATEWAY_JWT_SECRET": "short-secret", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    started = subprocess.run(
        [CLI, "serve", "--port", "1"], capture_output=True, text=True, env=env, timeout=60
    )
    assert started.returncode != 0 and "jwt_secret" in (started.stdout + started.stderr)


def test_equal_subjects_of_two_issuers_are_two_principals(gateway, rsa_keys) -> None:
    """A gateway-minted token and the identity provider's, both for ``alice``: neither reads the other's
    file, and the ledger names each with its issuer."""
    minted = mint(TokenConfig(SECRET, "dspark-gateway", "dspark-gateway"), "alice", ["admin"], 300)
    from_idp = jwt.encode(claims(scope="admin"), rsa_keys[0], algorithm="RS256", headers={"kid": "k1"})
    ours, theirs = (
        openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
        for token in (minted, from_idp)
    )
    made = ours.files.create(file=("input.jsonl", io.BytesIO(b'{"a": 1}\n')), purpose="batch")
    assert ours.files.retrieve(made.id).id == made.id
    with pytest.raises(openai.NotFoundError):
        theirs.files.retrieve(made.id)
    assert theirs.files.list().data == []
    for client in (ours, theirs):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )

    def names() -> set[str]:
        rows = call(gateway, minted, "/admin/requests").json()["data"]
        return {row["key_name"] for row in rows}

    issuers = {
        hashlib.sha256(iss.encode()).hexdigest()[:12] for iss in ("dspark-gateway", "https://idp.example")
    }
    wait_until(
        lambda: names() == {f"jwt:{digest}:alice" for digest in issuers}, timeout_s=60, what="two rows"
    )
