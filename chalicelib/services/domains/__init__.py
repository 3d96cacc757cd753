"""Sending domains: creating and verifying them, the DNS records to publish, their return-path
and tracking host names, the scheduled DNS health checks, and reserved names."""
