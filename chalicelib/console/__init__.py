"""The web console's server side, in one place: its static files and the headers they go out
with (files.py), and the copy of the service's rules the console reads, written from the
service's own tables (rules.py). The routes that serve both are api/console.py (HTTP routes
live in api/); the console's own code is console/ at the repository root."""
