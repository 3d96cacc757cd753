"""Personal data on request: removing everything stored about one recipient address (a data
subject's request) across a server, an organization or the installation (``removal.py``).
The statistics' counters are rolled up without addresses and stay."""
