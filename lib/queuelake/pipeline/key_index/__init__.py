"""The journal's id index (``message_keys``): built by ``maintain`` (``build``, ``rewrite``), read by
``find`` and ``where`` (``search``)."""
