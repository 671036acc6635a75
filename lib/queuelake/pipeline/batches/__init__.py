"""The ledger-keyed batch sender that publish and replay share: the batch keys' grammar (``keys``) and
the loop that sends each batch with its ledger row in one transaction (``sender``)."""
