"""What differs between the SQL servers, as pure rules: the dialect objects (``dialect.py``) and the
queue addresses and quoting each binds (``address.py``). No settings and no connections: config
validates ``transport.dialect`` with them, and the transport runs what they say."""
