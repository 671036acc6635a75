"""``queuelake health``: endpoint health from the audit trail (audit and error copies in the journal),
queue depth from the drain's ``runs`` rows, and the current gauges as OpenMetrics text."""
