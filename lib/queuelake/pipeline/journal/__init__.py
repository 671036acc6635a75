"""The ``messages`` journal: a received batch turned into its rows (``build``), the rows that cannot be
built or stored quarantined (``quarantine``), the raw text those rows keep (``text``), and the
table's name and schema (``schema``, the catalogue's)."""
