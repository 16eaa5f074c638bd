"""The server side of PLAIN and SCRAM against scramp's client (an independent implementation of
the exchange), and the credential store."""

from __future__ import annotations

import pytest
from scramp import ScramClient

from broker.security import scram
from broker.security.sasl import AuthenticationFailed, SaslServer
from broker.security.scram import ScramStore


def server(mechanism: str, store: ScramStore | None = None) -> SaslServer:
    return SaslServer(mechanism, {"alice": "alice-secret"},
                      store.get if store else (lambda u, m: None))


def test_plain():
    s = server("PLAIN")
    assert s.step(b"\0alice\0alice-secret") == b"" and s.principal == "User:alice"
    for token in (b"\0alice\0wrong", b"\0bob\0alice-secret", b"bob\0alice\0alice-secret",
                  b"garbage"):
        with pytest.raises(AuthenticationFailed) as info:
            server("PLAIN").step(token)
        assert "secret" not in str(info.value) and "wrong" not in str(info.value)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_stored_credentials(tmp_path, mechanism):
    store = ScramStore(tmp_path / "scram.json")
    salt = b"0123456789abcdef"
    salted = scram.salted_password(mechanism, "pw,=x", salt, 4096)
    store.apply([("bob,x=", mechanism, scram.derive(mechanism, salted, salt, 4096))], [])
    store = ScramStore(tmp_path / "scram.json")  # read back from disk
    assert store.users() == {"bob,x=": {mechanism: 4096}}

    client = ScramClient([mechanism], "bob=2Cx=3D", "pw,=x")
    s = server(mechanism, store)
    first = s.step(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = s.step(client.get_client_final().encode())
    client.set_server_final(final.decode())  # verifies the server's signature
    assert s.principal == "User:bob,x="

    bad = ScramClient([mechanism], "bob=2Cx=3D", "not-it")
    s = server(mechanism, store)
    bad.set_server_first(s.step(bad.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed, match="invalid credentials for user 'bob,x='"):
        s.step(bad.get_client_final().encode())
    with pytest.raises(AuthenticationFailed):
        server(mechanism, store).step(ScramClient([mechanism], "nobody", "x")
                                      .get_client_first().encode())
    store.apply([], [("bob,x=", mechanism)])
    assert ScramStore(tmp_path / "scram.json").users() == {}


def _final(mechanism: str, password: str, first_bare: str, server_first: str, nonce: str) -> str:
    import base64
    import hashlib
    import hmac

    digest = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mechanism]
    attrs = dict(p.split("=", 1) for p in server_first.split(","))
    salted = scram.salted_password(mechanism, password, base64.b64decode(attrs["s"]),
                                   int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(digest(client_key).digest(), auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def test_scram_accepts_librdkafka_2_0s_nonce_and_nothing_else(tmp_path):
    """librdkafka up to 2.0 (Debian's kcat) repeats its own nonce in front of the server's in
    client-final; Kafka accepts it (endsWith), so do we, and only that form."""
    mechanism = "SCRAM-SHA-256"
    store = ScramStore(tmp_path / "scram.json")
    salt = b"salt-salt-salt"
    store.apply([("bob", mechanism, scram.derive(
        mechanism, scram.salted_password(mechanism, "pw", salt, 4096), salt, 4096))], [])
    for prefix, accepted in (("", True), ("CNONCE", True), ("X", False), ("CNONCECNONCE", False)):
        s = server(mechanism, store)
        server_first = s.step(b"n,,n=bob,r=CNONCE").decode()
        nonce = prefix + dict(p.split("=", 1) for p in server_first.split(","))["r"]
        final = _final(mechanism, "pw", "n=bob,r=CNONCE", server_first, nonce).encode()
        if accepted:
            assert s.step(final).startswith(b"v=") and s.principal == "User:bob"
        else:
            with pytest.raises(AuthenticationFailed):
                s.step(final)
