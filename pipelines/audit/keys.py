"""The Ed25519 key that signs the event chain's head, kept in the data directory.

    key = audit_keys.load_or_create(data_dir)       # audit-signing.key, mode 0600
    key_id, signature = audit_keys.signer(key)(message)
    audit_keys.public_text(key)                     # "ed25519:<base64>" (`gatehouse audit key`)
    audit_keys.check(public, message, signature)    # False for a forged or altered checkpoint
    audit_keys.checkpoint_check([public, ...])      # for `events.verify_chain` in the store

Each worker has its own key; pipelines.audit.trust says which other workers' keys a
verify trusts.

The private key never leaves the data directory and is never logged; the public key is
what an auditor keeps elsewhere to check an export offline.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from store.audit import checkpoints, events

KEY_FILE = "audit-signing.key"
#: How a public key is written out: this prefix, then the 32 raw bytes in base64.
PUBLIC_PREFIX = "ed25519:"
#: The longest public-key argument read (a PEM file is about 113 bytes).
MAX_PUBLIC_TEXT = 4096


class BadKey(ValueError):
    """A public key that cannot be read; the message says what a valid one looks like."""


def load_or_create(data_dir: Path) -> ed25519.Ed25519PrivateKey:
    """The data directory's signing key, created (0600, never replaced) on first use."""
    path = data_dir / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
        out.flush()
        os.fsync(out.fileno())
    return key


def local_public(data_dir: Path) -> ed25519.Ed25519PublicKey | None:
    """The public half of the data directory's signing key; None when it has none yet
    (read only: checking never makes a key)."""
    path = data_dir / KEY_FILE
    return _read(path).public_key() if path.exists() else None


def _read(path: Path) -> ed25519.Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise BadKey(f"{path} holds a key that is not Ed25519")
    return key


def _raw(public: ed25519.Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: ed25519.Ed25519PublicKey) -> str:
    """A short fingerprint naming the key in checkpoints (16 hex digits of its sha256)."""
    return hashlib.sha256(_raw(public)).hexdigest()[:16]


def public_text(key: ed25519.Ed25519PrivateKey) -> str:
    return PUBLIC_PREFIX + base64.b64encode(_raw(key.public_key())).decode()


def signer(key: ed25519.Ed25519PrivateKey) -> checkpoints.Signer:
    kid = key_id(key.public_key())

    def sign(message: bytes) -> tuple[str, str]:
        return kid, base64.b64encode(key.sign(message)).decode()

    return sign


def parse_public(text: str) -> ed25519.Ed25519PublicKey:
    """A public key from `ed25519:<base64>` or a PEM block; BadKey otherwise."""
    text = text.strip()[:MAX_PUBLIC_TEXT]
    if text.startswith("-----BEGIN"):
        try:
            loaded = serialization.load_pem_public_key(text.encode())
        except ValueError:
            raise BadKey("the PEM block is not a public key") from None
        if not isinstance(loaded, ed25519.Ed25519PublicKey):
            raise BadKey("the PEM block holds a key that is not Ed25519")
        return loaded
    if not text.startswith(PUBLIC_PREFIX):
        raise BadKey(
            f"a public key is {PUBLIC_PREFIX}<base64> (as `gatehouse audit key` prints it), "
            "a file holding that, or a PEM public key"
        )
    try:
        raw = base64.b64decode(text.removeprefix(PUBLIC_PREFIX), validate=True)
        return ed25519.Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError):
        raise BadKey(f"{PUBLIC_PREFIX} must be followed by 32 bytes in base64") from None


def check(public: ed25519.Ed25519PublicKey, message: bytes, signature: str) -> bool:
    try:
        public.verify(base64.b64decode(signature, validate=True), message)
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def checkpoint_check(
    publics: Sequence[ed25519.Ed25519PublicKey], refused: Mapping[str, str] | None = None
) -> events.SignatureCheck:
    """A check of a checkpoint's signature with these keys: the key its `key_id` names
    must be one of them, and must have signed exactly its event, hash and time.
    `refused` says why a key seen but not trusted (by its id) is not."""
    by_id = {key_id(public): public for public in publics}
    refused = refused or {}

    def problem(event_id: int, hash_: str, signed_at: int, kid: str, signature: str) -> str | None:
        public = by_id.get(kid)
        if public is None and kid in refused:
            return f"its signed checkpoint names key {kid[:16]!r}, not trusted: {refused[kid]}"
        if public is None:
            known = ", ".join(by_id) or "none: no audit-signing.key in the data directory"
            return (
                f"its signed checkpoint names key {kid[:16]!r}, which is not a key given "
                f"here (known: {known}); add the signer's --public-key"
            )
        if not check(public, checkpoints.message(event_id, hash_, signed_at), signature):
            return (
                f"its signed checkpoint's signature does not verify with key {kid}: the "
                "checkpoint or the chain before it was rewritten"
            )
        return None

    return problem
