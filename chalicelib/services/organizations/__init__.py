"""Organizations, their servers and the servers' credentials, and finding any of them with the
permission check in the same step."""
