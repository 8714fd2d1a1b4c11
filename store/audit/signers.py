"""The workers' public signing keys in the store, each with the deployment key's
endorsement, so a verify on any worker can check another leader's checkpoints.

    new = await store.write(signers.register_sync, signer, now)   # True: first time here
    found = await store.read(signers.all_sync)

The store only keeps what it is given: it never sees a private key and never decides
trust. A row is a claim; whoever reads it checks its endorsement with a deployment key
derived outside the database (pipelines.audit.trust), so a row written by hand earns
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, sql

Q = sql.load("signers")


@dataclass(frozen=True)
class Signer(backend.Record):
    #: The key's fingerprint, as its checkpoints name it.
    key_id: str
    #: The public key as text (`ed25519:<base64>`).
    public_key: str
    #: The id of the deployment key that endorsed it.
    endorsed_by: str
    #: That key's signature over the endorsement message, in base64.
    endorsement: str
    #: Which worker registered it (its host and process), for the operators.
    worker: str
    registered_at: datetime


def register_sync(conn: backend.Conn, signer: Signer) -> bool:
    """Keep `signer`, or endorse its key anew; True when the key was not here before."""
    params = {
        "key_id": signer.key_id,
        "public_key": signer.public_key,
        "endorsed_by": signer.endorsed_by,
        "endorsement": signer.endorsement,
        "worker": signer.worker,
        "registered_at": clock.to_ms(signer.registered_at),
    }
    known = backend.fetch_one(conn, Q["find"], {"key_id": signer.key_id}, Signer.from_row)
    if known is None:
        conn.execute(Q["insert"], params)
        return True
    if (known.public_key, known.endorsement) != (signer.public_key, signer.endorsement):
        conn.execute(Q["endorse_again"], params)
    return False


def all_sync(conn: backend.Conn) -> list[Signer]:
    return backend.fetch_all(conn, Q["all"], {}, Signer.from_row)
