"""Public routes: no credential (tracking pixel and click redirects)."""
