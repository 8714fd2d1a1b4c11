"""Which signing keys a verify trusts: the data directory's own, those given, and each
worker's key that the deployment key endorsed.

    deployment = trust.deployment_key(secret)        # the same on every worker
    await store.write(signers.register_sync, trust.endorse(deployment, key, worker, now))
    check = await trust.signature_check(store, [local, *given], deployment.public_key())

Each worker signs checkpoints with the key in its own data directory, so after a change
of leader the newest checkpoint names a key the other workers' data directories lack.
Trust is rooted outside the database: the deployment key is an Ed25519 key every worker
derives from the secret they already share (GATEHOUSE_TELEGRAM__CALLBACK_SECRET, else
the bot token; a card one leader sent is tapped on another, so the workers share it
already). A leader stores its public key with the deployment key's signature over it;
a verify derives the deployment key itself and trusts a stored key only when that
signature checks. Someone who can write to the database but lacks the secret can store
a key, never an endorsement that checks, so the key earns nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import keys as audit_keys
from store.audit import events, signers
from store.db import Store

#: What the deployment key's seed is derived under (bump it to change every endorsement).
SEED_LABEL = b"gatehouse audit deployment key v1"
#: What an endorsement signs: this prefix, the key's id and its public key as text.
ENDORSE_PREFIX = "gatehouse-audit-signer:v1"


def deployment_key(secret: str) -> ed25519.Ed25519PrivateKey:
    """The deployment's key: an Ed25519 key whose seed is an HMAC of a fixed label under
    the secret every worker shares (so each derives the same key, and nobody stores it)."""
    seed = hmac.new(secret.encode(), SEED_LABEL, hashlib.sha256).digest()
    return ed25519.Ed25519PrivateKey.from_private_bytes(seed)


def endorsement_message(key_id: str, public_text: str) -> bytes:
    return f"{ENDORSE_PREFIX}:{key_id}:{public_text}".encode()


def endorse(
    deployment: ed25519.Ed25519PrivateKey,
    key: ed25519.Ed25519PrivateKey,
    worker: str,
    now: datetime,
) -> signers.Signer:
    """The row a leader stores for its own signing key, endorsed by the deployment key."""
    kid, public = audit_keys.key_id(key.public_key()), audit_keys.public_text(key)
    by, signature = audit_keys.signer(deployment)(endorsement_message(kid, public))
    return signers.Signer(kid, public, by, signature, worker, now)


def endorsed(
    row: signers.Signer, deployment: ed25519.Ed25519PublicKey
) -> ed25519.Ed25519PublicKey | None:
    """The row's public key when the deployment key really endorsed it; None otherwise
    (another deployment's key, or a row written without the secret)."""
    if row.endorsed_by != audit_keys.key_id(deployment):
        return None
    try:
        public = audit_keys.parse_public(row.public_key)
    except audit_keys.BadKey:
        return None
    if audit_keys.key_id(public) != row.key_id:
        return None
    message = endorsement_message(row.key_id, row.public_key)
    return public if audit_keys.check(deployment, message, row.endorsement) else None


async def signature_check(
    store: Store,
    publics: Sequence[ed25519.Ed25519PublicKey],
    deployment: ed25519.Ed25519PublicKey | None,
) -> events.SignatureCheck:
    """A checkpoint check trusting `publics` and every stored key that `deployment`
    endorsed; a stored key it did not endorse is named as such when a checkpoint names it."""
    rows = await store.read(signers.all_sync)
    trusted, refused = list(publics), {}
    for row in rows:
        public = endorsed(row, deployment) if deployment is not None else None
        if public is not None:
            trusted.append(public)
            continue
        # The worker's name is whatever the row says: quoted, bounded, never believed.
        held = f"the store holds it (said to be from {row.worker[:60]!r})"
        if deployment is None:
            refused[row.key_id] = (
                f"{held}, but no deployment secret is set here to check its endorsement "
                "(GATEHOUSE_TELEGRAM__CALLBACK_SECRET or GATEHOUSE_TELEGRAM__TOKEN, as the "
                "workers have it)"
            )
        else:
            refused[row.key_id] = (
                f"{held}, but its endorsement does not check with this deployment's key: "
                "no worker holding the deployment's secret registered it"
            )
    return audit_keys.checkpoint_check(trusted, refused)
