"""The per-server suppression list: entries, import and export, and one-click unsubscribe."""
