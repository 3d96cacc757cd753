"""DMARC aggregate reports (RFC 7489 ``rua``) about the tenants' sending domains: the address
each domain's DMARC record asks receivers to send them to (and the authorization record that
address needs on another domain), reading a report out of the mail that carries it with hard
limits (XML, gzip or zip; no DTDs or entities), storing it per record, and what the API and
the console show of them (reports, rows, sources and whether a source is ours, pass rate over
time). The gateway hands mail for a report address to ``intake``; nothing here speaks SMTP."""
