"""``queuelake failures``: the journal's failed messages grouped as ServicePulse groups them (exception
type, message type, endpoint, stack-trace fingerprint), with the ``replay --where`` of each group."""
