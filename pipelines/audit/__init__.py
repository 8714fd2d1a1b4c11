"""The audit log beyond the store: the signing key (keys), signed chain heads and the
day's head posted to the operators (witness), and exports checked offline (export)."""
