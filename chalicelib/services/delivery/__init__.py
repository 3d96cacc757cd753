"""Delivering outgoing messages: claiming a due message, holding what must not go, preparing
the bytes (tracking, unsubscribe headers, DKIM), how it leaves (the IP pool's address or its
relay, the MX hosts resolved through DNS_RESOLVERS, MTA-STS), per-destination pacing
(connections, messages a minute, backoff after a throttle reply, shared by every worker), the
SMTP conversation, recording the attempt and the retry schedule, bounce categories, capture,
IP pools and the reverse DNS of their addresses, and the outbound relay's service."""
