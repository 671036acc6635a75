"""The NServiceBus wire format, and nothing else: header names and their JSON codec, wire times, .NET
TimeSpans and type names, ServiceControl's retry headers, and the bulk decoders and writer of header
JSON. No other part of queuelake knows the wire; this package knows no queue database, lake or
setting (it imports only queuelake's base modules)."""
