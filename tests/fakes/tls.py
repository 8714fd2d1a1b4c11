"""Certificates for local HTTPS fakes: a throwaway CA and a server certificate for some
names, and the server context that records which name each client asked for (SNI).

    made = tls.Made.for_names(tmp_path, ["secure.test"])
    with FeedServer(tls=made.server) as site: ...    # SSL_CERT_FILE=made.ca_file trusts it
    made.asked                                       # ["secure.test"]: each handshake's SNI
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Made:
    ca_file: Path
    server: ssl.SSLContext
    asked: list[str | None] = field(default_factory=list)

    @classmethod
    def for_names(cls, directory: Path, names: list[str]) -> Made:
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gatehouse test CA")])
        ca = (
            _builder(ca_name, ca_name, ca_key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        leaf_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
        leaf = (
            _builder(leaf_name, ca_name, key.public_key(), now)
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
        (directory / "server.pem").write_bytes(
            leaf.public_bytes(pem)
            + key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(directory / "server.pem")
        made = cls(directory / "ca.pem", server)
        server.sni_callback = made._heard
        return made

    def _heard(self, _socket: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        self.asked.append(name)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
    )
