"""Opens and clicks: rewriting outgoing HTML, recording opens and clicks (telling machines from
people), and a server's statistics."""
