"""Delivering outgoing messages: claiming a due message, holding what must not go, preparing
the bytes (tracking, unsubscribe headers, DKIM), how it leaves (the IP pool's address or its
relay, the MX hosts resolved through DNS_RESOLVERS, MTA-STS), the SMTP conversation, recording
the attempt and the retry schedule, bounce categories, capture, IP pools and the outbound
relay's service."""
