"""Client telemetry (KIP-714): subscriptions handed to clients, their pushed metrics decoded
(``otlp``) and kept for the Prometheus endpoint (``export``); ``manager`` has the rules."""
