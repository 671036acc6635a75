"""``queuelake demo`` and what it is made of: the command (``command.py``), the run end to end
(``end_to_end.py``), the NServiceBus traffic it seeds (``traffic.py``, with ``conversations.py`` and
``sized_audits.py`` for the tests and benches), and the worked transform over it (``orders.py``)."""
