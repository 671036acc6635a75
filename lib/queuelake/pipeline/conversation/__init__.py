"""One conversation out of the journal: its messages merged from every copy, and drawn as a sequence."""
