"""The approval step: cards and decisions, quorum, the card's trail after a decision and
the SLA sweep."""
